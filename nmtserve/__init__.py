"""nmtserve: serve encoder-decoder Transformer translation models on NVIDIA Triton."""

__version__ = "0.1.0"
