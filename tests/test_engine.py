"""In-flight batching gives every sentence exactly the result it gets decoded alone."""

from __future__ import annotations

import dataclasses
import threading
import time

import numpy as np
import pytest
from helpers import build, sources, staggered

from nmtserve.decoding.search import SearchOptions, TargetPrefix
from nmtserve.engine import InflightBatcher
from nmtserve.model.reference import reference_decode

OPTS = SearchOptions(beam_size=3, max_length=24, max_length_a=1.5, max_length_b=3, num_hypotheses=2)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return build(tmp_path_factory.mktemp("engine"))


def engine_for(onnx_model, max_sentences=6, max_target_len=24, max_beam=4, pool_slack=64):
    onnx_model.spec = dataclasses.replace(onnx_model.spec, max_target_len=max_target_len, max_batch=max_sentences)
    return InflightBatcher(onnx_model, max_sentences=max_sentences, max_beam=max_beam, pool_slack=pool_slack).start()


def tokens(results):
    return [[h.tokens for h in hyps] for hyps in results]


def test_staggered_concurrent_requests_equal_the_reference(tiny):
    model, onnx_model = tiny
    srcs = sources(36, model.config.src_vocab_size, seed=11)
    want = tokens(reference_decode(model, srcs, OPTS))
    engine = engine_for(onnx_model)
    got = staggered(engine, srcs, 4, OPTS)
    engine.stop()
    assert tokens(got) == want
    assert engine.stats["max_batch_seen"] == 6  # capacity was the limit: sentences queued and joined later


def test_sentences_with_target_prefixes_share_the_batch_and_equal_the_reference(tiny):
    model, onnx_model = tiny
    srcs = sources(12, model.config.src_vocab_size, seed=3)
    # None, a forced token (as a language token), a prompt of three tokens, in turns.
    kinds = [TargetPrefix(), TargetPrefix((7,)), TargetPrefix((9, 5, 6), prompt=3)]
    prefixes = [kinds[i % 3] for i in range(len(srcs))]
    opts = dataclasses.replace(OPTS, max_length=20)  # + a prompt of 3: within the engine's 24 steps
    want = tokens(reference_decode(model, srcs, opts, prefixes))
    assert all(w[0][: len(p.tokens)] == list(p.tokens) for w, p in zip(want, prefixes, strict=True))
    engine = engine_for(onnx_model)
    done = [engine.translate(srcs[i : i + 3], opts, timeout=60, prefixes=prefixes[i : i + 3]) for i in range(0, 12, 3)]
    engine.stop()
    assert tokens([h for part in done for h in part]) == want
    assert tokens(reference_decode(model, srcs, opts)) != want  # the prefixes changed the results


def test_cache_pool_compaction_keeps_results_exact(tiny):
    model, onnx_model = tiny
    engine = engine_for(onnx_model, max_sentences=2, max_target_len=8, pool_slack=4)  # 14 steps: wraps often
    opts = SearchOptions(beam_size=2, max_length=8)
    srcs = sources(12, model.config.src_vocab_size, seed=5)
    got = engine.translate(srcs, opts, timeout=60)
    engine.stop()
    assert engine.stats["steps"] > engine.pool_time  # the pool was compacted at least once
    assert tokens(got) == tokens(reference_decode(model, srcs, opts))


def test_requests_with_different_beam_sizes_run_side_by_side(tiny):
    model, onnx_model = tiny
    engine = engine_for(onnx_model)
    srcs = sources(6, model.config.src_vocab_size, seed=2)
    options = [SearchOptions(beam_size=b, max_length=20) for b in (1, 2, 4)]
    results = {}

    def client(o):
        results[o.beam_size] = engine.translate(srcs, o, timeout=60)

    threads = [threading.Thread(target=client, args=(o,)) for o in options]
    [t.start() for t in threads]
    [t.join() for t in threads]
    engine.stop()
    for o in options:
        assert tokens(results[o.beam_size]) == tokens(reference_decode(model, srcs, o))


def test_a_failing_step_fails_its_requests_and_the_engine_keeps_serving(tiny):
    model, onnx_model = tiny
    engine = engine_for(onnx_model)
    real = onnx_model.run_step
    calls = {"n": 0}

    def flaky(feeds):
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("device lost")
        return real(feeds)

    onnx_model.run_step = flaky
    try:
        with pytest.raises(RuntimeError, match="device lost"):
            engine.translate(sources(2, 61), OPTS, timeout=30)
        srcs = sources(3, model.config.src_vocab_size, seed=9)
        assert tokens(engine.translate(srcs, OPTS, timeout=30)) == tokens(reference_decode(model, srcs, OPTS))
    finally:
        onnx_model.run_step = real
        engine.stop()


def test_empty_request_and_too_wide_beam(tiny):
    _, onnx_model = tiny
    engine = engine_for(onnx_model, max_beam=4)
    assert engine.translate([], OPTS) == []
    with pytest.raises(ValueError, match="exceeds this server's maximum"):
        engine.translate([[5, 2]], SearchOptions(beam_size=5, max_length=4))
    with pytest.raises(ValueError, match="source 1 has more than max_source_len"):
        engine.translate([[5, 2], [5] * engine.spec.max_source_len + [2]], OPTS)
    engine.stop()


def test_stopped_engine_refuses_new_work(tiny):
    _, onnx_model = tiny
    engine = engine_for(onnx_model)
    engine.stop()
    with pytest.raises(RuntimeError, match="shutting down"):
        engine.translate([[5, 2]], OPTS)
    assert engine.running == 0


def test_cancelled_request_leaves_the_batch_and_frees_its_rows(tiny):
    model, onnx_model = tiny
    engine = engine_for(onnx_model, max_sentences=4)
    flag = threading.Event()
    outcome = {}

    def callback(results, error):
        outcome["error"] = error

    engine.submit(sources(8, model.config.src_vocab_size, seed=4), SearchOptions(beam_size=2, max_length=24),
                  callback, cancelled=flag.is_set)
    flag.set()
    deadline = time.monotonic() + 10
    while "error" not in outcome and time.monotonic() < deadline:
        time.sleep(0.01)
    engine.stop()
    assert "cancelled" in str(outcome["error"])
    assert engine.rows_in_use == 0
    assert engine.running == 0


def test_sequential_single_sentence_requests_never_see_a_previous_sentence(tiny):
    """Regression: per-group cross-attention memory was cached by id() of sentence objects, which
    Python reuses after a sentence finishes, so a new request could decode against old memory.
    A new sentence also reuses a finished one's memory row: its memory must replace it."""
    model, onnx_model = tiny
    engine = engine_for(onnx_model)
    srcs = sources(40, model.config.src_vocab_size, seed=21)
    opts = SearchOptions(beam_size=2, max_length=16)
    got = [engine.translate([s], opts, timeout=30)[0] for s in srcs]
    engine.stop()
    assert tokens(got) == tokens(reference_decode(model, srcs, opts))


def test_serving_modules_do_not_import_torch():
    """Each Python-backend instance is its own process: torch would add ~200 MB to every one."""
    import subprocess
    import sys

    code = ("import sys, nmtserve.server.triton_models, nmtserve.engine, nmtserve.runtime.onnxruntime; "
            "sys.exit('torch' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_a_failing_encode_fails_only_the_requests_it_was_admitting(tiny):
    model, onnx_model = tiny
    engine = engine_for(onnx_model)
    real = onnx_model.encode
    running = sources(3, model.config.src_vocab_size, seed=12)
    opts = SearchOptions(beam_size=2, max_length=24)
    outcome: dict = {}
    first_step = threading.Event()

    def encode(src):
        if outcome.get("armed"):
            outcome["armed"] = False
            raise RuntimeError("out of device memory")
        first_step.set()
        return real(src)

    onnx_model.encode = encode
    try:
        engine.submit(running, opts, lambda r, e: outcome.update(running=(r, e)))
        first_step.wait(10)
        outcome["armed"] = True
        with pytest.raises(RuntimeError, match="out of device memory"):
            engine.translate(sources(2, 61, seed=13), opts, timeout=30)
        deadline = time.monotonic() + 30
        while "running" not in outcome and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        onnx_model.encode = real
        engine.stop()
    results, error = outcome["running"]
    assert error is None and tokens(results) == tokens(reference_decode(model, running, opts))
    assert engine.rows_in_use == 0  # every row came back
    assert engine.running == 0  # and the groups emptied


def test_a_long_source_joining_short_ones_widens_then_narrows_the_memory(tiny):
    """The memory group grows when a longer source joins mid-decode and narrows once it leaves;
    every sentence keeps exactly its own memory throughout."""
    model, onnx_model = tiny
    engine = engine_for(onnx_model, max_target_len=40)
    opts = SearchOptions(beam_size=2, max_length=40, max_length_a=1.0, max_length_b=2)
    rng = np.random.default_rng(3)
    short = [[*rng.integers(4, 61, size=int(rng.integers(2, 6))).tolist(), 2] for _ in range(10)]
    long = [[*rng.integers(4, 61, size=70).tolist(), 2]]
    widths = []
    real_step = engine._step

    def step():
        real_step()
        widths.append(max((g.width for g in engine._groups.values()), default=0))

    engine._step = step
    got = {}
    first = threading.Thread(target=lambda: got.update(a=engine.translate(short[:5], opts, timeout=60)))
    first.start()
    time.sleep(0.01)
    got["long"] = engine.translate(long, opts, timeout=60)  # shorter max length: leaves early
    got["b"] = engine.translate(short[5:], opts, timeout=60)
    first.join()
    engine.stop()
    for key, srcs in (("a", short[:5]), ("long", long), ("b", short[5:])):
        assert tokens(got[key]) == tokens(reference_decode(model, srcs, opts)), key
    assert max(widths) >= 71 and widths[-1] < 20  # widened for the long source, narrowed after


@pytest.mark.parametrize("slotted", [False, True], ids=["rows", "slots"])
def test_group_rows_follow_their_sentences_through_removal_growth_and_shrinking(slotted):
    """Row by row (ONNX Runtime's feeds, a GPU) or through the memory slots (the compiled host
    step): every row keeps its own sentence's memory, source length and table."""
    from types import SimpleNamespace

    from nmtserve.engine.batcher import _Group, _Request
    from nmtserve.runtime.arrays import HOST
    from nmtserve.runtime.spec import ModelSpec

    spec = ModelSpec(layers=2, heads=2, d_k=3, vocab=10, max_positions=64, pad_id=0, bos_id=1, eos_id=2,
                     unk_id=3, max_source_len=64, max_target_len=20)
    engine = SimpleNamespace(spec=spec, arrays=HOST, pool_time=30, max_sentences=8, _float=np.float32,
                             pool_step=object() if slotted else None, vocabularies=None)
    rng = np.random.default_rng(0)
    memory = {}

    def add(group, n):
        request = _Request([[5] * n], SearchOptions(beam_size=1, max_length=10), lambda r, e: None)
        memory[id(request)] = ([rng.standard_normal((2, 3, n)).astype(np.float32) for _ in range(2)],
                               [rng.standard_normal((2, n, 3)).astype(np.float32) for _ in range(2)])
        group.fit_width(n)
        group.add(request, 0, start=len(memory), src_len=n, keys=memory[id(request)][0], values=memory[id(request)][1])
        group.table[group.size - 1] = len(memory)  # a table row that must travel with its sentence

    def check(group):
        for row, (request, _) in enumerate(group.members):
            keys, values = memory[id(request)]
            n = len(request.sources[0])
            assert group.src_len[row] == n and group.table[row, 0, 0] == group.start[row]
            m = group.slot[row] if slotted else row
            for layer in range(2):
                np.testing.assert_array_equal(group.keys[layer][m, :, :, :n], keys[layer])
                np.testing.assert_array_equal(group.values[layer][m, :, :n], values[layer])
        if slotted:  # a permutation: the live rows' slots, then the free ones
            assert sorted(group.slot.tolist()) == list(range(group.capacity))

    group = _Group(engine, beam=1, src_len=5)
    for n in (3, 5, 2):
        add(group, n)
    group.remove(np.array([0]))  # the last row moves into row 0
    assert [len(r.sources[0]) for r, _ in group.members] == [2, 5]
    check(group)
    if slotted:
        assert group.slot[:2].tolist() == [2, 1]  # the memories stayed where they were written
    add(group, 40)  # wider memory for a longer source
    assert group.width == 48
    check(group)
    add(group, 4)
    add(group, 3)
    check(group)
    group.remove(np.array([1, 2]))  # the long source leaves with another row
    group.fit_width(0)
    assert group.width == 16  # narrowed, in steps of 16
    check(group)


def test_memory_groups_start_small_and_grow_to_the_batch(tiny):
    model, onnx_model = tiny
    engine = engine_for(onnx_model, max_sentences=12)
    capacities = []
    real_group = engine._group

    def group(beam, src_len):
        g = real_group(beam, src_len)
        capacities.append(g.capacity)
        return g

    engine._group = group
    srcs = sources(30, model.config.src_vocab_size, seed=41)
    opts = SearchOptions(beam_size=2, max_length=20)
    got = engine.translate(srcs, opts, timeout=60)
    engine.stop()
    assert tokens(got) == tokens(reference_decode(model, srcs, opts))
    assert capacities[0] == 8 and max(capacities) == 12  # doubled, capped at max_sentences


def test_two_decode_loops_over_one_runtime_equal_the_reference(tiny):
    """EnginePool: requests spread over two loops sharing the ONNX Runtime sessions; every
    sentence still gets exactly its reference result, and both loops took work."""
    from nmtserve.engine import EnginePool

    model, onnx_model = tiny
    onnx_model.spec = dataclasses.replace(onnx_model.spec, max_target_len=24, max_batch=8)
    pool = EnginePool(onnx_model, workers=2, max_sentences=8, max_beam=4).start()
    srcs = sources(36, model.config.src_vocab_size, seed=31)
    got = staggered(pool, srcs, 3, OPTS)
    pool.stop()
    assert tokens(got) == tokens(reference_decode(model, srcs, OPTS))
    assert all(e.stats["sentences"] > 0 for e in pool.engines)
    assert pool.stats["sentences"] == 36


def test_cpu_layout_uses_every_core_without_oversubscribing():
    from nmtserve.server.triton_models import cpu_layout

    assert cpu_layout("inprocess", cores=2) == (2, 1)
    assert cpu_layout("inprocess", cores=16) == (2, 8)
    assert cpu_layout("inprocess", cores=1) == (1, 1)
    assert cpu_layout("inprocess", workers=1, threads=4, cores=2) == (1, 4)  # asked for: kept
    assert cpu_layout("tensorrt") == (1, None)  # one loop per GPU


def test_the_running_batch_stops_at_the_cpu_knee_and_never_passes_the_export():
    from nmtserve.server.triton_models import running_batch

    assert running_batch("inprocess", 0, 64, cores=2) == 24  # 12 a core: latency under bulk
    assert running_batch("inprocess", 0, 64, cores=16) == 64  # the export's max batch caps it
    assert running_batch("inprocess", 40, 64, cores=2) == 40  # asked for: kept
    assert running_batch("inprocess", 100, 64, cores=2) == 64  # never past the export's profile
    assert running_batch("tensorrt", 0, 64) == 64  # a GPU step barely grows with the batch


def test_a_request_split_over_two_loops_comes_back_whole_and_in_order(tiny):
    from nmtserve.engine import EnginePool

    model, onnx_model = tiny
    onnx_model.spec = dataclasses.replace(onnx_model.spec, max_target_len=24, max_batch=8)
    pool = EnginePool(onnx_model, workers=2, max_sentences=8, max_beam=4).start()
    srcs = sources(11, model.config.src_vocab_size, seed=32)
    got = pool.translate(srcs, OPTS, timeout=60)
    pool.stop()
    assert tokens(got) == tokens(reference_decode(model, srcs, OPTS))
    assert [e.stats["sentences"] for e in pool.engines] == [5, 6]  # both loops decoded a part


def _slowed(onnx_model, seconds: float):
    """The runtime with every decoder step taking at least ``seconds`` (a busy server)."""
    class Slow:
        spec = onnx_model.spec

        def encode(self, src):
            return onnx_model.encode(src)

        def run_step(self, feeds, outputs=None):
            time.sleep(seconds)
            return onnx_model.run_step(feeds) if outputs is None else onnx_model.run_step(feeds, outputs)

    return Slow()


@pytest.mark.parametrize("pool", [False, True])
def test_a_full_queue_refuses_new_work_as_busy_and_the_rest_is_answered(tiny, pool):
    from nmtserve.engine import EngineBusy, EnginePool, QueueLimits

    model, onnx_model = tiny
    onnx_model.spec = dataclasses.replace(onnx_model.spec, max_target_len=24, max_batch=2)
    runtime = _slowed(onnx_model, 0.01)
    limits = QueueLimits(max_queued=6, timeout_s=None)
    engine = (EnginePool(runtime, 2, max_sentences=2, max_beam=4, limits=limits) if pool else
              InflightBatcher(runtime, max_sentences=2, max_beam=4, limits=limits)).start()
    srcs = sources(12, model.config.src_vocab_size, seed=5)
    done, refused = [], []
    for i in range(6):  # 2 sentences each: 2 start decoding, then the queue fills
        try:
            engine.submit(srcs[2 * i : 2 * i + 2], OPTS, lambda r, e, i=i: done.append((i, r, e)))
        except EngineBusy as exc:
            refused.append((i, str(exc)))
    deadline = time.monotonic() + 60
    while len(done) < 6 - len(refused) and time.monotonic() < deadline:
        time.sleep(0.01)
    engine.stop()
    assert refused and "queue limit of 6" in refused[0][1]
    assert all(e is None for _, _, e in done) and len(done) == 6 - len(refused)
    want = tokens(reference_decode(model, srcs, OPTS))
    for i, r, _ in done:
        assert tokens(r) == want[2 * i : 2 * i + 2]


def test_a_request_waiting_past_the_queue_timeout_fails_as_busy(tiny):
    from nmtserve.engine import EngineBusy, QueueLimits

    model, onnx_model = tiny
    onnx_model.spec = dataclasses.replace(onnx_model.spec, max_target_len=24, max_batch=1)
    engine = InflightBatcher(_slowed(onnx_model, 0.05), max_sentences=1, max_beam=4,
                             limits=QueueLimits(max_queued=None, timeout_s=0.2)).start()
    srcs = sources(3, model.config.src_vocab_size, seed=6)
    outcomes: dict = {}
    for i in range(3):
        engine.submit([srcs[i]], OPTS, lambda r, e, i=i: outcomes.__setitem__(i, e))
    deadline = time.monotonic() + 60
    while len(outcomes) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    engine.stop()
    assert outcomes[0] is None  # started at once
    late = [e for e in outcomes.values() if e is not None]
    assert late and all(isinstance(e, EngineBusy) and "queue timeout of 0.2 s" in str(e) for e in late)


def test_the_cache_pools_headroom_is_sized_by_memory():
    """64 steps of headroom where a step's K/V are small; at NLLB-200-600M's size the headroom is
    what 64 MB hold, at least 8 steps (it was half the server's memory under load at 64)."""
    from nmtserve.engine.batcher import MIN_POOL_SLACK, default_pool_slack
    from nmtserve.runtime.spec import ModelSpec

    ids = dict(max_positions=256, pad_id=0, bos_id=1, eos_id=2, unk_id=3)
    small = ModelSpec(layers=3, heads=4, d_k=64, vocab=8000, **ids)
    nllb = ModelSpec(layers=12, heads=16, d_k=64, vocab=256206, **ids)
    assert default_pool_slack(small, rows=128, itemsize=4) == 64
    assert default_pool_slack(nllb, rows=128, itemsize=4) == MIN_POOL_SLACK
    assert default_pool_slack(nllb, rows=16, itemsize=4) == 64 * 2**20 // (2 * 16 * 12 * 1024 * 4)


def test_a_one_sentence_request_behind_a_bulk_request_starts_at_the_next_free_row(tiny):
    """Round robin: waiting requests take the free rows one sentence each, so a request of one
    sentence queued behind 60 sentences of another starts after at most one of them, and both
    get exactly their reference results."""
    model, onnx_model = tiny
    onnx_model.spec = dataclasses.replace(onnx_model.spec, max_target_len=24, max_batch=2)
    engine = InflightBatcher(_slowed(onnx_model, 0.005), max_sentences=2, max_beam=4).start()
    srcs = sources(61, model.config.src_vocab_size, seed=8)
    finished: list[tuple[str, float]] = []
    results: dict = {}

    def done(name):
        def callback(r, e):
            finished.append((name, time.monotonic()))
            results[name] = (r, e)
        return callback

    engine.submit(srcs[:60], OPTS, done("bulk"))
    time.sleep(0.05)  # the bulk request runs; 58 of its sentences wait
    started = time.monotonic()
    engine.submit(srcs[60:], OPTS, done("one"))
    deadline = time.monotonic() + 120
    while len(finished) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    engine.stop()
    assert [name for name, _ in finished] == ["one", "bulk"]
    want = tokens(reference_decode(model, srcs, OPTS))
    assert results["one"][1] is None and tokens(results["one"][0]) == want[60:]
    assert results["bulk"][1] is None and tokens(results["bulk"][0]) == want[:60]
    # it waited for a free row and its own decode, not for the bulk's queue (60 sentences x
    # up to 24 steps x 5 ms on 2 rows would be seconds)
    assert dict(finished)["one"] - started < 0.5 * (dict(finished)["bulk"] - started)


def test_a_batch_encoded_in_chunks_decodes_as_encoded_at_once(tiny, monkeypatch):
    """A batch's encoder outputs are made chunk by chunk (at most ENCODE_CHUNK_BYTES of memories at
    once, each added before the next is encoded): the same results, fewer sentences per encode;
    a chunk that fails fails every request being admitted, and their rows come back."""
    from nmtserve.engine import batcher

    model, onnx_model = tiny
    srcs = sources(6, model.config.src_vocab_size, seed=21)
    want = tokens(reference_decode(model, srcs, OPTS))
    real, calls = onnx_model.encode, []

    def encode(src):
        calls.append(src.shape[0])
        if len(calls) == 3 and fail:
            raise RuntimeError("out of memory")
        return real(src)

    monkeypatch.setattr(onnx_model, "encode", encode)
    monkeypatch.setattr(batcher, "ENCODE_CHUNK_BYTES", 1)  # one sentence a chunk
    fail = False
    engine = engine_for(onnx_model)
    try:
        assert tokens(engine.translate(srcs, OPTS, timeout=60)) == want
        assert calls == [1] * 6
        calls.clear()
        fail = True
        with pytest.raises(RuntimeError, match="out of memory"):
            engine.translate(srcs, OPTS, timeout=60)
        assert engine.rows_in_use == 0 and engine.running == 0  # the two chunks added left again
        fail = False
        assert tokens(engine.translate(srcs[:2], OPTS, timeout=60)) == want[:2]
    finally:
        engine.stop()


def test_a_pool_grown_mid_run_keeps_what_was_written_and_touches_nothing_else(tiny, monkeypatch):
    """Sentences joining a running group past its capacity grow its pool while steps have run:
    the new pool gets the times before ``g`` of the rows ever written and nothing else (the rest
    stays zero pages, no memory), and every sentence still gets its reference result and, to
    within the graphs' batch rounding, its score alone."""
    from nmtserve.engine.batcher import _Group

    model, onnx_model = tiny
    engine = engine_for(onnx_model, max_sentences=12, pool_slack=4)
    grown = []
    real = _Group.resize_pool

    def resize_pool(group):
        before = None if group.past_key is None else group.past_key.shape
        real(group)
        if before is not None and group.past_key.shape != before and group.engine.g > 0:
            g, r = group.engine.g, group.rows_written
            grown.append((g, r))
            assert not group.past_key[g:].any() and not group.past_value[:, r:].any()

    monkeypatch.setattr(_Group, "resize_pool", resize_pool)
    opts = SearchOptions(beam_size=2, max_length=20)
    first, later = sources(3, model.config.src_vocab_size, seed=61), sources(10, model.config.src_vocab_size, seed=62)
    got: dict = {}
    reached, queued = threading.Event(), threading.Event()
    step = engine._step

    def paused_step():  # after 3 steps the loop waits for the later request to be queued
        if engine.stats["steps"] >= 3 and not queued.is_set():
            reached.set()
            queued.wait(30)
        return step()

    engine._step = paused_step
    clients = [threading.Thread(target=lambda: got.setdefault("first", engine.translate(first, opts, timeout=60))),
               threading.Thread(target=lambda: got.setdefault("later", engine.translate(later, opts, timeout=60)))]
    clients[0].start()
    assert reached.wait(30)
    clients[1].start()
    deadline = time.monotonic() + 30
    while not engine.queued and time.monotonic() < deadline:
        time.sleep(0.001)
    queued.set()
    [c.join() for c in clients]
    engine.stop()
    assert grown and any(r > 0 for _, r in grown)  # grown while rows were live
    assert tokens(got["first"]) == tokens(reference_decode(model, first, opts))
    assert tokens(got["later"]) == tokens(reference_decode(model, later, opts))
    monkeypatch.undo()
    alone = engine_for(onnx_model, max_sentences=12)  # each sentence alone: no growth
    want = [alone.translate([s], opts, timeout=60)[0] for s in first + later]
    alone.stop()
    # The scores too (a K/V lost in the move shifts them far more than these graphs' batch
    # rounding, ~1e-8).
    flat = [h for hyps in got["first"] + got["later"] for h in hyps]
    expected = [h for hyps in want for h in hyps]
    assert [h.tokens for h in flat] == [h.tokens for h in expected]
    assert [h.score for h in flat] == pytest.approx([h.score for h in expected], abs=1e-6)


def test_one_encoder_batch_of_two_beam_widths_gives_each_group_its_own_memories(tiny):
    """Sentences admitted together are encoded together and their memories written a group at a
    time (``_Group.set_memories``): a beam-1 request of long sources and a beam-3 request of short
    ones in one encoder batch (wider than the beam-3 group's memory), interleaved in it; each
    sentence still gets exactly its reference decode, and the memories are laid out row by row."""
    model, onnx_model = tiny
    onnx_model.spec = dataclasses.replace(onnx_model.spec, max_target_len=24, max_batch=12)
    engine = InflightBatcher(onnx_model, max_sentences=12, max_beam=4, pool_slack=64)
    rng = np.random.default_rng(5)
    long = [[*rng.integers(4, 61, size=int(rng.integers(40, 60))).tolist(), 2] for _ in range(4)]
    short = [[*rng.integers(4, 61, size=int(rng.integers(2, 7))).tolist(), 2] for _ in range(5)]
    wide, narrow = SearchOptions(beam_size=1, max_length=24), SearchOptions(beam_size=3, max_length=24)
    encoded, written = [], []
    real_encode, real_admit = onnx_model.encode, engine._admit

    def encode(src_ids):
        encoded.append(src_ids.shape)
        return real_encode(src_ids)

    def admit():
        real_admit()
        for beam, group in engine._groups.items():  # each row's memory is its own sentence's, encoded alone
            for row, (request, i) in enumerate(group.members):
                if (beam, request.sources[i][0], row) in written:
                    continue
                keys, _ = real_encode(np.array([request.sources[i]], np.int32))
                n = len(request.sources[i])
                m = group.slot[row] if group.slotted else row
                np.testing.assert_allclose(group.keys[0][m, :, :, :n], keys[0][0, :, :, :n], rtol=0, atol=1e-5)
                written.append((beam, request.sources[i][0], row))

    onnx_model.encode, engine._admit = encode, admit
    got = {}
    done = threading.Event()
    remaining = [2]

    def keep(name):
        def callback(results, error):
            got[name] = error or results
            remaining[0] -= 1
            if not remaining[0]:
                done.set()
        return callback

    engine.submit(long, wide, keep("long"))  # both queued before the loop starts: one admission
    engine.submit(short, narrow, keep("short"))
    engine.start()
    try:
        assert done.wait(60)
    finally:
        engine.stop()
        onnx_model.encode = real_encode
    assert encoded[0][0] == 9  # one encoder batch held both requests' sentences
    assert tokens(got["long"]) == tokens(reference_decode(model, long, wide))
    assert tokens(got["short"]) == tokens(reference_decode(model, short, narrow))
    assert len(written) == 9
