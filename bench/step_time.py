"""One decoder step of every backend this machine has, timed at a fixed shape (from scripts/gpu-check).

    python bench/step_time.py [--device cuda] [--batch 16] [--beam 4] [--past 32] [--source 24]

The demo model's decoder step (``Transformer.decode_step`` in PyTorch on ``--device``, fp32 and,
on CUDA, fp16; the exported graph on ONNX Runtime's CPU provider and, where onnxruntime-gpu is
installed, its CUDA provider) with host feeds of one fixed shape: mean milliseconds per step and
hypothesis-steps per second. ONNX Runtime's figures include uploading the cache window each
call, which the served engine never does: the engine rows of scripts/gpu-check and
bench/compare.py are the served path.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from nmtserve import graphs

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import DEFAULT_CHECKPOINT, markdown_table  # noqa: E402


def step_feeds(spec, batch: int, beam: int, past: int, src: int) -> dict[str, np.ndarray]:
    """A decoder input of a fixed shape (random contents of the right types)."""
    rng = np.random.default_rng(0)
    rows = batch * beam
    cache = (past, rows, spec.layers, spec.heads, spec.d_k)
    return graphs.decoder_feeds(
        input_ids=rng.integers(4, spec.vocab, (batch, beam)).astype(np.int32),
        position=np.full((batch,), past, np.int32),
        past_key=rng.standard_normal(cache, np.float32), past_value=rng.standard_normal(cache, np.float32),
        cache_rows=rng.integers(0, rows, (batch, beam, past)).astype(np.int32),
        past_mask=np.ones((batch, past), bool),
        memory_keys=[rng.standard_normal((batch, spec.heads, spec.d_k, src), np.float32) for _ in range(spec.layers)],
        memory_values=[rng.standard_normal((batch, spec.heads, src, spec.d_k), np.float32) for _ in range(spec.layers)],
        src_mask=np.ones((batch, src), bool),
    )


def time_calls(fn, sync=lambda: None, warmup: int = 5, seconds: float = 1.0) -> float:
    """Median-free simple figure: mean seconds per call over about ``seconds`` after warm-up."""
    for _ in range(warmup):
        fn()
    sync()
    calls, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        fn()
        calls += 1
    sync()
    return (time.perf_counter() - started) / calls


def torch_step_fn(candidate, spec, feeds):
    """One decode_step of ``candidate`` (a ``TorchRuntime``) with the feeds already on its device."""
    import torch

    n = spec.layers
    dev, dtype = candidate.device, candidate.dtype

    def t(name, float_=False):
        x = torch.from_numpy(feeds[name]).to(dev)
        return x.to(dtype) if float_ else x

    args = (t("input_ids").long(), t("position").long(),
            t("past_key", True), t("past_value", True),
            t("cache_rows").long(), t("past_mask"),
            [t(f"memory_key.{i}", True) for i in range(n)], [t(f"memory_value.{i}", True) for i in range(n)],
            t("src_mask"))

    def call():
        with torch.no_grad():
            candidate.model.decode_step(*args)

    return call


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--past", type=int, default=32)
    parser.add_argument("--source", type=int, default=24)
    args = parser.parse_args(argv)
    import onnxruntime as ort
    import torch

    from nmtserve import graphs
    from nmtserve.export.onnx_export import export_decoder, export_encoder
    from nmtserve.model.checkpoint import load_checkpoint
    from nmtserve.model.reference import TorchRuntime
    from nmtserve.runtime.onnxruntime import OnnxModel

    model = load_checkpoint(DEFAULT_CHECKPOINT).model.eval()
    torch_ref = TorchRuntime(model)
    spec = torch_ref.spec
    feeds = step_feeds(spec, args.batch, args.beam, args.past, args.source)
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    hyps = args.batch * args.beam
    rows = []
    for dtype in (torch.float32, torch.float16) if args.device == "cuda" else (torch.float32,):
        runtime = TorchRuntime(model, args.device, dtype)
        step = time_calls(torch_step_fn(runtime, spec, feeds), sync)
        rows.append([f"torch {args.device} {str(dtype).removeprefix('torch.')}", step * 1e3, hyps / step])
    with tempfile.TemporaryDirectory() as tmp:
        encoder = export_encoder(model, Path(tmp) / "encoder.onnx")
        decoder = export_decoder(model, Path(tmp) / "decoder.onnx")
        for provider in ("CPUExecutionProvider", "CUDAExecutionProvider"):
            if provider not in ort.get_available_providers():
                continue
            onnx_model = OnnxModel(encoder, decoder, spec, providers=[provider])
            step = time_calls(lambda m=onnx_model: m.run_step(feeds, graphs.STEP_OUTPUTS))
            rows.append([f"onnxruntime {provider.removesuffix('ExecutionProvider')}", step * 1e3, hyps / step])
    print(f"decoder step at batch {args.batch} x beam {args.beam}, past {args.past}, source {args.source}")
    print(markdown_table(["backend", "ms / step", "hyp-steps / s"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
