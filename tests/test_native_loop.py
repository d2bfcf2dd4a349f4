"""The engine's steps with no Python between them (``DecoderStep.run_steps``, issue 49) against the
step-by-step path it replaces (``run_pool`` + the search's compiled step + the ancestor table, one
Python round trip each): the same bits for every hypothesis, score, alignment and token score,
with requests arriving while steps run, target prefixes, confidence, the loop cut, the three
search rules (fairseq's full-vocabulary last step in Python), terms and repetition controls (their
steps in Python); and its stops: a queued request, ``max_steps``, a finished sentence."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from nmtserve.decoding import native
from nmtserve.decoding.search import SearchOptions, TargetPrefix
from nmtserve.runtime import native_step

pytestmark = pytest.mark.skipif(native.module is None and not os.environ.get("CI"),
                                reason="nmtserve_native is not installed (scripts/setup.sh builds it)")


def _runtime(repository: Path, monkeypatch):
    from nmtserve.runtime.onnxruntime import OnnxModel
    from nmtserve.runtime.spec import ModelSpec

    monkeypatch.setenv(native_step.ENV, "1")
    folder = Path(repository) / "generate" / "1"
    runtime = OnnxModel(folder / "encoder.onnx", folder / "decoder.onnx", ModelSpec.load(folder / "model.json"), threads=1)
    assert runtime.pool_steps is not None
    return runtime


def _decode(runtime, requests, compiled: bool, stagger: float = 0.0):
    """Every request's hypotheses as (tokens, score, alignment, token log-probs), and the compiled
    calls' step counts."""
    from nmtserve.engine import InflightBatcher

    engine = InflightBatcher(runtime, max_sentences=6, pool_slack=4)
    calls: list[int] = []
    if compiled:
        run = engine.pool_steps

        def counted(**kw):
            calls.append(run(**kw))
            return calls[-1]

        engine.pool_steps = counted
    else:
        engine.pool_steps = None
    answers: list = [None] * len(requests)
    done = threading.Event()

    def answer(i, results, error):
        answers[i] = results if error is None else error
        if all(a is not None for a in answers):
            done.set()

    engine.start()
    try:
        for i, (src, options, extra) in enumerate(requests):
            engine.submit(src, options, lambda r, e, i=i: answer(i, r, e), **extra)
            time.sleep(stagger)  # later requests arrive while earlier ones decode
        assert done.wait(300), answers
    finally:
        engine.stop()
    assert all(isinstance(a, list) for a in answers), answers
    return [[(h.tokens, h.score, h.alignment, h.token_logprobs) for h in sentence] for a in answers for sentence in a], calls


@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_compiled_steps_give_the_step_by_step_paths_bits(demo_repository, demo_int8_repository, demo_checkpoint,
                                                          demo_sentences, monkeypatch, precision):
    from nmtserve.decoding.constraints import Constraint

    runtime = _runtime(demo_repository if precision == "fp32" else demo_int8_repository, monkeypatch)
    tok = demo_checkpoint.tokenizer
    src = [tok.encode(t) for t in demo_sentences[-30:]]
    prefix = TargetPrefix(tuple(tok.encode(demo_sentences[0])[:2]))
    four = dict(beam_size=4, max_length=96, num_hypotheses=2)
    requests = [
        (src[:1], SearchOptions(**four, alignment=True, confidence=True), {}),
        (src[1:7], SearchOptions(**four, confidence=True), {"prefixes": [prefix, TargetPrefix()] * 3}),
        (src[7:9], SearchOptions(**four, loop_repeats=2, loop_ngram=2), {}),
        (src[9:13], SearchOptions(beam_size=4, num_hypotheses=4, max_length=7, rule="fairseq"), {}),  # EOS forced at 7
        (src[13:16], SearchOptions(**four, rule="opennmt", alignment=True), {}),
        (src[16:18], SearchOptions(**four), {"constraints": [(Constraint(((src[0][0],),)),), ()]}),
        (src[18:20], SearchOptions(**four, no_repeat_ngram_size=2), {}),
        (src[20:], SearchOptions(**four, length_penalty=0.6), {}),
    ]
    native.module.loop_clock(reset=True)
    compiled, calls = _decode(runtime, requests, compiled=True, stagger=0.003)
    left_out = native.module.loop_clock()["dead_rows"]
    stepwise, _ = _decode(runtime, requests, compiled=False)
    assert len(compiled) == 30
    assert compiled == stepwise
    # The compiled steps left the dead beams' rows out (a sentence's beams after its first, until
    # its first ranked step: through the target prefixes too); the step-by-step path computes them.
    assert left_out >= 3, left_out
    assert max(calls) > 1, calls  # runs of steps were one call
    lone, calls = _decode(runtime, [(src[-1:], SearchOptions(**four, length_penalty=0.6), {})], compiled=True)
    assert lone == [stepwise[-1]]
    assert sum(calls) > len(calls), calls  # a lone sentence: many steps a call
    # Done sentences parked in the call (not computed, their rows untouched) until a third of the
    # running batch is done or 4 steps passed: the same bits, in fewer calls.
    from nmtserve.engine import batcher

    monkeypatch.setattr(batcher, "PARK_SHARE", 3)
    native.module.loop_clock(reset=True)
    parked, parked_calls = _decode(runtime, requests, compiled=True, stagger=0.003)
    assert parked == stepwise
    assert native.module.loop_clock()["parked_rows"] > 0
    monkeypatch.setattr(batcher, "PARK_SHARE", 1)  # every sentence waits for the whole batch, or 4 steps
    native.module.loop_clock(reset=True)
    parked, _ = _decode(runtime, requests, compiled=True)
    assert parked == stepwise
    assert native.module.loop_clock()["parked_rows"] > 0


def test_compiled_steps_stop_for_a_queued_request_and_at_max_steps(demo_repository, demo_checkpoint, demo_sentences,
                                                                   monkeypatch):
    from nmtserve.engine import InflightBatcher

    runtime = _runtime(demo_repository, monkeypatch)
    tok = demo_checkpoint.tokenizer
    src = [tok.encode(t) for t in demo_sentences[:3]]
    options = SearchOptions(beam_size=4, max_length=96)
    expected = InflightBatcher(runtime).start()
    try:
        want = [[h.tokens for h in s] for s in expected.translate(src, options)]
    finally:
        expected.stop()
    for change, most in (({"interrupt": np.ones(1, np.int32)}, 1), ({"max_steps": 2}, 2)):
        engine = InflightBatcher(runtime)
        run, counts = engine.pool_steps, []

        def limited(change=change, run=run, counts=counts, **kw):
            counts.append(run(**{**kw, **change}))
            return counts[-1]

        engine.pool_steps = limited
        engine.start()
        try:
            got = [[h.tokens for h in s] for s in engine.translate(src, options)]
        finally:
            engine.stop()
        assert got == want
        assert counts and max(counts) == most and min(counts) >= 1, counts


def test_run_steps_refuses_what_does_not_fit(demo_repository, monkeypatch):
    from nmtserve.engine import InflightBatcher

    runtime = _runtime(demo_repository, monkeypatch)
    engine = InflightBatcher(runtime)
    seen = []

    def check(**kw):
        for change, message in (({"max_steps": 0}, "max_steps >= 1"), ({"t_lo": kw["g"] + 1}, "t_lo <= g"),
                                ({"interrupt": np.zeros(1, np.int64)}, "interrupt has an unexpected dtype"),
                                ({"b": kw["b"] + 100}, "do not fit")):
            with pytest.raises(ValueError, match=message):
                runtime.pool_steps(**{**kw, **change})
            seen.append(message)
        return runtime.pool_steps(**kw)

    engine.pool_steps = check
    engine.start()
    try:
        assert engine.translate([[5, 6, 7, runtime.spec.eos_id]], SearchOptions(beam_size=2, max_length=8))
    finally:
        engine.stop()
    assert len(seen) >= 4
