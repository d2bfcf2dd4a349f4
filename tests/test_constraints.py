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
    assert walk([5, 6]).inside == (0, 0, 2)


def test_abandoning_a_term_may_start_another_at_once():
    assert walk([5, 9]).met == 0b10  # 9 breaks off 5 6 7 and meets the second term by itself
    assert walk([5, 5, 6, 7]).met == 0b01  # the second 5 starts the term again


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
    chosen = allocate(cands, 4, 2)
    # 4 slots over 3 banks: 1 each, the spare one to the fullest bank (2 met)... whose one
    # candidate is taken; the unused slot goes back to the best remaining candidates
    assert {(c.beam, c.token) for c in chosen} >= {(0, 9), (1, 9)}
    assert len(chosen) == 4
    assert [c.score for c in chosen] == sorted((c.score for c in chosen), reverse=True)


def test_without_constraints_allocation_is_the_best_k():
    cands = [_cand(-float(i), i % 3, i, 0) for i in range(10)]
    assert [c.token for c in allocate(cands, 4, 0)] == [0, 1, 2, 3]


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
