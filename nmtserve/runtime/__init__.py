"""Torch-free runtimes that drive the exported graphs (ONNX Runtime here; TensorRT on GPU)."""
