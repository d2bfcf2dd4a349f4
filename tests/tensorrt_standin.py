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
import enum
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


class Dims:
    """A shape as TensorRT returns it: a sequence of ints (indexing, ``len``, iteration through
    indexing, equality with a tuple or list), not a tuple (no hash, no tuple methods)."""

    __hash__ = None  # type: ignore[assignment]

    def __init__(self, shape=()):
        self._dims = [int(d) for d in shape]

    def __len__(self) -> int:
        return len(self._dims)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return tuple(self._dims[index])
        return self._dims[index]  # IndexError past the end: iteration stops there

    def __eq__(self, other) -> bool:
        if isinstance(other, Dims):
            return self._dims == other._dims
        if isinstance(other, (tuple, list)):
            return self._dims == [int(d) for d in other]
        return NotImplemented

    def __repr__(self) -> str:
        return f"({', '.join(map(str, self._dims))}{',' if len(self._dims) == 1 else ''})"


class TensorIOMode(enum.Enum):
    NONE = 0
    INPUT = 1
    OUTPUT = 2


class DataType(enum.Enum):
    FLOAT = 0
    HALF = 1
    INT8 = 2
    INT32 = 3
    BOOL = 4
    UINT8 = 5
    FP8 = 6
    BF16 = 7
    INT64 = 8
    INT4 = 9


float32, float16, int32, int64, bool = DataType.FLOAT, DataType.HALF, DataType.INT32, DataType.INT64, DataType.BOOL
_NUMPY = {DataType.FLOAT: np.float32, DataType.HALF: np.float16, DataType.INT32: np.int32,
          DataType.INT64: np.int64, DataType.BOOL: np.bool_, DataType.INT8: np.int8, DataType.UINT8: np.uint8}
_FROM_NUMPY = {np.dtype(v): k for k, v in _NUMPY.items()}


class Logger:
    class Severity(enum.Enum):
        INTERNAL_ERROR = 0
        ERROR = 1
        WARNING = 2
        INFO = 3
        VERBOSE = 4

    INTERNAL_ERROR, ERROR, WARNING, INFO, VERBOSE = Severity

    def __init__(self, min_severity: Logger.Severity = Severity.WARNING):
        if not isinstance(min_severity, Logger.Severity):
            raise TypeError(f"Logger takes a Logger.Severity, got {min_severity!r}")
        self.min_severity = min_severity


def nptype(trt_type: DataType) -> type:
    """TensorRT's own helper: the numpy type of a DataType (a DataType only, as TensorRT's)."""
    if not isinstance(trt_type, DataType):
        raise TypeError(f"nptype takes a tensorrt.DataType, got {trt_type!r}")
    return _NUMPY[trt_type]


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

    def get_tensor_mode(self, name: str) -> TensorIOMode:
        return self.by_name[name][1]

    def get_tensor_dtype(self, name: str) -> DataType:
        return _FROM_NUMPY[self.numpy_dtype(name)]

    def numpy_dtype(self, name: str) -> np.dtype:
        return _ORT_TYPES[self.by_name[name][0].type]

    def get_tensor_shape(self, name: str) -> Dims:
        return Dims(d if isinstance(d, int) else -1 for d in self.by_name[name][0].shape)

    def get_tensor_profile_shape(self, name: str, profile_index: int) -> list[Dims]:
        assert profile_index == 0
        return [Dims(x) for x in self.profile[name]]

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
        shape = tuple(int(shape[i]) for i in range(len(shape)))  # a tuple, list or Dims
        if len(shape) != len(lo) or any(not a <= s <= b for a, s, b in zip(lo, shape, hi, strict=True)):
            return False
        self.shapes[name] = shape
        return True

    def get_tensor_shape(self, name: str) -> Dims:
        """Output shapes from the input shapes, through the symbolic axes of the ONNX graph."""
        sizes = {}
        for t, mode in self.engine.io:
            if mode == TensorIOMode.INPUT and t.name in self.shapes:
                sizes.update({a: s for a, s in zip(t.shape, self.shapes[t.name], strict=True) if isinstance(a, str)})
        return Dims(d if isinstance(d, int) else sizes.get(d, -1) for d in self.engine.by_name[name][0].shape)

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
                feeds[t.name] = _view(self.addresses[t.name], self.shapes[t.name], engine.numpy_dtype(t.name)).copy()
        names = [t.name for t, mode in engine.io if mode == TensorIOMode.OUTPUT]
        for name, value in zip(names, engine.session.run(names, feeds), strict=True):
            shape = self.get_tensor_shape(name)[:]
            if tuple(value.shape) != shape:
                return False
            _view(self.addresses[name], shape, engine.numpy_dtype(name))[...] = value
        self.executions += 1
        return True


# ---- a network description, for the fp16 build's precision rule (no builder: nothing is built) ----

class LayerType(enum.Enum):
    MATRIX_MULTIPLY = 0
    SOFTMAX = 1
    REDUCE = 2
    TOPK = 3
    UNARY = 4
    NORMALIZATION = 5
    SHAPE = 6
    ELEMENTWISE = 7


class UnaryOperation(enum.Enum):
    EXP = 0
    LOG = 1
    ABS = 2


class ITensor:
    def __init__(self, dtype: DataType):
        self.dtype = dtype


class ILayer:
    """A layer's precision and output types as TensorRT keeps them, with TensorRT's documented
    refusal: ``set_output_type`` cannot make an integer output (TopK's indices, an integer
    reduce or shape) floating point."""

    def __init__(self, type: LayerType, outputs: list[DataType], op: UnaryOperation | None = None):
        self.type, self._outputs, self._op = type, [ITensor(d) for d in outputs], op
        self.precision = DataType.FLOAT
        self.output_types: dict[int, DataType] = {}
        self.precision_set = False

    @property
    def num_outputs(self) -> int:
        return len(self._outputs)

    def get_output(self, index: int) -> ITensor:
        return self._outputs[index]

    def __setattr__(self, name, value):
        if name == "precision" and "precision" in self.__dict__:
            if not isinstance(value, DataType):
                raise TypeError(f"precision takes a DataType, got {value!r}")
            self.__dict__["precision_set"] = True
        object.__setattr__(self, name, value)

    def set_output_type(self, index: int, dtype: DataType) -> None:
        if not isinstance(dtype, DataType):
            raise TypeError(f"set_output_type takes a DataType, got {dtype!r}")
        if self._outputs[index].dtype not in (DataType.FLOAT, DataType.HALF, DataType.BF16):
            raise RuntimeError(f"set_output_type cannot set output {index} of a {self.type.name} layer: it is "
                               f"{self._outputs[index].dtype.name}")
        self.output_types[index] = dtype


class IUnaryLayer(ILayer):
    @property
    def op(self) -> UnaryOperation:
        assert self._op is not None
        return self._op


class INetworkDefinition:
    def __init__(self, layers: list[ILayer]):
        self._layers = layers

    @property
    def num_layers(self) -> int:
        return len(self._layers)

    def get_layer(self, index: int) -> ILayer:
        layer = self._layers[index]
        plain = ILayer.__new__(ILayer)  # TensorRT hands out the base class; .op needs the downcast
        plain.__dict__ = layer.__dict__
        return plain
