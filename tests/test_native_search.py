"""The compiled search step (``nmtserve_native``, issue 49) against the Python search, the reference.

* Step by step: the same random candidates into a batch on the compiled step and into the two
  Python steps (vectorized, row by row), with mixed beams, rules, lengths, penalties, early
  stopping, patience, target prefixes (forced and prompt), alignments, token log-probabilities,
  the loop cut, exact ties, -inf candidates, sentences joining and leaving: every array of the
  state and every finished hypothesis equal after every step.
* Whole searches (``beam_search``) on the test models of tests/test_search.py: the same
  hypotheses to the last bit of their scores.
* Served decodes: the demo's held-out sentences through the engine on its exported graphs, the
  compiled step against the Python one, with and without alignments and confidence, alone and in
  bulk (what batch invariance needs): the same tokens, scores, alignments, log-probabilities.

CI installs the module (scripts/setup.sh), so there these tests must run; elsewhere they skip
when it is not built.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from nmtserve.decoding import native
from nmtserve.decoding.search import _ROW_ARRAYS, BeamBatch, Candidates, SearchOptions, TargetPrefix
from tests.test_search import Dense32, PrefixModel, Preselecting, random_candidates, run

pytestmark = pytest.mark.skipif(not native.available() and not os.environ.get("CI"),
                                reason="nmtserve_native is not built (pip install ./native); CI requires it")


def _hyps(batch: BeamBatch) -> list:
    return [[(h.tokens, h.score.hex(), h.sum_logprobs.hex(), h.alignment, h.token_logprobs) for h in p.hyps]
            for p in batch.pools]


def test_the_compiled_step_is_installed_where_ci_runs():
    assert native.available(), "nmtserve_native is missing or its ABI differs: pip install ./native"


@pytest.mark.parametrize("seed", range(40))
def test_the_compiled_step_leaves_the_state_the_python_steps_leave(seed):
    rng = np.random.default_rng(4900 + seed)
    k, vocab, eos = int(rng.integers(1, 6)), int(rng.choice([12, 19, 40])), 2
    m = min(vocab - 1, 2 * k + 1 + int(rng.integers(0, 3)))
    nat, vec, few = (BeamBatch(k, bos_id=1, eos_id=eos, capacity=1, max_steps=4) for _ in range(3))
    nat.native, vec.native, few.native = True, False, False
    vec.few_rows, few.few_rows = 0, 64
    used = []
    compiled = nat._advance_native
    nat._advance_native = lambda c: (used.append(1), compiled(c))  # type: ignore[method-assign]

    def join() -> None:
        n = int(rng.integers(0, 3))
        prefix = TargetPrefix(tuple(int(x) for x in rng.integers(3, vocab, n)), int(rng.integers(0, n + 1)))
        options = SearchOptions(beam_size=k, rule=["transformers", "fairseq", "opennmt"][int(rng.integers(0, 3))],
                                length_penalty=float(rng.choice([0.0, 0.6, 1.0, 1.3])),
                                early_stopping=[False, True, "never"][int(rng.integers(0, 3))],
                                min_length=int(rng.integers(0, 3)), max_length=int(rng.integers(3, 16)),
                                num_hypotheses=int(rng.integers(1, k + 1)), patience=float(rng.choice([1.0, 1.5])),
                                alignment=bool(rng.random() < 0.5), confidence=bool(rng.random() < 0.5),
                                loop_repeats=int(rng.choice([0, 0, 2, 3])), loop_ngram=int(rng.integers(1, 4)))
        for batch in (nat, vec, few):
            batch.add(options, 5, prefix)

    for _ in range(int(rng.integers(1, 6))):
        join()
    steps = 0
    while nat.size and steps < 40:
        b = nat.size
        # a small vocabulary without the start token: n-grams and loops recur
        ids = np.r_[0, 2:vocab] if vocab == 12 else np.arange(vocab)
        values, tokens = random_candidates(rng, b, k, m, ids, eos)
        if rng.random() < 0.3:  # the graphs' TopK output is int64 and sliced: a strided view
            wide = np.concatenate([values, values[..., :1]], axis=2)
            values = wide[..., :m]
        attention = rng.integers(0, 5, (b, k)) if nat.wants_attention else None
        for batch in (nat, vec, few):
            batch.advance(Candidates(values, tokens, vocab), attention)
        for name in _ROW_ARRAYS:
            want = getattr(vec, name)[:b]
            np.testing.assert_array_equal(getattr(nat, name)[:b], want, err_msg=f"{name}, step {steps}")
            np.testing.assert_array_equal(getattr(few, name)[:b], want, err_msg=f"{name}, step {steps} (row by row)")
        assert _hyps(nat) == _hyps(vec) == _hyps(few)
        keep = np.flatnonzero(~nat.done[:b])
        for batch in (nat, vec, few):
            batch.reorder(keep)
        if rng.random() < 0.2:
            join()
        steps += 1
    assert steps > 2 and len(used) == steps


CASES = [dict(beam_size=4, num_hypotheses=2), dict(beam_size=1), dict(beam_size=3, length_penalty=0.6, min_length=2),
         dict(beam_size=4, rule="fairseq"), dict(beam_size=4, rule="opennmt", num_hypotheses=2),
         dict(beam_size=2, early_stopping=True), dict(beam_size=5, patience=2.0, early_stopping="never"),
         dict(beam_size=4, loop_repeats=2, loop_ngram=3), dict(beam_size=4, confidence=True)]
PREFIXES = [TargetPrefix(()), TargetPrefix((7,)), TargetPrefix((5, 6), prompt=1), TargetPrefix(())]


@pytest.mark.parametrize("case", CASES, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
def test_whole_searches_equal_the_python_search(case):
    opts = SearchOptions(max_length=14, **case)
    for seed in range(3):
        for make in (PrefixModel, Dense32, lambda *a, **kw: Preselecting(*a, **kw, beam=opts.beam_size)):  # noqa: B023
            got = {}
            for compiled in (True, False):
                old, BeamBatch.native = BeamBatch.native, compiled
                try:
                    res = run(make(4, 23, seed=seed, eos_boost=0.3), 4, opts, [3, 6, 2, 5], PREFIXES)
                finally:
                    BeamBatch.native = old
                got[compiled] = [[(h.tokens, h.score.hex(), h.sum_logprobs.hex(), h.token_logprobs) for h in r]
                                 for r in res]
            assert got[True] == got[False]


def test_served_decodes_of_the_held_out_sentences_equal_the_python_search(demo_repository, demo_sentences):
    from nmtserve.engine import InflightBatcher
    from nmtserve.model.tokenizer import load_tokenizer
    from nmtserve.runtime.onnxruntime import OnnxModel
    from nmtserve.runtime.spec import ModelSpec

    art = demo_repository / "generate" / "1"
    spec = ModelSpec.load(art / "model.json")
    tok = load_tokenizer(art, spec)
    ids = [tok.encode(s) for s in demo_sentences[:160]]
    model = OnnxModel(art / "encoder.onnx", art / "decoder.onnx", spec, threads=1)
    plain = SearchOptions(beam_size=4, max_length=96)
    marked = SearchOptions(beam_size=4, max_length=96, alignment=True, confidence=True, num_hypotheses=2)
    got = {}
    for compiled in (True, False):
        old, BeamBatch.native = BeamBatch.native, compiled
        engine = InflightBatcher(model, max_sentences=32, max_beam=4).start()
        try:
            bulk = engine.translate(ids[:96], plain, timeout=600)  # a running batch of up to 32 rows
            alone = [engine.translate([s], marked, timeout=600)[0] for s in ids[96:]]
            both = engine.translate(ids[96:], marked, timeout=600)
        finally:
            engine.stop()
            BeamBatch.native = old
        got[compiled] = [[(h.tokens, h.score.hex(), h.alignment, h.token_logprobs) for h in r]
                         for r in (*bulk, *alone, *both)]
    assert got[True] == got[False]
    assert got[True][96:160] == got[True][160:]  # alone and in bulk: the same bits


def test_move_rows_moves_every_arrays_rows_as_numpy_indexing_does():
    """``move_rows`` (the rows of the search's and the engine's arrays when sentences leave) against
    numpy's ``a[dst] = a[src]``: overlapping moves (a rotation) read every source first; every
    dtype and row shape; bad calls refused by name."""
    if native.module is None:
        pytest.skip("nmtserve_native is not installed")
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((7, 3, 5)).astype(np.float32), rng.integers(0, 9, (7, 4)).astype(np.int64),
              rng.integers(0, 2, 7).astype(bool), rng.integers(-5, 5, (7, 2, 2, 3)).astype(np.int16)]
    # Disjoint (copied straight), a rotation, a chain and a swap (through a copy), a row onto itself.
    for dst, src in (([0, 2], [6, 5]), ([0, 1, 2, 3], [1, 2, 3, 0]), ([1, 2], [2, 3]), ([2, 1], [1, 2]),
                     ([1, 3], [1, 5]), ([], [])):
        dst, src = np.array(dst, np.int64), np.array(src, np.int64)
        want = [a.copy() for a in arrays]
        for a in want:
            a[dst] = a[src]
        native.module.move_rows(arrays, dst, src)
        for got, expected in zip(arrays, want, strict=True):
            np.testing.assert_array_equal(got, expected)
    with pytest.raises(ValueError, match="move_rows: a row is out of range"):
        native.module.move_rows(arrays, np.array([7]), np.array([0]))
    with pytest.raises(ValueError, match="C-contiguous"):
        native.module.move_rows([np.zeros((4, 4))[:, ::2]], np.array([0]), np.array([1]))
