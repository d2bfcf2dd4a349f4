"""Where the decoding engine's big arrays live: host memory (NumPy) or a CUDA GPU (CuPy).

The in-flight batcher keeps the self-attention cache pool and the cross-attention memory in the
arrays of its runtime's backend and only ever touches them through this interface, so on a GPU
they stay on the device for the whole decode: a step uploads the small index tables (token ids,
positions, ``cache_rows``, masks) and downloads each hypothesis' best 2K+1 log-probabilities
and token ids (picked inside the decoder graph); the cache never crosses.

``ArrayBackend`` itself is NumPy (``HOST``, the CPU runtimes). ``CupyArrays`` is CuPy on one
GPU with one non-blocking CUDA stream that TensorRT and ONNX Runtime are given too, so every
kernel of a step is ordered on one stream without device-wide synchronisation.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

log = logging.getLogger(__name__)


class ArrayBackend:
    """The operations the engine and the bound runtimes need; NumPy semantics."""

    name = "numpy"
    device_type = "cpu"  # ONNX Runtime's name for the memory the arrays are in
    device_id = 0

    def activate(self) -> None:
        """Make this backend's device and stream current in the calling thread (CUDA state is per thread)."""

    def zeros(self, shape: tuple[int, ...], dtype: Any) -> Any:
        return np.zeros(shape, dtype)

    def empty(self, shape: tuple[int, ...], dtype: Any) -> Any:
        return np.empty(shape, dtype)

    def is_device(self, array: Any) -> bool:
        """Whether ``array`` is already in this backend's memory (needs no upload)."""
        return isinstance(array, np.ndarray)

    def asarray(self, host: np.ndarray) -> Any:
        """Upload a host array (contiguous on arrival)."""
        return np.ascontiguousarray(host)

    def asnumpy(self, array: Any) -> np.ndarray:
        """Download to a host array, waiting for the work that produces it."""
        return np.asarray(array)

    def pointer(self, array: Any) -> int:
        """Address of the first element; ``array`` must be C-contiguous."""
        if not array.flags.c_contiguous:
            raise ValueError("only C-contiguous arrays can be bound by address")
        return int(array.ctypes.data)

    def ascontiguous(self, array: Any) -> Any:
        return np.ascontiguousarray(array)

    def stream_handle(self) -> int:
        """The CUDA stream work is ordered on (0: none / the default stream)."""
        return 0

    def synchronize(self) -> None:
        pass


HOST = ArrayBackend()


class CupyArrays(ArrayBackend):  # pragma: no cover - needs CUDA and CuPy
    """CuPy arrays on GPU ``device_id``, ordered on one non-blocking stream."""

    name = "cupy"
    device_type = "cuda"

    def __init__(self, device_id: int = 0):
        try:
            import cupy
        except ImportError as exc:
            raise RuntimeError(
                "the GPU step runtime keeps its cache in CuPy arrays: pip install 'nmtserve[serve-gpu]' (cupy-cuda12x)"
            ) from exc
        self.cp = cupy
        self.device_id = device_id
        with cupy.cuda.Device(device_id):
            self.stream = cupy.cuda.Stream(non_blocking=True)

    def activate(self) -> None:
        self.cp.cuda.Device(self.device_id).use()
        self.stream.use()

    def zeros(self, shape, dtype):
        return self.cp.zeros(shape, dtype)

    def empty(self, shape, dtype):
        return self.cp.empty(shape, dtype)

    def is_device(self, array) -> bool:
        return isinstance(array, self.cp.ndarray)

    def asarray(self, host):
        return self.cp.asarray(np.ascontiguousarray(host))

    def asnumpy(self, array) -> np.ndarray:
        return self.cp.asnumpy(array, stream=self.stream, blocking=True)

    def pointer(self, array) -> int:
        if not array.flags.c_contiguous:
            raise ValueError("only C-contiguous arrays can be bound by address")
        return int(array.data.ptr)  # a view's pointer includes its offset

    def ascontiguous(self, array):
        return self.cp.ascontiguousarray(array)

    def stream_handle(self) -> int:
        return int(self.stream.ptr)

    def synchronize(self) -> None:
        self.stream.synchronize()
