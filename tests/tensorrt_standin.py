"""A stand-in for the ``tensorrt`` module, so ``nmtserve.runtime.tensorrt`` runs on a CPU machine.

It implements the slice of the TensorRT 10 Python API that the runtime uses, with the documented
semantics: named I/O tensors, ``get_tensor_profile_shape`` -> [min, opt, max],
``set_input_shape`` -> False outside the profile, outputs shaped from the inputs, and execution
that reads every input from and writes every output to the raw address bound with
``set_tensor_address``. The "plan" is a JSON file naming an exported ONNX graph and its build
options, and execution runs that graph on ONNX Runtime: the numbers are real, only the engine
is not TensorRT. It checks the runtime's wiring (addresses, shapes, buffer reuse, dtypes), not
TensorRT.
"""

from __future__ import annotations

import ctypes
import json
from pathlib import Path

import numpy as np
import onnxruntime as ort

from nmtserve import graphs
from nmtserve.export.tensorrt import BuildOptions, profile_shapes
from nmtserve.runtime.arrays import ArrayBackend

_ORT_TYPES = {"tensor(float)": np.dtype(np.float32), "tensor(float16)": np.dtype(np.float16),
              "tensor(int32)": np.dtype(np.int32), "tensor(int64)": np.dtype(np.int64),
              "tensor(bool)": np.dtype(np.bool_)}


__version__ = "10.5.0-standin"
ALIGNMENT = 256  # what TensorRT requires of every bound I/O address


class AlignedHost(ArrayBackend):
    """Host arrays whose allocations start on a 256-byte boundary, as CUDA allocations do, so
    that the stand-in can insist on aligned addresses as TensorRT does."""

    def empty(self, shape, dtype):
        dtype = np.dtype(dtype)
        n = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        raw = np.empty(n + ALIGNMENT, np.uint8)
        offset = (-raw.ctypes.data) % ALIGNMENT
        return raw[offset : offset + n].view(dtype).reshape(shape)

    def zeros(self, shape, dtype):
        out = self.empty(shape, dtype)
        out[...] = 0
        return out

    def asarray(self, host):
        out = self.empty(np.shape(host), np.asarray(host).dtype)
        out[...] = host
        return out

    def ascontiguous(self, array):
        return array if array.flags.c_contiguous else self.asarray(array)


ALIGNED_HOST = AlignedHost()


class Logger:
    WARNING = 2

    def __init__(self, severity: int = WARNING):
        self.severity = severity


class TensorIOMode:
    INPUT = "INPUT"
    OUTPUT = "OUTPUT"


def nptype(dtype: np.dtype) -> type:
    return dtype.type


def write_plan(path: Path, onnx_path: Path, inputs: list[graphs.Tensor], opts: BuildOptions) -> Path:
    """What the stand-in "builds": the ONNX path and the optimization profile."""
    shapes = {k: [list(x) for x in v] for k, v in profile_shapes(inputs, opts).items()}
    path.write_text(json.dumps({"onnx": str(onnx_path), "profile": shapes}))
    return path


class Runtime:
    def __init__(self, logger: Logger):
        self.logger = logger

    def deserialize_cuda_engine(self, data: bytes):
        try:
            plan = json.loads(bytes(data))
        except ValueError:
            return None  # what TensorRT does with a plan it cannot read
        return _Engine(plan)


class _Engine:
    def __init__(self, plan: dict):
        self.session = ort.InferenceSession(plan["onnx"], providers=["CPUExecutionProvider"])
        self.profile = {k: [tuple(x) for x in v] for k, v in plan["profile"].items()}
        self.io = [(i, TensorIOMode.INPUT) for i in self.session.get_inputs()]
        self.io += [(o, TensorIOMode.OUTPUT) for o in self.session.get_outputs()]
        self.by_name = {t.name: (t, mode) for t, mode in self.io}

    @property
    def num_io_tensors(self) -> int:
        return len(self.io)

    def get_tensor_name(self, index: int) -> str:
        return self.io[index][0].name

    def get_tensor_mode(self, name: str) -> str:
        return self.by_name[name][1]

    def get_tensor_dtype(self, name: str) -> np.dtype:
        return _ORT_TYPES[self.by_name[name][0].type]

    def get_tensor_shape(self, name: str) -> tuple[int, ...]:
        return tuple(d if isinstance(d, int) else -1 for d in self.by_name[name][0].shape)

    def get_tensor_profile_shape(self, name: str, profile_index: int) -> list[tuple[int, ...]]:
        assert profile_index == 0
        return self.profile[name]

    def create_execution_context(self):
        return _Context(self)


def _view(address: int, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    nbytes = int(np.prod(shape)) * dtype.itemsize
    return np.frombuffer((ctypes.c_char * nbytes).from_address(address), dtype=dtype).reshape(shape)


class _Context:
    def __init__(self, engine: _Engine):
        self.engine = engine
        self.shapes: dict[str, tuple[int, ...]] = {}
        self.addresses: dict[str, int] = {}
        self.executions = 0
        self.streams: set[int] = set()  # the stream handles executions were enqueued on

    def set_input_shape(self, name: str, shape) -> bool:
        lo, _, hi = self.engine.profile[name]
        shape = tuple(int(x) for x in shape)
        if len(shape) != len(lo) or any(not a <= s <= b for a, s, b in zip(lo, shape, hi, strict=True)):
            return False
        self.shapes[name] = shape
        return True

    def get_tensor_shape(self, name: str) -> tuple[int, ...]:
        """Output shapes from the input shapes, through the symbolic axes of the ONNX graph."""
        sizes = {}
        for t, mode in self.engine.io:
            if mode == TensorIOMode.INPUT and t.name in self.shapes:
                sizes.update({a: s for a, s in zip(t.shape, self.shapes[t.name], strict=True) if isinstance(a, str)})
        return tuple(d if isinstance(d, int) else sizes.get(d, -1) for d in self.engine.by_name[name][0].shape)

    def set_tensor_address(self, name: str, address: int) -> bool:
        """False, as TensorRT 10, for a name that is not an I/O tensor of the engine or an
        address that is not 256-byte aligned (nothing is bound then)."""
        if name not in self.engine.by_name or int(address) % ALIGNMENT:
            return False
        self.addresses[name] = int(address)
        return True

    def execute_async_v3(self, stream_handle: int) -> bool:
        self.streams.add(int(stream_handle))
        engine = self.engine
        feeds = {}
        for t, mode in engine.io:
            if mode == TensorIOMode.INPUT:
                feeds[t.name] = _view(self.addresses[t.name], self.shapes[t.name], engine.get_tensor_dtype(t.name)).copy()
        names = [t.name for t, mode in engine.io if mode == TensorIOMode.OUTPUT]
        for name, value in zip(names, engine.session.run(names, feeds), strict=True):
            shape = self.get_tensor_shape(name)
            if tuple(value.shape) != shape:
                return False
            _view(self.addresses[name], shape, engine.get_tensor_dtype(name))[...] = value
        self.executions += 1
        return True
