"""The toolkit beam-search rules (``SearchOptions.rule``: "fairseq", "opennmt") checked against
literal one-sentence transcriptions of those toolkits' loops (fairseq's ``SequenceGenerator``,
OpenNMT-py's / eole's ``BeamSearch``), on the full log-probs, on preselected candidates, and
row by row; the real toolkits are the oracles of tests/test_toolkits.py."""

from __future__ import annotations

import math

import numpy as np
import pytest

from nmtserve.decoding.search import _ROW_ARRAYS, BeamBatch, Candidates, SearchOptions
from tests.test_search import EOS, Dense32, PrefixModel, Preselecting, run


def _ranked(model, sentence, alive, banned):
    """Every continuation of the running beams, best first, ties to the lower (beam, token)."""
    cands = []
    for b, (seq, score) in enumerate(alive):
        lp = model.log_probs(sentence, seq)
        for tok in range(model.vocab):
            value = -math.inf if banned(tok) else float(lp[tok])
            cands.append((score + value, b, tok))
    cands.sort(key=lambda c: (-c[0], c[1] * model.vocab + c[2]))
    return cands


def opennmt_reference(model, sentence, k, max_len, n_best, penalty=1.0, min_len=0):
    """OpenNMT-py's / eole's beam search: the top K candidates of a step; those ending in EOS
    finish, the others run on; done at a step whose best candidate was EOS once n_best finished
    (not sticky: eole's ``beams_non_finished``); at the maximum length every candidate finishes;
    scores divide by (generated tokens + 1) ** penalty (``length_penalty(step + 1)``, the start
    token counted)."""
    alive = [((), 0.0)] + [((), -math.inf)] * (k - 1)
    finished = []
    for step in range(max_len):
        top = _ranked(model, sentence, alive, lambda tok, s=step: s < min_len and tok == EOS)[:k]
        at_max = step + 1 == max_len
        running = []
        for score, b, tok in top:
            seq = (*alive[b][0], tok)
            if (tok == EOS or at_max) and score > -math.inf:
                finished.append((list(seq), score / (step + 2) ** penalty))
            elif tok != EOS:
                running.append((seq, score))
        top_finished = top[0][2] == EOS and top[0][0] > -math.inf
        if at_max or (top_finished and len(finished) >= n_best):
            break
        alive = running + [((), -math.inf)] * (k - len(running))
    return sorted(finished, key=lambda h: -h[1])[:n_best]


def fairseq_reference(model, sentence, k, max_len, n_best, penalty=1.0, min_len=1):
    """fairseq's SequenceGenerator: the top 2K candidates; an EOS among the top K finalizes (K at
    most); the first K non-EOS run on; done with K finalized; the last step may only emit EOS."""
    alive = [((), 0.0)] + [((), -math.inf)] * (k - 1)
    finished = []
    for step in range(max_len):
        last = step + 1 == max_len

        def banned(tok, s=step, last=last):
            return (s < min_len and tok == EOS) or (last and tok != EOS)

        top = _ranked(model, sentence, alive, banned)[: 2 * k]
        for score, b, tok in top[:k]:
            if tok == EOS and score > -math.inf and len(finished) < k:
                finished.append(([*alive[b][0], tok], score / (step + 1) ** penalty))
        if len(finished) >= k or last:
            break
        running = [((*alive[b][0], tok), score) for score, b, tok in top if tok != EOS][:k]
        alive = running + [((), -math.inf)] * (k - len(running))
    return sorted(finished, key=lambda h: -h[1])[:n_best]


REFERENCES = {"opennmt": opennmt_reference, "fairseq": fairseq_reference}
CASES = [
    dict(beam_size=4, num_hypotheses=1),
    dict(beam_size=4, num_hypotheses=3, length_penalty=0.0),
    dict(beam_size=1),
    dict(beam_size=3, num_hypotheses=2, length_penalty=1.3),
    dict(beam_size=5, min_length=3),
]


def _hyps(result):
    return [(h.tokens, round(h.score, 9)) for h in result]


@pytest.mark.parametrize("rule", sorted(REFERENCES))
@pytest.mark.parametrize("case", CASES, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
@pytest.mark.parametrize("seed", range(4))
def test_each_rule_equals_its_toolkit_loop(rule, case, seed):
    n, vocab, max_len = 3, 9, 7
    opts = SearchOptions(max_length=max_len, rule=rule, **case)
    # EOS grows likelier with length: sentences end at different steps, some at the maximum length.
    got = run(PrefixModel(n, vocab, seed=seed, eos_boost=0.5), n, opts)
    model = PrefixModel(n, vocab, seed=seed, eos_boost=0.5)
    for sentence in range(n):
        want = REFERENCES[rule](model, sentence, opts.beam_size, max_len, opts.num_hypotheses,
                                opts.length_penalty, opts.min_length)
        assert _hyps(got[sentence]) == [(t, round(s, 9)) for t, s in want], f"sentence {sentence}"


@pytest.mark.parametrize("rule", sorted(REFERENCES))
@pytest.mark.parametrize("seed", range(4))
def test_each_rule_gives_the_same_search_on_preselected_candidates(rule, seed):
    lengths = [3, 7, 1, 5]
    # No sentence reaches its maximum length: there fairseq's forced EOS needs EOS among the
    # candidates, which preselection need not keep (the search's text says what happens then).
    opts = SearchOptions(beam_size=4, num_hypotheses=2, max_length=40, rule=rule)
    model = Preselecting(4, 40, seed=seed, eos_boost=0.3, beam=opts.beam_size)
    got = run(model, 4, opts, lengths)
    want = run(Dense32(4, 40, seed=seed, eos_boost=0.3), 4, opts, lengths)
    assert [_hyps(r) for r in got] == [_hyps(r) for r in want]
    assert model.used > 0


def test_the_rules_differ_where_the_toolkits_do():
    """Not three names for one search: on these sentences each rule decodes some differently."""
    n, vocab = 40, 12
    results = {rule: run(PrefixModel(n, vocab, seed=7, eos_boost=0.3), n,
                         SearchOptions(beam_size=4, max_length=9, rule=rule))
               for rule in ("transformers", "fairseq", "opennmt")}
    texts = {rule: [r[0].tokens for r in res] for rule, res in results.items()}
    assert texts["opennmt"] != texts["transformers"]
    assert texts["fairseq"] != texts["transformers"]


@pytest.mark.parametrize("seed", range(6))
def test_row_by_row_equals_vectorized_under_every_rule(seed):
    rng = np.random.default_rng(100 + seed)
    k, vocab, eos = int(rng.integers(1, 5)), 15, 2
    m = min(vocab, 2 * k + 1)
    few, vec = (BeamBatch(k, bos_id=1, eos_id=eos, capacity=1, max_steps=4) for _ in range(2))
    few.few_rows, vec.few_rows = 8, 0
    few.native = vec.native = False  # the two Python steps (tests/test_native_search.py: the compiled one)
    for _ in range(int(rng.integers(2, 6))):
        options = SearchOptions(beam_size=k, rule=["transformers", "fairseq", "opennmt"][int(rng.integers(0, 3))],
                                length_penalty=float(rng.choice([0.0, 1.0])), max_length=int(rng.integers(2, 10)),
                                min_length=int(rng.integers(0, 2)), num_hypotheses=int(rng.integers(1, k + 1)))
        for batch in (few, vec):
            batch.add(options, 5)
    steps = 0
    while few.size and steps < 30:
        b = few.size
        values = np.round(rng.standard_normal((b, k, m)).astype(np.float32) * 2) / 2 - 1
        tokens = np.stack([rng.permutation(vocab)[:m] for _ in range(b * k)]).reshape(b, k, m)
        values[(tokens == eos) & (rng.random(values.shape) < 0.4)] = 0.0
        few.advance(Candidates(values, tokens, vocab))
        vec.advance(Candidates(values, tokens, vocab))
        for name in _ROW_ARRAYS:
            np.testing.assert_array_equal(getattr(few, name)[:b], getattr(vec, name)[:b], err_msg=f"{name}, step {steps}")
        assert [[(h.tokens, h.score) for h in p.hyps] for p in few.pools] == \
               [[(h.tokens, h.score) for h in p.hyps] for p in vec.pools]
        keep = np.flatnonzero(~few.done[:b])
        few.reorder(keep)
        vec.reorder(keep)
        steps += 1


def test_an_unknown_rule_is_refused_by_name():
    with pytest.raises(ValueError, match="rule must be one of transformers, fairseq, opennmt"):
        SearchOptions(rule="marian")
