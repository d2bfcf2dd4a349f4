"""TensorRT engine build from the exported ONNX graphs (GPU only).

Written against the TensorRT 10 Python API (``tensorrt.Builder``, ``OnnxParser``,
``IBuilderConfig``, optimization profiles, timing cache). Plans are specific to the GPU model
and the TensorRT version, so each plan has a JSON sidecar (GPU name and compute capability,
TensorRT version, ONNX sha256, build options) and a stale plan is rebuilt, never loaded.

The profile and staleness logic is plain Python and tested everywhere; ``build_engine`` runs
only where ``tensorrt`` imports and a GPU is present.
"""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, cast

from .. import graphs
from ..runtime.spec import ModelSpec, graph_sha256  # torch-free: the GPU image has no torch

if TYPE_CHECKING:
    import tensorrt as trt

log = logging.getLogger(__name__)


class TensorRTUnavailable(RuntimeError):
    """TensorRT or a CUDA GPU is not available here."""


@dataclass(frozen=True)
class BuildOptions:
    max_batch: int = ModelSpec.max_batch  # sentences per call
    max_beam: int = graphs.DEFAULT_MAX_BEAM
    max_source_len: int = 256
    max_target_len: int = 256
    fp16: bool = False
    workspace_mb: int = 4096

    def key(self) -> dict:
        return asdict(self)


Shape = tuple[int, ...]


def _axis_ranges(opts: BuildOptions) -> dict[str, tuple[int, int, int]]:
    """min / opt / max of every symbolic axis in ``nmtserve.graphs``."""
    batch_opt = max(1, opts.max_batch // 4)
    beam_opt = min(4, opts.max_beam)
    return {
        "batch": (1, batch_opt, opts.max_batch),
        "beam": (1, beam_opt, opts.max_beam),
        # past_len >= 1 always: step 0 runs with a masked dummy time slot (see transformer.py).
        "past_len": (1, max(1, opts.max_target_len // 4), opts.max_target_len),
        # The engine binds its whole cache pool (the rows of every sentence it can hold at the
        # default beam), not the rows of the sentences decoding now: tune for that.
        "rows": (1, opts.max_batch * beam_opt, opts.max_batch * opts.max_beam),
        "src_len": (1, max(1, opts.max_source_len // 8), opts.max_source_len),
    }


def profile_shapes(tensors: list[graphs.Tensor], opts: BuildOptions) -> dict[str, tuple[Shape, Shape, Shape]]:
    """(min, opt, max) shape of every input, for one optimization profile."""
    ranges = _axis_ranges(opts)
    out = {}
    for t in tensors:
        mins, opts_, maxs = [], [], []
        for axis in t.axes:
            lo, mid, hi = ranges[axis] if isinstance(axis, str) else (axis, axis, axis)
            mins.append(lo)
            opts_.append(mid)
            maxs.append(hi)
        out[t.name] = (tuple(mins), tuple(opts_), tuple(maxs))
    return out


def gpu_identity() -> dict:
    """Name and compute capability of GPU 0, from the CUDA driver API (libcuda, every driver);
    nvidia-smi's ``compute_cap`` field is the fallback (drivers before 510 do not have it)."""
    found = _cuda_driver_identity()
    if found is not None:
        return found
    smi = shutil.which("nvidia-smi")
    if not smi:
        raise TensorRTUnavailable("no NVIDIA driver found (neither libcuda.so.1 nor nvidia-smi)")
    try:
        out = subprocess.run([smi, "--query-gpu=name,compute_cap", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=30, check=True).stdout.strip().splitlines()
    except subprocess.CalledProcessError as exc:
        raise TensorRTUnavailable(f"cannot identify the GPU: libcuda.so.1 did not load and nvidia-smi failed "
                                  f"({(exc.stderr or exc.stdout or '').strip()[:200]})") from exc
    if not out:
        raise TensorRTUnavailable("nvidia-smi lists no GPU")
    name, cap = (s.strip() for s in out[0].split(","))
    return {"gpu": name, "compute_capability": cap}


def _cuda_driver_identity() -> dict | None:
    """GPU 0's name and compute capability through the CUDA driver API (ctypes), or None where
    libcuda is missing or finds no GPU."""
    import ctypes  # noqa: PLC0415

    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    device, major, minor = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
    name = ctypes.create_string_buffer(256)
    # CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75, _MINOR = 76 (cuda.h)
    calls = [lambda: cuda.cuInit(0), lambda: cuda.cuDeviceGet(ctypes.byref(device), 0),
             lambda: cuda.cuDeviceGetName(name, len(name), device),
             lambda: cuda.cuDeviceGetAttribute(ctypes.byref(major), 75, device),
             lambda: cuda.cuDeviceGetAttribute(ctypes.byref(minor), 76, device)]
    if any(call() != 0 for call in calls):
        return None
    return {"gpu": name.value.decode(errors="replace"), "compute_capability": f"{major.value}.{minor.value}"}


def plan_metadata(onnx_path: Path, opts: BuildOptions, trt_version: str, gpu: dict) -> dict:
    return {"onnx_sha256": graph_sha256(onnx_path), "tensorrt": trt_version, **gpu, "options": opts.key()}


def metadata_path(plan: Path) -> Path:
    return plan.with_suffix(plan.suffix + ".json")


def plan_is_current(plan: Path, expected: dict) -> tuple[bool, str]:
    """Whether ``plan`` was built from the same ONNX, TensorRT, GPU and options; and why not."""
    meta_file = metadata_path(plan)
    if not plan.is_file() or not meta_file.is_file():
        return False, "no plan yet"
    try:
        found = json.loads(meta_file.read_text())
    except json.JSONDecodeError:
        return False, "unreadable plan metadata"
    changed = [k for k in expected if found.get(k) != expected[k]]
    if changed:
        return False, "changed since the last build: " + ", ".join(changed)
    return True, "up to date"


def _import_tensorrt():
    from ..runtime import tensorrt as runtime  # noqa: PLC0415 - one way to find TensorRT

    return runtime.import_tensorrt(TensorRTUnavailable)


# Layers kept in fp32 in an fp16 engine: their sums and exponentials overflow fp16, and a
# logarithm of a probability below fp16's ~6e-8 would be -inf. onnx-tensorrt imports ONNX
# LogSoftmax as a softmax and a unary LOG, so the LOG (and the TopK reading its output, which
# picks the candidates) must stay fp32 for the log-probs to.
_FP32_LAYER_TYPES = ("NORMALIZATION", "SOFTMAX", "REDUCE", "TOPK")
_FP32_UNARY_OPS = ("EXP", "LOG")
# TensorRT's floating-point DataType names: the only outputs whose type a constraint may set.
# TopK's second output (the indices) is always INT32 and TensorRT documents that
# set_output_type "cannot be used" on it; an integer REDUCE or a shape computation has integer
# outputs too, and forcing those to float32 fails the build.
_FLOAT_TYPES = ("FLOAT", "HALF", "BF16")


def keeps_fp32(layer_type: str, unary_op: str | None = None) -> bool:
    """Whether a layer (TensorRT LayerType name; UnaryOperation name for UNARY) stays fp32 in fp16 plans."""
    return layer_type in _FP32_LAYER_TYPES or (layer_type == "UNARY" and unary_op in _FP32_UNARY_OPS)


def constrain_fp32_layers(network: trt.INetworkDefinition) -> int:
    """In an fp16 build, keep the layers ``keeps_fp32`` names in fp32: their precision, and the
    type of each of their outputs that is floating point (never an integer output: TopK's
    indices, an integer REDUCE). A layer whose outputs are all integers is left alone. Returns
    how many layers were constrained.

    These are the weak-typing precision constraints of TensorRT 10.5 (the image's), honoured
    with ``BuilderFlag.OBEY_PRECISION_CONSTRAINTS``. TensorRT 10.12 deprecates them (and
    ``BuilderFlag.FP16``) for strongly typed networks, where each tensor's type comes from the
    ONNX graph itself; moving there means exporting an fp16 graph with explicit float32 casts
    around these layers and building with ``NetworkDefinitionCreationFlag.STRONGLY_TYPED``,
    which is the way once the image's TensorRT is 10.12 or later. Until then this stays: the
    10.5 builder does not warn about it, and the same rule is unit-tested on a network stand-in.
    """
    if TYPE_CHECKING:
        import tensorrt as trt
    else:
        trt = _import_tensorrt()
    kept = 0
    for i in range(network.num_layers):
        layer = network.get_layer(i)
        op = None
        if layer.type == trt.LayerType.UNARY:
            layer.__class__ = trt.IUnaryLayer  # the Python API's documented downcast, to read .op
            op = cast("trt.IUnaryLayer", layer).op.name
        if not keeps_fp32(layer.type.name, op):
            continue
        floating = [j for j in range(layer.num_outputs) if layer.get_output(j).dtype.name in _FLOAT_TYPES]
        if not floating:
            continue
        layer.precision = trt.float32
        for j in floating:
            layer.set_output_type(j, trt.float32)
        kept += 1
    return kept


def build_engine(
    onnx_path: Path, plan_path: Path, inputs: list[graphs.Tensor], opts: BuildOptions,
    timing_cache: Path | None = None, force: bool = False,
) -> Path:  # pragma: no cover - needs a GPU and TensorRT
    """Build (or keep, if current) a serialized TensorRT engine for one graph."""
    if TYPE_CHECKING:  # mypy checks every call against TensorRT's stubs (tests/test_tensorrt_api.py)
        import tensorrt as trt
    else:
        trt = _import_tensorrt()
    expected = plan_metadata(onnx_path, opts, trt.__version__, gpu_identity())
    current, why = plan_is_current(plan_path, expected)
    if current and not force:
        log.info("%s: %s", plan_path, why)
        return plan_path
    log.info("building %s from %s (%s)", plan_path.name, onnx_path.name, why)
    started = time.monotonic()
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    network = builder.create_network(0)  # explicit batch is the only mode in TensorRT 10
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(onnx_path)):
        errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        raise RuntimeError(f"TensorRT could not parse {onnx_path}: {errors}")
    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, opts.workspace_mb << 20)
    if opts.fp16:
        config.set_flag(trt.BuilderFlag.FP16)
        config.set_flag(trt.BuilderFlag.OBEY_PRECISION_CONSTRAINTS)
        kept = constrain_fp32_layers(network)
        log.info("fp16 plan: %d of %d layers kept in fp32 (%s, unary %s)", kept, network.num_layers,
                 ", ".join(_FP32_LAYER_TYPES), ", ".join(_FP32_UNARY_OPS))
    profile = builder.create_optimization_profile()
    for name, (lo, mid, hi) in profile_shapes(inputs, opts).items():
        profile.set_shape(name, trt.Dims(list(lo)), trt.Dims(list(mid)), trt.Dims(list(hi)))
    config.add_optimization_profile(profile)
    cache_bytes = timing_cache.read_bytes() if timing_cache and timing_cache.is_file() else b""
    cache = config.create_timing_cache(cache_bytes)
    config.set_timing_cache(cache, ignore_mismatch=True)
    serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        raise RuntimeError(f"TensorRT failed to build {plan_path.name}; see the log above")
    plan_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = plan_path.with_suffix(".tmp")
    tmp.write_bytes(bytes(serialized))
    tmp.replace(plan_path)
    if timing_cache:
        timing_cache.write_bytes(bytes(config.get_timing_cache().serialize()))
    metadata_path(plan_path).write_text(json.dumps(expected, indent=2) + "\n")
    log.info("built %s in %.0f s", plan_path.name, time.monotonic() - started)
    return plan_path
