"""The exported graphs as TensorRT engines, with every buffer on the GPU (``generate`` on a GPU).

``TensorRTModel`` is the in-flight batcher's ``StepRuntime`` for the plans that
``nmtserve.export.engines`` builds at container start. Its arrays backend is CuPy
(``CupyArrays``): the batcher's self-attention cache pool and cross-attention memory are device
arrays whose addresses go straight to ``IExecutionContext.set_tensor_address``, the new K/V of a
step land in device buffers that the batcher scatters into the pool with a device kernel, and
all of it is ordered on one CUDA stream. Per step the host uploads the small tables (token ids,
positions, ``cache_rows``, masks) and downloads each hypothesis' best 2K+1 log-probs, which the
batcher picks on the device; the cache never crosses the bus.

Written against the TensorRT 10 Python API (``Runtime.deserialize_cuda_engine``, named I/O
tensors, ``set_input_shape``, ``set_tensor_address``, ``execute_async_v3``). It needs a CUDA GPU,
TensorRT and CuPy, none of which exist on the CPU machines this project is tested on; there the
tests run it on host arrays against a TensorRT stand-in (``tests/tensorrt_standin.py``), and
``scripts/gpu-check`` runs it for real against PyTorch on a GPU.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .. import graphs
from .arrays import ArrayBackend, CupyArrays
from .spec import ModelSpec

if TYPE_CHECKING:
    import tensorrt as trt

log = logging.getLogger(__name__)

# TensorRT wants I/O addresses aligned; 256 bytes is what cudaMalloc gives and what it documents.
ALIGNMENT = 256


class TensorRTRuntimeError(RuntimeError):
    pass


def tensorrt_module():
    """The TensorRT Python module, or None: ``tensorrt`` (the full wheels), else
    ``tensorrt_bindings`` (the bindings-only wheel the GPU image installs over its own
    libnvinfer, docker/tensorrt-python.sh)."""
    import importlib  # noqa: PLC0415

    for name in ("tensorrt", "tensorrt_bindings"):
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    return None


def import_tensorrt(error: type[Exception] = TensorRTRuntimeError):
    """The TensorRT module (``tensorrt_module``); where there is none, ``error`` saying how to
    install it (the engine builder raises its own TensorRTUnavailable)."""
    trt = tensorrt_module()
    if trt is None:
        raise error(
            "TensorRT is not installed: the GPU image installs the bindings matching its TensorRT "
            "(docker/tensorrt-python.sh); elsewhere pip install 'nmtserve[gpu]'"
        )
    return trt


def check_io(name: str, found: dict[str, tuple[str, int]], expected: list[graphs.Tensor], float_dtype: str) -> None:
    """The plan's I/O tensors against the graph contract: names, dtypes and ranks (one message for all)."""
    problems = []
    for t in expected:
        if t.name not in found:
            problems.append(f"missing tensor {t.name}")
            continue
        dtype, rank = found[t.name]
        want = graphs.resolve_dtype(t, float_dtype)
        if dtype != want:
            problems.append(f"{t.name} is {dtype}, expected {want}")
        if rank != len(t.axes):
            problems.append(f"{t.name} has rank {rank}, expected {len(t.axes)}")
    extra = sorted(set(found) - {t.name for t in expected})
    if extra:
        problems.append("unexpected tensors " + ", ".join(extra))
    if problems:
        raise TensorRTRuntimeError(f"{name} does not match the nmtserve graph contract: " + "; ".join(problems)
                                   + ". Rebuild the plans from this export")


def shape_of(dims: trt.Dims) -> tuple[int, ...]:
    """A TensorRT ``Dims`` (what shape getters return; a sequence, not a tuple) as a tuple."""
    return tuple(int(dims[i]) for i in range(len(dims)))


class _Plan:
    """One deserialized engine and its execution context."""

    def __init__(self, runtime: trt.Runtime, path: Path, arrays: ArrayBackend):
        if TYPE_CHECKING:  # mypy checks every call against TensorRT's stubs (tests/test_tensorrt_api.py)
            import tensorrt as trt
        else:
            trt = import_tensorrt()
        if not path.is_file():
            raise TensorRTRuntimeError(f"{path} is missing: the container builds it at start "
                                       "(python -m nmtserve.export.engines)")
        engine = runtime.deserialize_cuda_engine(path.read_bytes())
        if engine is None:
            raise TensorRTRuntimeError(f"TensorRT could not load {path}: it was built by another TensorRT version "
                                       "or for another GPU; rebuild it (NMTSERVE_TRT_REBUILD=1)")
        self.path, self.engine, self.arrays = path, engine, arrays
        self.context = engine.create_execution_context()
        names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
        self.inputs = [n for n in names if engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT]
        self.dtypes = {n: np.dtype(trt.nptype(engine.get_tensor_dtype(n))) for n in names}
        self.ranks = {n: len(engine.get_tensor_shape(n)) for n in names}
        self._warned_copy = False

    def io(self) -> dict[str, tuple[str, int]]:
        return {n: (self.dtypes[n].name, self.ranks[n]) for n in self.dtypes}

    def max_shape(self, name: str) -> tuple[int, ...]:
        """Largest shape of input ``name`` in optimization profile 0."""
        _, _, hi = self.engine.get_tensor_profile_shape(name, 0)
        return shape_of(hi)

    def _device(self, name: str, value):
        """``value`` as a contiguous, aligned device array of the engine's dtype for ``name``."""
        arrays = self.arrays
        if not arrays.is_device(value):
            return arrays.asarray(np.asarray(value, dtype=self.dtypes[name]))
        if value.dtype != self.dtypes[name]:
            raise TensorRTRuntimeError(f"{self.path.name}: {name} is {value.dtype}, the engine takes {self.dtypes[name]}")
        value = arrays.ascontiguous(value)
        if arrays.pointer(value) % ALIGNMENT:
            if not self._warned_copy:
                log.warning("%s: %s is not %d-byte aligned; copying it (once per call)", self.path.name, name, ALIGNMENT)
                self._warned_copy = True
            aligned = arrays.empty(value.shape, value.dtype)  # the backend's allocations are aligned
            aligned[...] = value
            value = aligned
        return value

    def _bind(self, name: str, pointer: int) -> None:
        if not self.context.set_tensor_address(name, pointer):
            raise TensorRTRuntimeError(f"{self.path.name}: TensorRT refused the address {pointer:#x} for {name} "
                                       f"(alignment {ALIGNMENT} bytes, or not a tensor of this engine)")

    def run(self, feeds: dict, outputs: dict) -> None:
        """Enqueue one execution on the backend's stream; ``outputs`` are device arrays of the right shapes."""
        ctx, arrays = self.context, self.arrays
        bound = []
        for name in self.inputs:
            if name not in feeds:
                raise TensorRTRuntimeError(f"{self.path.name}: input {name} was not given")
            value = self._device(name, feeds[name])
            bound.append(value)
            if not ctx.set_input_shape(name, tuple(value.shape)):
                raise TensorRTRuntimeError(f"{self.path.name}: shape {tuple(value.shape)} of {name} is outside "
                                           "the plan's optimization profile")
            self._bind(name, arrays.pointer(value))
        for name, out in outputs.items():
            expected = shape_of(ctx.get_tensor_shape(name))
            if expected != tuple(out.shape):
                raise TensorRTRuntimeError(f"{self.path.name}: {name} has shape {expected}, expected {tuple(out.shape)}")
            pointer = arrays.pointer(out)
            if pointer % ALIGNMENT:  # our own buffers: a misaligned one is a bug here, not a copy
                raise TensorRTRuntimeError(f"{self.path.name}: output {name} at {pointer:#x} is not {ALIGNMENT}-byte "
                                           "aligned")
            self._bind(name, pointer)
        if not ctx.execute_async_v3(arrays.stream_handle()):
            raise TensorRTRuntimeError(f"{self.path.name}: TensorRT execution failed (see the TensorRT log)")
        # Everything runs on one stream, so CuPy's stream-ordered pool may reuse a freed upload only
        # after these kernels; holding them to the next call keeps that obvious.
        self._keep = bound


class TensorRTModel:
    """Encoder and incremental decoder plans on one GPU, as the batcher's ``StepRuntime``."""

    def __init__(self, encoder_plan: Path, decoder_plan: Path, spec: ModelSpec, device_id: int = 0,
                 arrays: ArrayBackend | None = None):
        if TYPE_CHECKING:
            import tensorrt as trt
        else:
            trt = import_tensorrt()
        self.spec = spec
        self.arrays = arrays or CupyArrays(device_id)  # another backend only in tests
        self.arrays.activate()
        self._logger = trt.Logger(trt.Logger.WARNING)
        self._runtime = trt.Runtime(self._logger)
        self.encoder = _Plan(self._runtime, Path(encoder_plan), self.arrays)
        self.decoder = _Plan(self._runtime, Path(decoder_plan), self.arrays)
        dims = spec.dims
        self._enc_out = graphs.encoder_outputs(dims)
        self._dec_out = graphs.served_decoder_outputs(dims, self.decoder.dtypes)
        self.has_attention = graphs.ATTENTION in self.decoder.dtypes
        self._float = self.decoder.dtypes["past_key"].type if "past_key" in self.decoder.dtypes else np.float32
        float_name = np.dtype(self._float).name
        check_io(self.encoder.path.name, self.encoder.io(), graphs.encoder_inputs() + self._enc_out, float_name)
        check_io(self.decoder.path.name, self.decoder.io(), graphs.decoder_inputs(dims) + self._dec_out, float_name)
        # Decoder outputs are consumed before the next step (log-probs downloaded, K/V scattered into
        # the pool), so one buffer per output, sized for the profile's largest batch x beam, is reused.
        max_batch, max_beam = self.decoder.max_shape("input_ids")
        max_src = self.decoder.max_shape("src_mask")[1]
        self._dec_buffers = {
            t.name: self.arrays.empty((int(np.prod(graphs.shape_of(t, {"batch": max_batch, "beam": max_beam,
                                                                        "src_len": max_src}))),),
                                      graphs.resolve_dtype(t, float_name))
            for t in self._dec_out
        }
        log.info("TensorRT runtime on GPU %d: %s, %s (batch <= %d, beam <= %d, %s I/O)", device_id,
                 self.encoder.path, self.decoder.path, max_batch, max_beam, float_name)

    def encode(self, src_ids: np.ndarray) -> tuple[list, list]:
        """src_ids (B, S) host -> per-layer memory K (B, h, d_k, S) and V (B, h, S, d_k) on the GPU.

        Fresh arrays per call: sentences keep views of them while they decode."""
        src = np.ascontiguousarray(src_ids, dtype=np.int32)
        sizes = {"batch": src.shape[0], "src_len": src.shape[1]}
        float_name = np.dtype(self._float).name
        outputs = {t.name: self.arrays.empty(graphs.shape_of(t, sizes), graphs.resolve_dtype(t, float_name))
                   for t in self._enc_out}
        self.encoder.run({"src_ids": src}, outputs)
        return graphs.split_memory(outputs, self.spec.layers)

    def run_step(self, feeds: dict, outputs: Sequence[str] = graphs.STEP_OUTPUTS) -> dict:
        """One decoder step -> the requested outputs by name, on the GPU. TensorRT writes every
        output of the plan, so all are bound (``log_probs`` too); only ``outputs`` are returned.

        The outputs are views of buffers reused by the next call: consume them first."""
        batch, beam = feeds["input_ids"].shape
        sizes = {"batch": batch, "beam": beam, "src_len": feeds["src_mask"].shape[1]}
        bound = {}
        for t in self._dec_out:
            shape = graphs.shape_of(t, sizes)
            bound[t.name] = self._dec_buffers[t.name][: int(np.prod(shape))].reshape(shape)
        self.decoder.run(feeds, bound)
        return {name: bound[name] for name in outputs}
