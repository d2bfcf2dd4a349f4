"""``step_backend: bls``: the engine's runtime through Triton BLS calls to the graph models."""

from __future__ import annotations

import numpy as np

from .. import graphs

try:  # only importable inside the Triton Python backend stub
    import triton_python_backend_utils as pb_utils
except ImportError:  # pragma: no cover - unit tests import this module outside Triton
    pb_utils = None


class BlsRuntime:
    """The engine's runtime through BLS calls to the ``encoder`` / ``decoder`` models.

    The alternative to in-process ONNX Runtime (``step_backend: bls``), measured in bench/:
    every step ships the cache window and cross K/V to another model through shared memory.
    """

    def __init__(self, spec):
        self.spec = spec
        self.has_attention = True  # the repository's decoder model lists the graph's outputs
        self._enc_out = [t.name for t in graphs.encoder_outputs(spec.dims)]

    def _call(self, model: str, feeds: dict[str, np.ndarray], outputs: list[str]) -> list[np.ndarray]:
        request = pb_utils.InferenceRequest(
            model_name=model,
            inputs=[pb_utils.Tensor(k, np.ascontiguousarray(v)) for k, v in feeds.items()],
            requested_output_names=outputs,
        )
        response = request.exec()
        if response.has_error():
            raise RuntimeError(f"{model}: {response.error().message()}")
        return [pb_utils.get_output_tensor_by_name(response, n).as_numpy() for n in outputs]

    def encode(self, src_ids: np.ndarray):
        out = self._call("encoder", {"src_ids": src_ids.astype(np.int32)}, self._enc_out)
        return graphs.split_memory(dict(zip(self._enc_out, out, strict=True)), self.spec.layers)

    def run_step(self, feeds: dict[str, np.ndarray], outputs=graphs.STEP_OUTPUTS) -> dict[str, np.ndarray]:
        names = list(outputs)
        return dict(zip(names, self._call("decoder", feeds, names), strict=True))
