"""The engine's step runtime for a ``generate`` model's ``step_backend`` parameter."""

from __future__ import annotations

import logging
from pathlib import Path

from ..runtime.spec import STEP_BACKENDS

log = logging.getLogger("nmtserve.server")


def step_runtime(params: dict, version_dir: Path, folder: Path, spec, threads: int | None, device_id: int = 0):
    """The engine's runtime for its ``step_backend`` parameter (``runtime.spec.STEP_BACKENDS``)."""
    backend = params.get("step_backend", "inprocess")
    encoder, decoder = folder / "encoder.onnx", folder / "decoder.onnx"
    if backend == "inprocess":
        from ..runtime.onnxruntime import OnnxModel

        # Optional ONNX Runtime providers in preference order; the arrays stay on the host.
        providers = [p.strip() for p in params.get("providers", "").split(",") if p.strip()] or None
        runtime = OnnxModel(encoder, decoder, spec, threads=threads, providers=providers)
        if providers and runtime.decoder.get_providers()[0] != providers[0]:
            log.warning("generate: %s is unavailable here; running on %s", providers[0],
                        runtime.decoder.get_providers())
        return runtime
    if backend == "tensorrt":  # pragma: no cover - needs CUDA and TensorRT
        from ..runtime.tensorrt import TensorRTModel

        return TensorRTModel((version_dir / params["encoder_plan"]).resolve(),
                             (version_dir / params["decoder_plan"]).resolve(), spec, device_id=device_id)
    if backend == "onnxruntime-cuda":  # pragma: no cover - needs CUDA
        from ..runtime.arrays import CupyArrays
        from ..runtime.onnxruntime import OnnxBoundModel

        return OnnxBoundModel(encoder, decoder, spec, arrays=CupyArrays(device_id), threads=threads)
    if backend == "bls":
        from ..runtime.bls import BlsRuntime

        return BlsRuntime(spec)
    raise ValueError(f"generate: step_backend must be one of {', '.join(STEP_BACKENDS)}, got {backend!r}")
