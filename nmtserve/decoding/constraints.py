"""Terminology constraints: target phrases a translation must contain, as search state.

A sentence may carry constraints; each is a list of alternatives (the allowed renderings of
one source term), each a sequence of target token ids. A hypothesis meets a constraint when
one of its alternatives appears in it as a contiguous run of tokens. The search is dynamic beam
allocation (Post and Vilar 2018, "Fast Lexically Constrained Decoding with Dynamic Beam
Allocation"; Hu et al. 2019 vectorize it): every step, besides the usual best continuations,
each hypothesis is offered the token that continues the constraint it is in the middle of and
the first token of every alternative of each constraint it has not met; the K beam slots are
shared out between banks of hypotheses by how many constraint tokens they have produced, so
hypotheses on their way to meeting constraints are not crowded out by likelier free ones. A
hypothesis may end (EOS) only once it has met them all; at the length limit the best ones end
as they are and the result says how many constraints the chosen translation met.

Only sentences with constraints take this path (a few Python operations per row and step, on the
step's full log-probabilities); the others decode exactly as before.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Constraint:
    """One term: any of ``alternatives`` (token id sequences, none empty) must appear."""

    alternatives: tuple[tuple[int, ...], ...]

    def __post_init__(self) -> None:
        if not self.alternatives or any(not a for a in self.alternatives):
            raise ValueError("a constraint needs at least one non-empty alternative")

    @property
    def shortest(self) -> int:
        return min(len(a) for a in self.alternatives)


@dataclass(frozen=True)
class Progress:
    """Where one hypothesis stands: the constraints it has met (a bit each), and every
    alternative it is in the middle of (``inside``: (constraint, alternative, tokens matched),
    all of them, so that renderings sharing their first tokens are all followed)."""

    met: int = 0
    inside: tuple[tuple[int, int, int], ...] = ()

    def count(self) -> int:
        """How many constraints are met."""
        return bin(self.met).count("1")

    def bank(self, constraints: Sequence[Constraint]) -> int:
        """The bank a hypothesis sits in: the constraint tokens it has produced (a met constraint
        counts its shortest alternative; inside one, the most tokens matched so far, short of
        that), so a hypothesis halfway through a term is not crowded out by free ones (Post and
        Vilar's banks)."""
        units = sum(c.shortest for i, c in enumerate(constraints) if self.met & (1 << i))
        partial: dict[int, int] = {}
        for c, _, done in self.inside:
            partial[c] = max(partial.get(c, 0), min(done, constraints[c].shortest - 1))
        return units + sum(partial.values())


START = Progress()


def advance(progress: Progress, token: int, constraints: Sequence[Constraint]) -> Progress:
    """The progress after ``token``: every alternative the hypothesis is inside continues if the
    token is its next one (and meets its constraint at its end) or is dropped; every alternative
    of an unmet constraint that starts with the token begins (or is met at once)."""
    met = progress.met
    inside = []
    for c, a, done in progress.inside:
        alt = constraints[c].alternatives[a]
        if token == alt[done]:
            if done + 1 == len(alt):
                met |= 1 << c
            else:
                inside.append((c, a, done + 1))
    for c, constraint in enumerate(constraints):
        if met & (1 << c):
            continue
        for a, alt in enumerate(constraint.alternatives):
            if alt[0] == token:
                if len(alt) == 1:
                    met |= 1 << c
                else:
                    inside.append((c, a, 1))
    return Progress(met, tuple(sorted({x for x in inside if not met & (1 << x[0])})))


def offered(progress: Progress, constraints: Sequence[Constraint]) -> set[int]:
    """The tokens a hypothesis is offered besides its best ones: the next token of every
    alternative it is inside, and the first token of each alternative of every unmet constraint."""
    out = {constraints[c].alternatives[a][done] for c, a, done in progress.inside}
    for c, constraint in enumerate(constraints):
        if not progress.met & (1 << c):
            out.update(alt[0] for alt in constraint.alternatives)
    return out


@dataclass(frozen=True)
class Candidate:
    score: float  # running sum of log-probs with the token
    beam: int
    token: int
    progress: Progress


def allocate(candidates: Sequence[Candidate], k: int, constraints: Sequence[Constraint]) -> list[Candidate]:
    """Dynamic beam allocation: ``k`` slots shared between the banks of ``Progress.bank`` (0 ..
    the constraint tokens), as many each and the rest to the furthest banks; a bank without enough
    candidates gives its slots to the others, best scores first. Each bank takes its best
    candidates. Returns the chosen, best first; ties: lower beam, then token."""
    order = sorted(candidates, key=lambda c: (-c.score, c.beam, c.token))
    n_banks = sum(c.shortest for c in constraints) + 1
    banks: list[list[Candidate]] = [[] for _ in range(n_banks)]
    for cand in order:
        banks[cand.progress.bank(constraints)].append(cand)
    size = [k // n_banks] * n_banks
    for i in range(k - sum(size)):
        size[n_banks - 1 - i % n_banks] += 1
    chosen: list[Candidate] = []
    spare = 0
    for bank, want in zip(banks, size, strict=True):
        chosen += bank[:want]
        spare += max(0, want - len(bank))
    if spare:
        taken = {(c.beam, c.token) for c in chosen}
        chosen += [c for c in order if (c.beam, c.token) not in taken][:spare]
    return sorted(chosen, key=lambda c: (-c.score, c.beam, c.token))


def step_candidates(scores: np.ndarray, log_probs: np.ndarray, progress: Sequence[Progress],
                    constraints: Sequence[Constraint], eos: int, *, no_eos: bool, at_max: bool,
                    best: int) -> list[Candidate]:
    """One row's candidates: per live beam (score > -inf) its ``best`` likeliest tokens and the
    tokens it is offered; EOS only for a beam that has met every constraint (or at the length
    limit, where every beam may end as it is). ``scores`` (K,), ``log_probs`` (K, V)."""
    n = len(constraints)
    everything = (1 << n) - 1
    out: dict[tuple[int, int], Candidate] = {}
    for beam, running in enumerate(scores.tolist()):
        if running == -math.inf:
            continue
        row = log_probs[beam]
        tokens = set(np.argpartition(-row, min(best, row.size - 1))[:best].tolist()) | offered(progress[beam], constraints)
        for token in sorted(tokens):
            value = float(row[token])
            if value == -math.inf:
                continue
            if token == eos and (no_eos or (progress[beam].met != everything and not at_max)):
                continue
            out[(beam, token)] = Candidate(running + value, beam, token, advance(progress[beam], token, constraints)
                                           if token != eos else progress[beam])
    return list(out.values())
