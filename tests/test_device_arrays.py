"""The engine over an arrays backend: the cache and memory stay where the backend keeps them.

``OnnxBoundModel`` binds every input and output by address (ONNX Runtime I/O binding), the code
that runs with CuPy arrays on CUDA. Here it runs on the CPU provider over a "device" backend
whose arrays are a distinct type and whose every host<->device transfer is recorded, so the
tests can check what would cross the PCIe bus: per step only the small int/bool tables go up
and only the log-probabilities come down; no float array (cache, memory) ever crosses.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from helpers import (
    Device,
    RecordingDevice,
    assert_only_candidates_came_down,
    build,
    sources,
    staggered,
)

from nmtserve.decoding.search import SearchOptions
from nmtserve.engine import InflightBatcher
from nmtserve.model.reference import reference_decode
from nmtserve.runtime.arrays import HOST
from nmtserve.runtime.onnxruntime import OnnxBoundModel

OPTS = SearchOptions(beam_size=3, max_length=24, max_length_a=1.5, max_length_b=3, num_hypotheses=2)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bound")
    model, onnx_model = build(folder)
    return model, folder, onnx_model.spec


def bound(tiny, arrays):
    _, folder, spec = tiny
    return OnnxBoundModel(folder / "encoder.onnx", folder / "decoder.onnx", spec, arrays=arrays, threads=1)


def tokens(results):
    return [[h.tokens for h in hyps] for hyps in results]


def test_bound_graphs_equal_the_session_run_graphs(tiny):
    model, folder, spec = tiny
    plain = build.__globals__["OnnxModel"](folder / "encoder.onnx", folder / "decoder.onnx", spec, threads=1)
    io_bound = bound(tiny, HOST)
    src = np.array([[5, 9, 11, 2], [7, 2, 1, 1]], dtype=np.int32)
    for want, got in zip(plain.encode(src), io_bound.encode(src), strict=True):
        for w, g in zip(want, got, strict=True):
            np.testing.assert_array_equal(w, g)


def test_engine_on_bound_graphs_equals_the_reference(tiny):
    model = tiny[0]
    srcs = sources(30, model.config.src_vocab_size, seed=13)
    engine = InflightBatcher(bound(tiny, HOST), max_sentences=5, max_beam=4).start()
    got = staggered(engine, srcs, 5, OPTS)
    engine.stop()
    assert tokens(got) == tokens(reference_decode(model, srcs, OPTS))


def test_cache_and_memory_never_cross_between_host_and_device(tiny):
    model = tiny[0]
    device = RecordingDevice()
    runtime = bound(tiny, device)
    runtime.spec = dataclasses.replace(runtime.spec, max_target_len=20)
    vocab = runtime.spec.vocab
    # A small pool with little slack, so compaction (a device-side copy) runs too.
    engine = InflightBatcher(runtime, max_sentences=3, max_beam=3, pool_slack=4)
    cache_feeds = []
    real_step = runtime.run_step

    def run_step(feeds):
        cache_feeds.extend(type(feeds[name]) for name in ("past_key", "past_value"))
        return real_step(feeds)

    runtime.run_step = run_step
    engine.start()
    srcs = sources(12, model.config.src_vocab_size, seed=17)
    opts = SearchOptions(beam_size=3, max_length=20)
    got = engine.translate(srcs, opts, timeout=60)
    engine.stop()
    assert tokens(got) == tokens(reference_decode(model, srcs, opts))
    assert set(cache_feeds) == {Device}  # the pool's windows, read where they live
    assert engine.stats["steps"] > engine.pool_time  # compaction ran
    assert_only_candidates_came_down(device, engine, opts.beam_size, vocab)
    # Up: ids, positions, tables and masks only; never a float array (cache or memory).
    kinds = {kind for kind, _ in device.uploads}
    assert kinds <= {"i", "b"}, device.uploads
    # The biggest table is cache_rows (batch, beam, window): bounded by the rows and the pool time.
    assert max(int(np.prod(shape)) for _, shape in device.uploads) <= 3 * 3 * engine.pool_time
