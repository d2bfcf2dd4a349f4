"""TensorRT: build profiles and plan staleness, the runtime's contract check, and the runtime itself.

``nmtserve.runtime.tensorrt`` runs here against ``tensorrt_standin`` (the TensorRT 10 calls it
makes, executed by ONNX Runtime from the bound addresses): the wiring of the served GPU path is
checked on CPU. The real builds and the engine on real plans need a GPU + TensorRT (+ CuPy).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import shutil

import numpy as np
import pytest

from nmtserve import graphs
from nmtserve.export.tensorrt import BuildOptions, metadata_path, plan_is_current, profile_shapes
from nmtserve.runtime.tensorrt import TensorRTRuntimeError, check_io

DIMS = graphs.Dims(layers=2, heads=4, d_k=8, vocab=100)
HAS_TRT = importlib.util.find_spec("tensorrt") is not None and shutil.which("nvidia-smi") is not None
HAS_CUPY = importlib.util.find_spec("cupy") is not None


def test_profiles_cover_every_decoder_input_with_ordered_shapes():
    opts = BuildOptions(max_batch=16, max_beam=4, max_source_len=128, max_target_len=100)
    shapes = profile_shapes(graphs.decoder_inputs(DIMS), opts)
    assert set(shapes) == {t.name for t in graphs.decoder_inputs(DIMS)}
    for lo, mid, hi in shapes.values():
        assert all(a <= b <= c for a, b, c in zip(lo, mid, hi, strict=True))
        assert min(lo) >= 1  # no zero-length dims: step 0 uses a masked dummy past slot
    assert shapes["past_key"][2] == (100, 64, DIMS.layers, 4, 8)
    assert shapes["past_key"][1][1] == 16 * 4  # tuned for the whole pool the engine binds, at beam 4
    assert shapes["cache_rows"][2] == (16, 4, 100)
    assert shapes["memory_key.1"][2] == (16, 4, 8, 128)


def test_plan_is_rebuilt_when_anything_it_depends_on_changes(tmp_path):
    plan = tmp_path / "decoder.plan"
    meta = {"onnx_sha256": "abc", "tensorrt": "10.3", "gpu": "H100", "compute_capability": "9.0", "options": {"fp16": True}}
    assert plan_is_current(plan, meta) == (False, "no plan yet")
    plan.write_bytes(b"engine")
    metadata_path(plan).write_text(json.dumps(meta))
    assert plan_is_current(plan, meta)[0]
    for key, value in [("onnx_sha256", "def"), ("tensorrt", "10.4"), ("gpu", "L4"), ("options", {"fp16": False})]:
        ok, why = plan_is_current(plan, {**meta, key: value})
        assert not ok and key in why


@pytest.mark.tensorrt
@pytest.mark.skipif(not HAS_TRT, reason="needs TensorRT and an NVIDIA GPU")
def test_build_tiny_engines(tmp_path):  # pragma: no cover - GPU only
    import torch

    from nmtserve.export.onnx_export import dims_of, export_decoder
    from nmtserve.export.tensorrt import build_engine
    from nmtserve.model.config import TransformerConfig
    from nmtserve.model.transformer import Transformer

    model = Transformer(TransformerConfig(src_vocab_size=40, tgt_vocab_size=40, d_model=16, h=2, d_ff=32,
                                          encoder_layers=1, decoder_layers=1)).eval()
    torch.manual_seed(0)
    onnx_path = export_decoder(model, tmp_path / "decoder.onnx")
    opts = BuildOptions(max_batch=4, max_beam=2, max_source_len=16, max_target_len=16, fp16=True)
    plan = build_engine(onnx_path, tmp_path / "decoder.plan", graphs.decoder_inputs(dims_of(model)), opts)
    assert plan.stat().st_size > 0 and plan_is_current(plan, json.loads(metadata_path(plan).read_text()))[0]


def _io(tensors, float_dtype="float32"):
    return {t.name: (graphs.resolve_dtype(t, float_dtype), len(t.axes)) for t in tensors}


def test_a_plan_matching_the_contract_is_accepted():
    tensors = graphs.decoder_inputs(DIMS) + graphs.decoder_outputs(DIMS)
    check_io("decoder.plan", _io(tensors), tensors, "float32")
    check_io("decoder.plan", _io(tensors, "float16"), tensors, "float16")


def test_a_plan_from_another_export_is_refused_with_every_difference_named():
    tensors = graphs.decoder_inputs(DIMS) + graphs.decoder_outputs(DIMS)
    found = _io(tensors)
    del found["past_value"]
    found["cache_rows"] = ("int64", 3)
    found["src_mask"] = ("bool", 3)
    found["memory_key.2"] = ("float32", 4)  # a deeper model
    with pytest.raises(TensorRTRuntimeError) as err:
        check_io("decoder.plan", found, tensors, "float32")
    message = str(err.value)
    for part in ("missing tensor past_value", "cache_rows is int64, expected int32", "src_mask has rank 3",
                 "unexpected tensors memory_key.2", "Rebuild the plans"):
        assert part in message


@pytest.mark.tensorrt
@pytest.mark.skipif(not (HAS_TRT and HAS_CUPY), reason="needs TensorRT, CuPy and an NVIDIA GPU")
def test_inflight_engine_on_tensorrt_plans_equals_the_reference(tmp_path):  # pragma: no cover - GPU only
    """generate's GPU path: plans built by our builder, cache pool on the device, same tokens as PyTorch."""
    from helpers import build, sources

    from nmtserve.decoding.search import SearchOptions
    from nmtserve.engine import InflightBatcher
    from nmtserve.export.tensorrt import build_engine
    from nmtserve.model.reference import reference_decode
    from nmtserve.runtime.tensorrt import TensorRTModel

    model, onnx_model = build(tmp_path)
    dims = onnx_model.spec.dims
    opts = BuildOptions(max_batch=8, max_beam=4, max_source_len=32, max_target_len=40)
    encoder = build_engine(tmp_path / "encoder.onnx", tmp_path / "encoder.plan", graphs.encoder_inputs(), opts)
    decoder = build_engine(tmp_path / "decoder.onnx", tmp_path / "decoder.plan", graphs.decoder_inputs(dims), opts)
    spec = dataclasses.replace(onnx_model.spec, max_batch=8, max_target_len=40, max_source_len=32)
    runtime = TensorRTModel(encoder, decoder, spec)
    engine = InflightBatcher(runtime, max_sentences=8, max_beam=4, pool_slack=8).start()
    search = SearchOptions(beam_size=3, max_length=30, max_length_a=1.5, max_length_b=3, num_hypotheses=2)
    srcs = sources(40, model.config.src_vocab_size, seed=3)
    got = engine.translate(srcs, search, timeout=300)
    engine.stop()
    want = reference_decode(model, srcs, search)
    assert [[h.tokens for h in r] for r in got] == [[h.tokens for h in r] for r in want]


# ---- nmtserve.runtime.tensorrt on a CPU machine, through the TensorRT stand-in -------------------

@pytest.fixture
def standin(monkeypatch):
    import tensorrt_standin

    from nmtserve.runtime import tensorrt as runtime_module

    monkeypatch.setattr(runtime_module, "import_tensorrt", lambda *error: tensorrt_standin)
    return tensorrt_standin


@pytest.fixture(scope="module")
def tiny_graphs(tmp_path_factory):
    from helpers import build

    folder = tmp_path_factory.mktemp("trt-standin")
    model, onnx_model = build(folder)
    return model, folder, onnx_model.spec


PLAN_OPTS = BuildOptions(max_batch=6, max_beam=4, max_source_len=32, max_target_len=24)


def standin_model(standin, tiny_graphs, tmp_path, arrays=None, opts=PLAN_OPTS):
    from tensorrt_standin import ALIGNED_HOST as HOST

    from nmtserve.runtime.tensorrt import TensorRTModel

    _, folder, spec = tiny_graphs
    enc = standin.write_plan(tmp_path / "encoder.plan", folder / "encoder.onnx", graphs.encoder_inputs(), opts)
    dec = standin.write_plan(tmp_path / "decoder.plan", folder / "decoder.onnx", graphs.decoder_inputs(spec.dims), opts)
    spec = dataclasses.replace(spec, max_batch=opts.max_batch, max_target_len=opts.max_target_len,
                               max_source_len=opts.max_source_len)
    return TensorRTModel(enc, dec, spec, arrays=arrays or HOST)


def test_tensorrt_runtime_drives_the_inflight_batcher_to_the_reference(standin, tiny_graphs, tmp_path):
    from helpers import sources, staggered

    from nmtserve.decoding.search import SearchOptions
    from nmtserve.engine import InflightBatcher
    from nmtserve.model.reference import reference_decode

    model = tiny_graphs[0]
    runtime = standin_model(standin, tiny_graphs, tmp_path)
    engine = InflightBatcher(runtime, max_sentences=6, max_beam=4, pool_slack=4).start()
    search = SearchOptions(beam_size=3, max_length=20, max_length_a=1.5, max_length_b=3, num_hypotheses=2)
    srcs = sources(24, model.config.src_vocab_size, seed=31)
    got = staggered(engine, srcs, 4, search)
    engine.stop()
    want = reference_decode(model, srcs, search)
    assert [[h.tokens for h in hyps] for hyps in got] == [[h.tokens for h in hyps] for hyps in want]
    assert runtime.decoder.context.executions == engine.stats["steps"]  # one plan execution per step
    assert engine.stats["steps"] > engine.pool_time  # the pool was compacted on the way


def test_tensorrt_runtime_moves_only_tables_up_and_candidates_down(standin, tiny_graphs, tmp_path):
    from helpers import RecordingDevice, assert_only_candidates_came_down, sources

    from nmtserve.decoding.search import SearchOptions
    from nmtserve.engine import InflightBatcher
    from nmtserve.model.reference import reference_decode

    model = tiny_graphs[0]
    device = RecordingDevice()
    runtime = standin_model(standin, tiny_graphs, tmp_path, arrays=device)
    engine = InflightBatcher(runtime, max_sentences=4, max_beam=4).start()
    search = SearchOptions(beam_size=2, max_length=16)
    srcs = sources(8, model.config.src_vocab_size, seed=8)
    got = engine.translate(srcs, search, timeout=60)
    engine.stop()
    assert [[h.tokens for h in r] for r in got] == [[h.tokens for h in r] for r in reference_decode(model, srcs, search)]
    assert {kind for kind, _ in device.uploads} <= {"i", "b"}, device.uploads
    assert_only_candidates_came_down(device, engine, search.beam_size, runtime.spec.vocab)


def test_tensorrt_runtime_errors_name_the_plan_and_the_fix(standin, tiny_graphs, tmp_path):
    from tensorrt_standin import ALIGNED_HOST as HOST

    from nmtserve.runtime.tensorrt import TensorRTModel

    spec = tiny_graphs[2]
    with pytest.raises(TensorRTRuntimeError, match=r"missing.*nmtserve.export.engines"):
        TensorRTModel(tmp_path / "nope.plan", tmp_path / "nope.plan", spec, arrays=HOST)
    (tmp_path / "bad.plan").write_bytes(b"\x00garbage")
    with pytest.raises(TensorRTRuntimeError, match=r"could not load .*bad.plan.*NMTSERVE_TRT_REBUILD"):
        TensorRTModel(tmp_path / "bad.plan", tmp_path / "bad.plan", spec, arrays=HOST)
    # The decoder plan given as the encoder: refused with the contract's differences.
    runtime = standin_model(standin, tiny_graphs, tmp_path)
    with pytest.raises(TensorRTRuntimeError, match="graph contract"):
        TensorRTModel(runtime.decoder.path, runtime.decoder.path, spec, arrays=HOST)
    # A batch beyond the plan's profile: refused before anything runs.
    src = np.full((PLAN_OPTS.max_batch + 1, 5), 7, dtype=np.int32)
    with pytest.raises(TensorRTRuntimeError, match="outside the plan's optimization profile"):
        runtime.encode(src)


# ---- issue 17 fixes that need no GPU -----------------------------------------------------------------

@pytest.mark.parametrize("layer, op, kept", [
    ("UNARY", "LOG", True), ("UNARY", "EXP", True), ("SOFTMAX", None, True), ("NORMALIZATION", None, True),
    ("REDUCE", None, True), ("TOPK", None, True), ("UNARY", "ABS", False), ("MATRIX_MULTIPLY", None, False),
    ("ELEMENTWISE", None, False),
])
def test_fp16_plans_keep_the_log_of_log_softmax_and_its_topk_in_fp32(layer, op, kept):
    """onnx-tensorrt imports LogSoftmax as a softmax and a unary LOG: in fp16 the LOG would give
    -inf below ~6e-8, so it (and the TopK reading it) stays fp32 with the normalizations."""
    from nmtserve.export.tensorrt import keeps_fp32

    assert keeps_fp32(layer, op) is kept


def test_gpu_identity_without_libcuda_falls_back_to_nvidia_smi_and_names_its_failure(tmp_path, monkeypatch):
    from nmtserve.export import tensorrt as build

    monkeypatch.setattr(build, "_cuda_driver_identity", lambda: None)
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'Field \"compute_cap\" is not a valid field to query.' >&2\nexit 2\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(build.TensorRTUnavailable, match="compute_cap.*is not a valid field"):
        build.gpu_identity()
    smi.write_text("#!/bin/sh\necho 'NVIDIA H200, 9.0'\n")
    assert build.gpu_identity() == {"gpu": "NVIDIA H200", "compute_capability": "9.0"}
    smi.unlink()
    with pytest.raises(build.TensorRTUnavailable, match="neither libcuda.so.1 nor nvidia-smi"):
        build.gpu_identity()


def test_misaligned_inputs_are_copied_and_misaligned_outputs_refused(standin, tiny_graphs, tmp_path):
    """The stand-in refuses addresses that are not 256-byte aligned, as TensorRT does: the
    runtime copies a misaligned input into an aligned buffer, and names a misaligned output."""
    from tensorrt_standin import ALIGNED_HOST

    from nmtserve.runtime.tensorrt import TensorRTRuntimeError

    runtime = standin_model(standin, tiny_graphs, tmp_path)
    src = ALIGNED_HOST.empty((2 * 6 + 1,), np.int32)[1:].reshape(2, 6)  # 4 bytes past a boundary
    src[...] = [[5, 6, 7, 8, 9, 2], [5, 6, 2, 0, 0, 0]]
    assert runtime.arrays.pointer(src) % 256
    keys, values = runtime.encode(src)  # copied, not refused
    assert len(keys) == runtime.spec.layers
    outputs = {t.name: ALIGNED_HOST.empty((1 + int(np.prod(graphs.shape_of(t, {"batch": 2, "src_len": 6}))),),
                                          graphs.resolve_dtype(t, "float32"))[1:].reshape(
                                              graphs.shape_of(t, {"batch": 2, "src_len": 6}))
               for t in runtime._enc_out}
    with pytest.raises(TensorRTRuntimeError, match="is not 256-byte aligned"):
        runtime.encoder.run({"src_ids": np.ascontiguousarray(src)}, outputs)


def test_every_execution_is_enqueued_on_the_array_backends_stream(standin, tiny_graphs, tmp_path):
    """The stand-in runs at once, but TensorRT only enqueues: the plans must run on the one stream
    the cache pool's copies and the downloads (CupyArrays.asnumpy, blocking on it) are ordered on,
    never on the default stream."""
    from helpers import RecordingDevice, sources

    from nmtserve.decoding.search import SearchOptions
    from nmtserve.engine import InflightBatcher

    class OnStream(RecordingDevice):
        def stream_handle(self) -> int:
            return 0x5EED

    model = tiny_graphs[0]
    runtime = standin_model(standin, tiny_graphs, tmp_path, arrays=OnStream())
    engine = InflightBatcher(runtime, max_sentences=4, max_beam=4).start()
    engine.translate(sources(4, model.config.src_vocab_size, seed=9), SearchOptions(beam_size=2, max_length=8),
                     timeout=60)
    engine.stop()
    assert runtime.encoder.context.streams == {0x5EED} and runtime.decoder.context.streams == {0x5EED}


# ---- the fp16 build's precision constraints, on a network description --------------------------

def test_fp16_constraints_set_only_floating_outputs_to_fp32(monkeypatch):
    """TopK's indices (INT32), an integer REDUCE and a shape computation are never forced to
    float32 (TensorRT documents that set_output_type cannot set TopK's second output); the
    float outputs of the layers kept in fp32 are, and the other layers are left alone."""
    import tensorrt_standin as trt

    from nmtserve.export import tensorrt as build

    monkeypatch.setattr(build, "_import_tensorrt", lambda: trt)
    F, I32 = trt.DataType.FLOAT, trt.DataType.INT32
    layers = {
        "softmax": trt.ILayer(trt.LayerType.SOFTMAX, [F]),
        "topk": trt.ILayer(trt.LayerType.TOPK, [F, I32]),
        "int reduce": trt.ILayer(trt.LayerType.REDUCE, [I32]),
        "float reduce": trt.ILayer(trt.LayerType.REDUCE, [F]),
        "log": trt.IUnaryLayer(trt.LayerType.UNARY, [F], trt.UnaryOperation.LOG),
        "abs": trt.IUnaryLayer(trt.LayerType.UNARY, [F], trt.UnaryOperation.ABS),
        "matmul": trt.ILayer(trt.LayerType.MATRIX_MULTIPLY, [F]),
        "shape": trt.ILayer(trt.LayerType.SHAPE, [trt.DataType.INT64]),
    }
    kept = build.constrain_fp32_layers(trt.INetworkDefinition(list(layers.values())))
    assert kept == 4
    assert {name: (layer.precision_set, layer.output_types) for name, layer in layers.items()} == {
        "softmax": (True, {0: F}), "topk": (True, {0: F}), "int reduce": (False, {}), "float reduce": (True, {0: F}),
        "log": (True, {0: F}), "abs": (False, {}), "matmul": (False, {}), "shape": (False, {})}


def test_the_old_fp16_rule_fails_on_the_stand_in():
    """What build_engine did before (every output of a kept layer forced to float32) is refused
    by the stand-in as by TensorRT: the test above can fail."""
    import tensorrt_standin as trt

    topk = trt.ILayer(trt.LayerType.TOPK, [trt.DataType.FLOAT, trt.DataType.INT32])
    with pytest.raises(RuntimeError, match="cannot set output 1 of a TOPK layer"):
        for j in range(topk.num_outputs):
            topk.set_output_type(j, trt.float32)


def test_the_stand_in_returns_what_tensorrt_returns():
    """Dims, not tuples; enums, not strings or ints (misaligned addresses: the runtime test above)."""
    import tensorrt_standin as trt

    dims = trt.Dims((2, 3))
    assert not isinstance(dims, tuple) and dims == (2, 3) and tuple(dims) == (2, 3) and len(dims) == 2
    with pytest.raises(TypeError):
        hash(dims)
    with pytest.raises(TypeError):
        dims + (4,)  # noqa: B018 - a tuple operation the real Dims does not have
    with pytest.raises(TypeError):
        trt.Logger(2)
    assert trt.Logger(trt.Logger.WARNING).min_severity is trt.Logger.Severity.WARNING
    with pytest.raises(TypeError):
        trt.nptype(np.dtype(np.float32))
    assert trt.nptype(trt.DataType.HALF) is np.float16
