"""The decoder step in compiled code (``nmtserve_native.DecoderStep``, issue 49) against its
references: the fused CPU graph it reads its weights from and PyTorch's ``decode_step`` (every
layout the config has, within float32 noise), batch invariance to the bit, and served decodes of
the held-out sentences equal to the PyTorch reference decode, token for token."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import onnxruntime as ort
import pytest
from helpers import needs_exact_ort_int8

from nmtserve import graphs
from nmtserve.decoding import native
from nmtserve.decoding.search import SearchOptions
from nmtserve.export.cpu_graph import build_cpu_decoder
from nmtserve.export.quantize import quantize_int8
from nmtserve.runtime import native_step
from nmtserve.runtime.onnxruntime import session_options
from tests.test_batch_invariance import _batch, _sentence
from tests.test_batch_invariance import _model as _invariance_model
from tests.test_cpu_graph import LAYOUTS, _feeds, _model, _torch_step

pytestmark = pytest.mark.skipif(native.module is None and not os.environ.get("CI"),
                                reason="nmtserve_native is not installed (scripts/setup.sh builds it)")
ALL = tuple(t.name for t in graphs.decoder_outputs(graphs.Dims(3, 4, 8, 67)))


def _spec(model):
    c = model.config
    return SimpleNamespace(layers=c.decoder_layers, heads=c.h, d_k=c.d_k, vocab=c.tgt_vocab_size)


def test_the_compiled_step_is_installed_where_ci_runs():
    assert native.module is not None and hasattr(native.module, "DecoderStep")
    assert native.module.kernels() in ("avx512", "avx2", "scalar")


@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_compiled_step_equals_the_graph_and_pytorch(tmp_path, layout):
    model = _model(**LAYOUTS[layout])
    path = build_cpu_decoder(model, tmp_path / "decoder.onnx")
    session = ort.InferenceSession(str(path), session_options(1), providers=["CPUExecutionProvider"])
    step = native_step.NativeDecoder(path, _spec(model))
    # (batch, beam, past, source): one sentence, greedy, a fresh batch's single dummy slot, wide.
    for seed, shape in enumerate([(1, 4, 6, 9), (3, 1, 4, 5), (2, 3, 1, 7), (5, 2, 11, 13), (9, 4, 3, 20)]):
        feeds = _feeds(model, *shape, seed=seed)
        got = step.run_step(feeds, ALL)
        graph = dict(zip(ALL, session.run(list(ALL), feeds), strict=True))
        log_probs, new_key, new_value = _torch_step(model, feeds)
        real = np.isfinite(log_probs)
        np.testing.assert_array_equal(np.isfinite(got["log_probs"]), real)  # the mask's -inf in both
        np.testing.assert_allclose(got["log_probs"][real], log_probs[real], atol=3e-5, rtol=0)
        np.testing.assert_allclose(got["log_probs"][real], graph["log_probs"][real], atol=3e-5, rtol=0)
        np.testing.assert_allclose(got["new_key"], new_key, atol=2e-5, rtol=0)
        np.testing.assert_allclose(got["new_value"], new_value, atol=2e-5, rtol=0)
        np.testing.assert_allclose(got["attention"], graph["attention"], atol=1e-6, rtol=0)
        m = got["top_ids"].shape[-1]
        assert got["top_ids"].dtype == np.int32 and m == graph["top_ids"].shape[-1]
        # Its own best candidates, in TopK's order (equal values: the lower id first).
        np.testing.assert_array_equal(got["top_ids"], np.argsort(-got["log_probs"], axis=-1, kind="stable")[..., :m])
        np.testing.assert_array_equal(got["top_log_probs"], np.take_along_axis(got["log_probs"], got["top_ids"], -1))
        np.testing.assert_allclose(got["top_log_probs"], graph["top_log_probs"], atol=3e-5, rtol=0)
        # The served step's outputs alone: the same arrays.
        served = step.run_step(feeds)
        assert set(served) == set(graphs.STEP_OUTPUTS)
        for name in served:
            np.testing.assert_array_equal(served[name], got[name])


# Head shapes past the tiny models' d_k 8: each kernel path of the attention (kernels_impl.h) by
# vectors a head (AVX-512's 16 lanes, AVX2's 8): d_k 16 in 6 heads (groups of 4 + 2), d_k 40 in 5
# (3 vectors with a tail; AVX2: 5, groups of 2 + 2 + 1), d_k 48 in 3, d_k 72 in 3 (5 vectors with a
# tail; AVX2: 9, head by head), d_k 136 in 2 (9 vectors: head by head).
HEAD_SHAPES = {"6x16": (96, 6), "5x40": (200, 5), "3x48": (144, 3), "3x72": (216, 3), "2x136": (272, 2)}


def test_every_kernel_set_equals_pytorch_at_every_head_shape(tmp_path):
    """The fp32 step on each kernel set this CPU runs (NMTSERVE_NATIVE_KERNELS forces AVX2 or the
    scalar code on an AVX-512 machine), at head shapes that take every attention path, against
    PyTorch's step: past and source lengths past 16 (the AVX-512 blocks), a sentence that joined
    later, a shorter source."""
    import subprocess
    import sys

    cases = []
    for name, (d_model, h) in HEAD_SHAPES.items():
        model = _model(d_model=d_model, h=h, d_ff=64)
        path = build_cpu_decoder(model, tmp_path / f"decoder-{name}.onnx")
        for seed, shape in enumerate([(1, 4, 6, 9), (2, 3, 20, 5), (3, 2, 17, 33)]):
            feeds = _feeds(model, *shape, seed=seed)
            np.savez(tmp_path / f"feeds-{name}-{seed}.npz", **feeds)
            cases.append((name, seed, model, path, feeds))
    script = (
        "import sys, json, numpy as np; from types import SimpleNamespace; from nmtserve.runtime import native_step\n"
        "for name, seed, path, spec in json.loads(sys.argv[1]):\n"
        "    step = native_step.NativeDecoder(path, SimpleNamespace(**spec))\n"
        f"    out = step.run_step(dict(np.load(f'{tmp_path}/feeds-{{name}}-{{seed}}.npz')), {ALL!r})\n"
        "    np.savez(f'{sys.argv[2]}-{name}-{seed}.npz', **out)\n"
        "print(step.kernels)\n")
    jobs = json.dumps([(name, seed, str(path), vars(_spec(model))) for name, seed, model, path, _ in cases])
    ran = set()
    for forced in ("", "avx2", "scalar"):
        prefix = str(tmp_path / f"out-{forced or 'chosen'}")
        done = subprocess.run([sys.executable, "-c", script, jobs, prefix], env={**os.environ, "NMTSERVE_NATIVE_KERNELS": forced},
                              capture_output=True, text=True, check=True)
        ran.add(done.stdout.strip().split()[0])
        for name, seed, model, _, feeds in cases:
            got = dict(np.load(f"{prefix}-{name}-{seed}.npz"))
            log_probs, new_key, new_value = _torch_step(model, feeds)
            real = np.isfinite(log_probs)
            what = f"{done.stdout.strip()}, heads {name}, case {seed}"
            np.testing.assert_array_equal(np.isfinite(got["log_probs"]), real, err_msg=what)
            np.testing.assert_allclose(got["log_probs"][real], log_probs[real], atol=5e-5, rtol=0, err_msg=what)
            np.testing.assert_allclose(got["new_key"], new_key, atol=3e-5, rtol=0, err_msg=what)
            np.testing.assert_allclose(got["new_value"], new_value, atol=3e-5, rtol=0, err_msg=what)
    assert "scalar" in ran, ran


@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_a_sentence_gives_the_same_bits_alone_and_in_any_batch(tmp_path, precision):
    """As tests/test_batch_invariance.py's graph-level check: others beside it, its past later in the
    window, its source padded. By construction here (every sum over the row's own data, in an order
    its own lengths fix; int8 rows quantized alone and summed in int32), with no float64 sum."""
    model = _invariance_model()
    path = build_cpu_decoder(model, tmp_path / "decoder.onnx")
    step = native_step.NativeDecoder(_int8(model, path) if precision == "int8" else path, _spec(model))
    rng = np.random.default_rng(0)
    beam = 4
    for trial in range(8):
        past, src = int(rng.integers(1, 9)), int(rng.integers(2, 9))
        mine = _sentence(rng, model, past, src, beam)
        alone = step.run_step(_batch(model, [mine], [0], past, src, beam), ALL)
        others = [_sentence(rng, model, int(rng.integers(1, 12)), int(rng.integers(2, 14)), beam) for _ in range(3 + trial)]
        place = trial % 4
        sentences = others[:place] + [mine] + others[place:]
        offsets = [int(rng.integers(0, 5)) for _ in sentences]
        offsets[place] = int(rng.integers(1, 20))
        window = max(o + s["past_k"].shape[0] for o, s in zip(offsets, sentences, strict=True))
        src_len = max(s["mem_k"][0].shape[-1] for s in sentences) + 3
        together = step.run_step(_batch(model, sentences, offsets, window, src_len, beam), ALL)
        for name in ALL:
            got = together[name][place]
            if name == graphs.ATTENTION:
                assert not got[..., src:].any(), f"attention on padding (trial {trial})"
                got = got[..., :src]
            np.testing.assert_array_equal(got, alone[name][0], err_msg=f"{name} (trial {trial})")


@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_a_step_shared_with_idle_cores_gives_the_same_bits(tmp_path, precision):
    """A lone step lends idle cores its products' columns and its rows' log-softmax (native/src/team.h):
    every value is computed by the same code in the same order whichever thread runs it, so a step
    shared or not gives the same bits; and where the process has two cores the helper does take chunks."""
    model = _model(d_model=64, d_ff=128, tgt_vocab_size=3000, src_vocab_size=3000)
    path = build_cpu_decoder(model, tmp_path / "decoder.onnx")
    step = native_step.NativeDecoder(_int8(model, path) if precision == "int8" else path, _spec(model))
    feeds = _feeds(model, 4, 3, 6, 7, seed=3)
    module = native.module
    threads = module.step_threads()
    try:
        module.set_step_threads(1)
        alone = step.run_step(feeds, ALL)
        module.set_step_threads(2)
        before = module.step_chunks_helped()
        # The helper wakes for the first and spins between the next; on a busy machine it may get
        # its core only later: steps until it has helped (at least 50, at most 5 s).
        began = time.monotonic()
        for i in range(100_000):
            shared = step.run_step(feeds, ALL)
            for name in ALL:
                np.testing.assert_array_equal(shared[name], alone[name], err_msg=name)
            if i >= 49 and (module.step_chunks_helped() > before or time.monotonic() - began > 5):
                break
        if len(os.sched_getaffinity(0)) >= 2:
            assert module.step_chunks_helped() > before, "the helper never took a chunk"
    finally:
        module.set_step_threads(threads)


def _int8(model, path: Path, keep=()) -> Path:
    """The fused graph quantized as `nmtserve export --precision int8` does (vocabulary tables too)."""
    c = model.config
    return quantize_int8(path, path.with_name(f"int8-{'-'.join(keep) or 'all'}.onnx"), keep_fp32=keep,
                         tables=[c.tgt_vocab_size, c.src_vocab_size]).path


def _compare_int8(step, session, feeds, where: str) -> None:
    """The compiled int8 step against ONNX Runtime's run of the int8 graph on the same feeds. Their
    int32 sums are exact and their scalings round alike; what differs is float32 noise in the parts
    between the products (norms, attention), and where that noise moves a value across a rounding
    boundary of its row's codes, one code (1/127 of the row's largest value): rare, and small."""
    got = step.run_step(feeds, ALL)
    graph = dict(zip(ALL, session.run(list(ALL), feeds), strict=True))
    real = np.isfinite(graph["log_probs"])
    np.testing.assert_array_equal(np.isfinite(got["log_probs"]), real, err_msg=where)
    diff = np.abs(got["log_probs"][real] - graph["log_probs"][real])
    assert np.median(diff) < 1e-5 and diff.max() < 0.05, (where, float(np.median(diff)), float(diff.max()))
    for name in ("new_key", "new_value", "attention"):
        diff = np.abs(got[name] - graph[name])
        assert np.median(diff) < 1e-5 and diff.max() < 0.05, (where, name, float(np.median(diff)), float(diff.max()))
    m = got["top_ids"].shape[-1]
    np.testing.assert_array_equal(got["top_ids"], np.argsort(-got["log_probs"], axis=-1, kind="stable")[..., :m])


@needs_exact_ort_int8
@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_compiled_step_computes_int8_graphs_as_onnx_runtime(tmp_path, layout):
    model = _model(**LAYOUTS[layout])
    path = _int8(model, build_cpu_decoder(model, tmp_path / "decoder.onnx"))
    session = ort.InferenceSession(str(path), session_options(1), providers=["CPUExecutionProvider"])
    step = native_step.NativeDecoder(path, _spec(model))
    assert "int8" in step.kernels
    for seed, shape in enumerate([(1, 4, 6, 9), (3, 1, 4, 5), (2, 3, 1, 7), (5, 2, 11, 13), (9, 4, 3, 20)]):
        _compare_int8(step, session, _feeds(model, *shape, seed=seed), f"{layout} {shape}")


@needs_exact_ort_int8
@pytest.mark.parametrize("keep", [("output",), ("embeddings",), ("attention", "ffn"), ("output", "embeddings")])
def test_int8_graphs_with_groups_kept_in_fp32(tmp_path, keep):
    """`--int8-keep-fp32`: each product (and the table) in whichever precision the graph holds it."""
    for layout in ("paper", "pre_norm_gelu_untied"):
        model = _model(**LAYOUTS[layout])
        path = _int8(model, build_cpu_decoder(model, tmp_path / f"{layout}.onnx"), keep)
        session = ort.InferenceSession(str(path), session_options(1), providers=["CPUExecutionProvider"])
        step = native_step.NativeDecoder(path, _spec(model))
        _compare_int8(step, session, _feeds(model, 3, 4, 5, 9, seed=7), f"{layout} keep {keep}")


@pytest.mark.parametrize("layout", ["marian", "paper"])  # swish; ReLU (the second FFN product's rows >= 0)
def test_every_int8_kernel_gives_the_same_bits(tmp_path, layout):
    """The int8 products sum in int32, exactly: the AMX, AVX-512 VNNI, AVX2 and portable kernels (each
    forced in its own process where this CPU has it; AMX is chosen where the CPU and Linux allow it)
    give the same bits as the one chosen here, for rows with negative codes and rows without (a
    ReLU's output, which the AVX2 kernel multiplies without vpsignb)."""
    import subprocess
    import sys

    model = _model(**LAYOUTS[layout])
    path = _int8(model, build_cpu_decoder(model, tmp_path / "decoder.onnx"))
    np.savez(tmp_path / "feeds.npz", **_feeds(model, 5, 3, 7, 11, seed=3))
    spec = _spec(model)
    script = (
        "import sys, numpy as np; from types import SimpleNamespace; from nmtserve.runtime import native_step\n"
        f"step = native_step.NativeDecoder(sys.argv[1], SimpleNamespace(layers={spec.layers}, heads={spec.heads}, vocab={spec.vocab}))\n"
        "feeds = dict(np.load(sys.argv[2]))\n"
        f"out = step.run_step(feeds, {ALL!r})\n"
        "np.savez(sys.argv[3], **out); print(step.kernels)\n")
    results = {}
    for forced in ("", "avx512-vnni", "avx2", "scalar"):
        out = tmp_path / f"out-{forced or 'chosen'}.npz"
        env = {**os.environ, "NMTSERVE_NATIVE_INT8_KERNELS": forced}
        done = subprocess.run([sys.executable, "-c", script, str(path), str(tmp_path / "feeds.npz"), str(out)],
                              env=env, capture_output=True, text=True, check=True)
        results[done.stdout.strip()] = dict(np.load(out))
    assert any(name.endswith("scalar") for name in results), results.keys()
    first, *others = results.values()
    for other in others:
        for name in ALL:
            np.testing.assert_array_equal(other[name], first[name], err_msg=name)


def test_graphs_it_cannot_run_stay_on_onnx_runtime(tmp_path, monkeypatch, caplog):
    import onnx
    from onnx import numpy_helper
    from onnxruntime.quantization import QuantType, quantize_dynamic

    model = _model()
    path = build_cpu_decoder(model, tmp_path / "decoder.onnx")
    # ONNX Runtime's own dynamic quantization (per tensor): not the compiled step's arithmetic.
    q = tmp_path / "dynamic.onnx"
    quantize_dynamic(str(path), str(q), weight_type=QuantType.QInt8)
    with pytest.raises(native_step.Unsupported, match="quantized in a form"):
        native_step.NativeDecoder(q, _spec(model))
    # An int8 graph whose rows are quantized otherwise than nmtserve's export does it.
    other = onnx.load(str(_int8(model, path)))
    for t in other.graph.initializer:
        if t.name == "int8/levels":
            t.CopyFrom(numpy_helper.from_array(np.asarray(255.0, np.float32), t.name))
    onnx.save(other, str(tmp_path / "other.onnx"))
    with pytest.raises(native_step.Unsupported, match="not as nmtserve's int8 export writes it"):
        native_step.NativeDecoder(tmp_path / "other.onnx", _spec(model))
    monkeypatch.setenv(native_step.ENV, "1")
    assert native_step.load(q, _spec(model)) is None
    assert "runs on ONNX Runtime" in caplog.text
    assert native_step.load(path, _spec(model)) is not None
    monkeypatch.setenv(native_step.ENV, "0")
    assert native_step.load(path, _spec(model)) is None
    monkeypatch.delenv(native_step.ENV)  # the default: compiled where the graph allows, quietly elsewhere
    caplog.clear()
    assert native_step.load(path, _spec(model)) is not None
    assert native_step.load(q, _spec(model)) is None
    assert "runs on ONNX Runtime" not in caplog.text
    # fp32 above FP32_LARGEST_D_MODEL: ONNX Runtime by default (measured faster), compiled when asked;
    # int8 compiled at any size.
    wide = SimpleNamespace(**{**vars(_spec(model)), "d_k": native_step.FP32_LARGEST_D_MODEL})
    caplog.set_level("INFO", logger=native_step.log.name)
    assert native_step.load(path, wide) is None
    assert "its fp32 kernels are faster" in caplog.text
    assert native_step.load(_int8(model, path), wide) is not None
    monkeypatch.setenv(native_step.ENV, "1")
    assert native_step.load(path, wide) is not None


def test_bad_feeds_are_refused_by_name(tmp_path):
    model = _model()
    step = native_step.NativeDecoder(build_cpu_decoder(model, tmp_path / "decoder.onnx"), _spec(model))
    feeds = _feeds(model, 2, 3, 4, 5, seed=0)
    for name, value, message in (("input_ids", np.full((2, 3), 10_000, np.int32), "token id is out of range"),
                                 ("cache_rows", np.full((2, 3, 4), -1, np.int32), "cache row is out of range"),
                                 ("past_mask", np.ones((2, 5), bool), "past_mask dimension 1 is 5, expected 4")):
        with pytest.raises(ValueError, match=message):
            step.run_step({**feeds, name: value})


def test_served_decodes_of_the_held_out_sentences_equal_the_reference(demo_repository, demo_checkpoint, demo_sentences,
                                                                        monkeypatch):
    """The engine on the compiled step: 96 held-out sentences in bulk and 24 of them one at a time,
    against the PyTorch reference decode: the same tokens, the same scores bar float32 noise, and the
    same bits alone as in bulk."""
    from nmtserve.engine import InflightBatcher
    from nmtserve.model.reference import reference_decode
    from nmtserve.runtime.onnxruntime import OnnxModel
    from nmtserve.runtime.spec import ModelSpec

    monkeypatch.setenv(native_step.ENV, "1")
    folder = Path(demo_repository) / "generate" / "1"
    runtime = OnnxModel(folder / "encoder.onnx", folder / "decoder.onnx", ModelSpec.load(folder / "model.json"), threads=1)
    assert runtime.native_step is not None
    tok = demo_checkpoint.tokenizer
    sources = [tok.encode(t) for t in demo_sentences[-96:]]
    options = SearchOptions(beam_size=4, max_length=128, num_hypotheses=2, alignment=True)
    engine = InflightBatcher(runtime, max_sentences=32).start()
    try:
        bulk = engine.translate(sources, options, timeout=300)
        alone = [engine.translate([s], options, timeout=60)[0] for s in sources[::4]]
    finally:
        engine.stop()
    reference = [h for at in range(0, len(sources), 32) for h in reference_decode(demo_checkpoint.model, sources[at:at + 32], options)]
    for i, (got, want) in enumerate(zip(bulk, reference, strict=True)):
        assert [h.tokens for h in got] == [h.tokens for h in want], i
        assert [h.alignment for h in got] == [h.alignment for h in want], i
        np.testing.assert_allclose([h.score for h in got], [h.score for h in want], atol=1e-4)
    for got, want in zip(alone, bulk[::4], strict=True):
        assert [(h.tokens, h.score) for h in got] == [(h.tokens, h.score) for h in want]


@needs_exact_ort_int8
def test_served_int8_decodes_equal_onnx_runtimes(demo_int8_repository, demo_checkpoint, demo_sentences, monkeypatch):
    """The engine on the compiled int8 step against the engine on ONNX Runtime's int8 graph (the
    export's quality gate measured that graph): 96 held-out sentences, the same hypotheses, the
    same scores bar the noise of a code moved by float32 noise (500 held-out sentences: no hypothesis
    differed; scores by at most 2e-3); and one at a time the same bits as in bulk."""
    from nmtserve.engine import InflightBatcher
    from nmtserve.runtime.onnxruntime import OnnxModel
    from nmtserve.runtime.spec import ModelSpec

    monkeypatch.setenv(native_step.ENV, "1")
    folder = Path(demo_int8_repository) / "generate" / "1"
    spec = ModelSpec.load(folder / "model.json")
    tok = demo_checkpoint.tokenizer
    sources = [tok.encode(t) for t in demo_sentences[-96:]]
    options = SearchOptions(beam_size=4, max_length=128, num_hypotheses=2, alignment=True)
    results = {}
    for native_on in (True, False):
        runtime = OnnxModel(folder / "encoder.onnx", folder / "decoder.onnx", spec, threads=1, native=native_on)
        assert (runtime.native_step is not None) == native_on
        engine = InflightBatcher(runtime, max_sentences=32).start()
        try:
            bulk = engine.translate(sources, options, timeout=300)
            alone = [engine.translate([s], options, timeout=60)[0] for s in sources[::4]] if native_on else None
        finally:
            engine.stop()
        results[native_on] = bulk
        if alone is not None:
            for got, want in zip(alone, bulk[::4], strict=True):
                assert [(h.tokens, h.score) for h in got] == [(h.tokens, h.score) for h in want]
    points = moved = 0
    for i, (got, want) in enumerate(zip(results[True], results[False], strict=True)):
        assert [h.tokens for h in got] == [h.tokens for h in want], i
        np.testing.assert_allclose([h.score for h in got], [h.score for h in want], atol=5e-3)
        for g, w in zip(got, want, strict=True):
            points += len(w.alignment)
            moved += sum(a != b for a, b in zip(g.alignment, w.alignment, strict=True))
    # An alignment point is the argmax of the attention: where two source positions nearly tie, the
    # encoder's int8 codes (moved by float32 noise, as the step's) can pick the other one.
    print(f"alignment points moved: {moved} of {points}")
    assert moved <= points // 100, f"{moved} of {points} alignment points moved"


@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_the_engines_step_on_its_pools_equals_the_step_on_feeds(demo_repository, demo_int8_repository, demo_checkpoint,
                                                                demo_sentences, monkeypatch, precision):
    """``run_pool`` (the engine's step reading and writing its own pools and table) against ``run``
    on the feeds the engine builds plus the engine's own K/V store: the same bits for every
    hypothesis, score and alignment, with beams of 4 and 2, target prefixes, terms (full log-probs),
    sentences joining and leaving a running batch of 5 and a pool of 3 steps' headroom (compacted
    and grown as it runs)."""
    from nmtserve.decoding.constraints import Constraint
    from nmtserve.decoding.search import TargetPrefix
    from nmtserve.engine import InflightBatcher
    from nmtserve.runtime.onnxruntime import OnnxModel
    from nmtserve.runtime.spec import ModelSpec

    monkeypatch.setenv(native_step.ENV, "1")
    folder = Path(demo_repository if precision == "fp32" else demo_int8_repository) / "generate" / "1"
    runtime = OnnxModel(folder / "encoder.onnx", folder / "decoder.onnx", ModelSpec.load(folder / "model.json"), threads=1)
    assert runtime.pool_step is not None
    tok = demo_checkpoint.tokenizer
    sources = [tok.encode(t) for t in demo_sentences[-40:]]
    four = SearchOptions(beam_size=4, max_length=96, num_hypotheses=2, alignment=True)
    two = SearchOptions(beam_size=2, max_length=96, num_hypotheses=2)
    prefixes = [TargetPrefix(), TargetPrefix(tuple(tok.encode(demo_sentences[0])[:2]))] * 5
    terms = [(Constraint(((tok.encode(demo_sentences[1])[0],),)),), ()] * 3
    requests = [(sources[:20], four, {}), (sources[20:30], two, {"prefixes": prefixes}),
                (sources[30:36], four, {"constraints": terms}), (sources[36:], two, {})]
    results = {}
    for pooled in (True, False):
        engine = InflightBatcher(runtime, max_sentences=5, pool_slack=3)
        if not pooled:
            engine.pool_step = None
        answers: list = [None] * len(requests)
        for i, (src, options, extra) in enumerate(requests):
            engine.submit(src, options, lambda r, e, i=i, answers=answers: answers.__setitem__(i, r if e is None else e), **extra)
        engine.start()
        try:
            deadline = time.monotonic() + 300
            while any(a is None for a in answers) and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            engine.stop()
        assert all(isinstance(a, list) for a in answers), answers
        results[pooled] = [[(h.tokens, h.score, h.alignment) for h in sentence] for a in answers for sentence in a]
    assert results[True] == results[False]


def test_the_pool_step_refuses_arrays_that_do_not_fit(tmp_path):
    model = _model()
    spec = _spec(model)
    step = native_step.NativeDecoder(build_cpu_decoder(model, tmp_path / "decoder.onnx"), spec)
    b, k, t, s = 2, 3, 6, 5
    shape = (t, b * k, spec.layers, spec.heads, spec.d_k)
    args = dict(b=b, g=2, tokens=np.ones((b, k), np.int64), steps=np.full(b, 2, np.int64), pool_key=np.zeros(shape, np.float32),
                pool_value=np.zeros(shape, np.float32), table=np.zeros((b, k, t), np.int32), start=np.zeros(b, np.int64),
                src_len=np.full(b, s, np.int64),
                memory_keys=[np.zeros((b, spec.heads, spec.d_k, s), np.float32)] * spec.layers,
                memory_values=[np.zeros((b, spec.heads, s, spec.d_k), np.float32)] * spec.layers)
    out = step.run_pool(**args)
    assert out["top_ids"].shape[:2] == (b, k)
    assert args["table"][:, :, 2].tolist() == [[0, 1, 2], [3, 4, 5]]
    for change, message in (({"g": t}, "do not fit"), ({"start": np.array([0, 3])}, "starts after the step"),
                            ({"src_len": np.array([s, s + 1])}, "longer than its memory"),
                            ({"table": np.full((b, k, t), 7, np.int32)}, "cache row is out of range"),
                            ({"tokens": np.full((b, k), 10_000, np.int64)}, "token id is out of range"),
                            ({"table": np.zeros((b, k, t), np.int64)}, "table has an unexpected dtype")):
        with pytest.raises(ValueError, match=message):
            step.run_pool(**{**args, **change})
    frozen = np.zeros(shape, np.float32)
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match="pool_key is read-only"):
        step.run_pool(**{**args, "pool_key": frozen})
