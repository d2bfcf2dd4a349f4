"""Terminology constraints as search state (nmtserve.decoding.constraints): progress through an
alternative, abandoning it, disjunctive terms, and the dynamic beam allocation."""

from __future__ import annotations

import numpy as np
import pytest

from nmtserve.decoding.constraints import (
    START,
    Candidate,
    Constraint,
    Progress,
    advance,
    allocate,
    offered,
    step_candidates,
)

TERMS = (Constraint(((5, 6, 7),)), Constraint(((9,), (10, 11))))


def walk(tokens):
    p = START
    for tok in tokens:
        p = advance(p, tok, TERMS)
    return p


def test_a_term_is_met_by_its_tokens_in_a_row_and_not_by_them_apart():
    assert walk([5, 6, 7]).met == 0b01
    assert walk([5, 6, 3, 7]).met == 0
    assert walk([5, 6]).inside == ((0, 0, 2),)


def test_abandoning_a_term_may_start_another_at_once():
    assert walk([5, 9]).met == 0b10  # 9 breaks off 5 6 7 and meets the second term by itself
    assert walk([5, 5, 6, 7]).met == 0b01  # the second 5 starts the term again


def test_renderings_that_share_their_first_tokens_are_all_followed():
    terms = (Constraint(((5, 6), (5, 7))), Constraint(((8, 6, 9), (8, 6))))
    def met(tokens):
        p = START
        for tok in tokens:
            p = advance(p, tok, terms)
        return p.met
    assert met([5, 7]) == 0b01 and met([5, 6]) == 0b01
    assert met([8, 6, 1]) == 0b10 and met([8, 6, 9]) == 0b10
    assert met([8, 1, 6]) == 0


def test_any_alternative_of_a_term_meets_it():
    assert walk([10, 11]).met == 0b10
    assert walk([1, 9, 2, 5, 6, 7]).met == 0b11
    assert walk([1, 9, 2, 5, 6, 7]).count() == 2


def test_a_hypothesis_is_offered_its_next_token_and_the_starts_of_unmet_terms():
    assert offered(START, TERMS) == {5, 9, 10}
    assert offered(walk([5, 6]), TERMS) == {7, 5, 9, 10}
    assert offered(walk([9]), TERMS) == {5}
    assert offered(walk([9, 5, 6, 7]), TERMS) == set()


def test_a_constraint_without_alternatives_is_refused():
    with pytest.raises(ValueError):
        Constraint(())
    with pytest.raises(ValueError):
        Constraint(((),))


def _cand(score, beam, token, met):
    return Candidate(score, beam, token, Progress(met=met))


def test_allocation_keeps_slots_for_hypotheses_that_met_more_terms():
    cands = [_cand(-1.0 - i * 0.1, i, 3, 0) for i in range(6)] + [_cand(-5.0, 0, 9, 0b1), _cand(-9.0, 1, 9, 0b11)]
    chosen = allocate(cands, 4, TERMS)
    # 4 slots over the banks of 0..4 constraint tokens (TERMS: 3 + 1): the furthest four get one
    # each; the unused ones go back to the best remaining candidates
    assert {(c.beam, c.token) for c in chosen} >= {(0, 9), (1, 9)}
    assert len(chosen) == 4
    assert [c.score for c in chosen] == sorted((c.score for c in chosen), reverse=True)


def test_without_constraints_allocation_is_the_best_k():
    cands = [_cand(-float(i), i % 3, i, 0) for i in range(10)]
    assert [c.token for c in allocate(cands, 4, ())] == [0, 1, 2, 3]


def test_eos_waits_until_every_term_is_met_except_at_the_length_limit():
    lp = np.log(np.full((2, 12), 0.5 / 11))
    lp[:, 2] = np.log(0.5)  # EOS the likeliest token
    scores = np.array([0.0, -np.inf])
    progress = [walk([9]), START]
    def tokens(**kw):
        return {c.token for c in step_candidates(scores, lp, progress, TERMS, 2, no_eos=False, best=3, **kw)}
    assert 2 not in tokens(at_max=False)
    assert 2 in tokens(at_max=True)
    assert {5} <= tokens(at_max=False)  # the unmet term's first token is offered


# ---- in the one search ------------------------------------------------------------------
from nmtserve.decoding.search import SearchOptions, beam_search  # noqa: E402
from tests.test_search import EOS, PrefixModel, exhaustive, run  # noqa: E402


def _contains(seq, alternatives):
    return any(any(tuple(seq[i:i + len(a)]) == a for i in range(len(seq) - len(a) + 1)) for a in alternatives)


@pytest.mark.parametrize("seed", range(6))
def test_a_wide_constrained_beam_finds_the_best_sequence_holding_every_term(seed):
    """With a beam wider than every step's candidates the search keeps everything, so its best is
    the best of exhaustive search among the sequences that contain the terms."""
    vocab, max_len = 6, 4
    terms = (Constraint(((4,),)), Constraint(((3, 5), (5,))))
    opts = SearchOptions(beam_size=2000, length_penalty=0.0, max_length=max_len, num_hypotheses=1)
    got = beam_search(PrefixModel(1, vocab, seed=seed), 1, [5], opts, bos_id=1, eos_id=EOS, constraints=[terms])[0]
    # (exhaustive's sequences end with EOS or are cut at the maximum length, as the search's)
    allowed = [(s, sc) for s, sc in exhaustive(PrefixModel(1, vocab, seed=seed), 0, max_len)
               if all(_contains(s, c.alternatives) for c in terms)]
    assert got[0].tokens == allowed[0][0]
    assert got[0].constraints_met == 2


@pytest.mark.parametrize("seed", range(4))
def test_sentences_without_terms_decode_as_before_beside_constrained_ones(seed):
    n, vocab = 6, 30
    opts = SearchOptions(beam_size=4, max_length=12)
    alone = run(PrefixModel(n, vocab, seed=seed, eos_boost=0.3), n, opts)
    terms = [(Constraint(((7, 8),)),) if i % 2 else () for i in range(n)]
    mixed = beam_search(PrefixModel(n, vocab, seed=seed, eos_boost=0.3), n, [5] * n, opts, bos_id=1, eos_id=EOS,
                        constraints=terms)
    for i in range(0, n, 2):
        assert [(h.tokens, h.score) for h in mixed[i]] == [(h.tokens, h.score) for h in alone[i]]
    for i in range(1, n, 2):  # and every constrained one holds its term
        best = mixed[i][0]
        assert best.constraints_met == 1 and _contains(best.tokens, ((7, 8),))


def test_constraints_need_the_full_log_probs():
    from nmtserve.decoding.search import BeamBatch, Candidates

    batch = BeamBatch(2, bos_id=1, eos_id=EOS)
    batch.add(SearchOptions(beam_size=2, max_length=5), 3, constraints=(Constraint(((4,),)),))
    assert batch.wants_log_probs
    with pytest.raises(ValueError, match="full log-probs"):
        batch.advance(Candidates(np.zeros((1, 2, 5)), np.tile(np.arange(5), (1, 2, 1)), 9))
