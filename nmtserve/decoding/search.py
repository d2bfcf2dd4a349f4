"""Beam search (and greedy search = beam 1) over an abstract step function, in numpy.

This is the one search used everywhere: the PyTorch reference decode, ONNX Runtime, TensorRT
and the Triton ``generate`` model all plug a ``StepModel`` into ``beam_search``.

Scoring and stopping follow Hugging Face ``transformers`` (``generate(num_beams=K)``), so results
compare token for token:

* a step's candidates are the top ``2K`` of ``running score + log p(token)`` over all ``K x V``
  continuations of a sentence (ties: lower beam, then lower token id first);
* a candidate ending in EOS finishes only if it ranks in the top ``K``; its score is
  ``sum of log-probs (EOS included) / generated_length ** length_penalty`` where
  ``generated_length`` counts generated tokens including EOS (not the decoder start token);
* the top ``K`` non-EOS candidates are the next running beams;
* a sentence keeps its best ``n_finished = round(K * patience)`` finished hypotheses and is done
  when it has ``n_finished`` of them and (``early_stopping=False``) the best running beam,
  normalised by the current generated length, cannot beat the worst of them — or immediately
  (``early_stopping=True``); ``early_stopping="never"`` normalises the best running beam by the
  maximum length instead when ``length_penalty > 0`` (a true bound, slower);
* when a sentence reaches its maximum length, its top-``K`` candidates of that last step finish
  whatever their token, normalised by that length;
* below ``min_length`` generated tokens EOS has probability 0.

A step may hand ``advance`` either the full log-probs ``(b, K, V)`` or ``Candidates``: each
hypothesis' ``m >= 2K + 1`` most likely tokens, chosen where the log-probs are (``preselect``,
on the GPU for the GPU runtimes, so ``V`` floats per hypothesis never cross to the host). The
result is the same: a sentence's top ``2K`` continuations are among its hypotheses' top ``2K``
tokens (one more covers a masked EOS), and ties keep the same order (lower beam, then lower
token). ``preselect`` declines (returns None) when a tie at its cut-off makes the choice
ambiguous, and the caller passes the full log-probs instead.

``patience`` is CTranslate2's: 1.0 is the transformers rule; larger values search longer.
Finished sentences leave the running batch at once, so the step model computes only live rows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal, Protocol, cast

import numpy as np

# transformers starts beams 1..K-1 at -1e9 so the first step expands beam 0 only; a finite
# value keeps degenerate tiny vocabularies (V < 2K) well defined.
_INITIAL_OTHER_BEAMS = -1e9


@dataclass(frozen=True)
class Candidates:
    """Each hypothesis' best tokens: log-probs ``values`` and ids ``tokens``, both (b, K, m)."""

    values: np.ndarray
    tokens: np.ndarray
    vocab: int


def preselect(log_probs, m: int, xp=np):
    """Top ``m`` tokens per hypothesis of ``log_probs`` (b, K, V), in the array module ``xp``
    (NumPy or CuPy: runs where the array lives). Returns ``(values, tokens, ambiguous)`` as
    ``xp`` arrays; ``ambiguous`` (a 0-d bool) is set when some row has more entries equal to its
    m-th value than fit, so which of them were kept is arbitrary: then use the full log-probs.
    None when ``m`` does not leave out any token."""
    vocab = log_probs.shape[-1]
    if m >= vocab:
        return None
    tokens = xp.argpartition(-log_probs, m - 1, axis=-1)[..., :m]
    values = xp.take_along_axis(log_probs, tokens, axis=-1)
    cut = values.min(axis=-1, keepdims=True)
    # Ties among -inf (pad, masked tokens) cannot matter: such candidates never enter a beam alive.
    ambiguous = ((log_probs >= cut).sum(axis=-1) > m) & xp.isfinite(cut[..., 0])
    return values, tokens, ambiguous.any()


class StepModel(Protocol):
    """What the search needs from a model: a step function over a cache it owns."""

    def step(self, tokens: np.ndarray, parents: np.ndarray | None, batch_index: np.ndarray | None) -> np.ndarray:
        """Run one decoding step.

        tokens: (b, K) int64, the last token of every hypothesis.
        parents: (b, K) index of each hypothesis' parent among the previous call's K
            hypotheses of the same sentence; None on the first call.
        batch_index: (b,) the previous call's row of each sentence still decoding; None on the
            first call.
        Returns log-probabilities (b, K, V), float32 or float64, or their ``Candidates``.
        """
        ...


@dataclass(frozen=True)
class SearchOptions:
    """Decoding options. Lengths count generated target tokens, EOS included."""

    beam_size: int = 4
    length_penalty: float = 1.0
    # Maximum generated length per sentence: min(max_length, a * source_length + b).
    max_length: int = 256
    max_length_a: float = 0.0
    max_length_b: int | None = None
    min_length: int = 0
    num_hypotheses: int = 1
    early_stopping: bool | Literal["never"] = False
    patience: float = 1.0

    def __post_init__(self) -> None:
        problems = []
        if self.beam_size < 1:
            problems.append(f"beam_size must be >= 1, got {self.beam_size}")
        if not 1 <= self.num_hypotheses <= self.beam_size:
            problems.append(f"num_hypotheses must be between 1 and beam_size={self.beam_size}, got {self.num_hypotheses}")
        if self.max_length < 1:
            problems.append(f"max_length must be >= 1, got {self.max_length}")
        if self.min_length < 0 or self.min_length >= self.max_length:
            problems.append(f"min_length must be in [0, max_length), got {self.min_length}")
        if self.patience <= 0:
            problems.append(f"patience must be > 0, got {self.patience}")
        if not math.isfinite(self.length_penalty):
            problems.append("length_penalty must be finite")
        if self.max_length_a < 0 or (self.max_length_b is not None and self.max_length_b < 1):
            problems.append("max_length_a must be >= 0 and max_length_b >= 1")
        if self.early_stopping not in (True, False, "never"):
            problems.append(f"early_stopping must be True, False or 'never', got {self.early_stopping!r}")
        if problems:
            raise ValueError("; ".join(problems))

    def max_length_for(self, source_length: int) -> int:
        if self.max_length_b is None:
            return self.max_length
        return max(1, min(self.max_length, int(self.max_length_a * source_length + self.max_length_b)))

    @property
    def n_finished(self) -> int:
        return max(1, round(self.beam_size * self.patience))


@dataclass
class Hypothesis:
    tokens: list[int]  # generated tokens, EOS included when the hypothesis ended with it
    score: float  # normalised: sum_logprobs / len ** length_penalty
    sum_logprobs: float


@dataclass
class _Finished:
    capacity: int
    hyps: list[Hypothesis] = field(default_factory=list)

    def worst(self) -> float:
        return min(h.score for h in self.hyps) if len(self.hyps) >= self.capacity else -math.inf

    def add(self, hyp: Hypothesis) -> None:
        if len(self.hyps) < self.capacity or hyp.score > self.worst():
            self.hyps.append(hyp)
            if len(self.hyps) > self.capacity:
                # Drop the worst; on equal scores the earlier one stays (stable sort).
                self.hyps.sort(key=lambda h: -h.score)
                self.hyps.pop()


def _topk_desc(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k largest entries per row, best first; ties go to the lower index."""
    n = scores.shape[1]
    k = min(k, n)
    if k == n:
        return np.argsort(-scores, axis=1, kind="stable")
    part = np.argpartition(-scores, k - 1, axis=1)[:, :k]
    part_scores = np.take_along_axis(scores, part, axis=1)
    # Sort the k survivors by (score desc, index asc).
    order = np.lexsort((part, -part_scores), axis=1)
    top = np.take_along_axis(part, order, axis=1)
    # argpartition may cut through a tie at the boundary (rare: equal float64 sums); redo such
    # rows exactly so the lower index always wins.
    kth = part_scores.min(axis=1, keepdims=True)
    tied = np.flatnonzero((scores >= kth).sum(axis=1) > k)
    for row in tied:
        cand = np.flatnonzero(scores[row] >= kth[row, 0])
        top[row] = cand[np.lexsort((cand, -scores[row, cand]))][:k]
    return top


class SentenceSearch:
    """The beam search state of one sentence, advanced one step at a time.

    ``beam_search`` drives a batch of these in lockstep; the server's in-flight batcher drives
    sentences that joined at different steps. Both run exactly this code.
    """

    def __init__(self, options: SearchOptions, source_length: int, *, bos_id: int, eos_id: int):
        k = options.beam_size
        self.options, self.eos_id = options, eos_id
        self.max_len = options.max_length_for(source_length)
        self.pool = _Finished(options.n_finished)
        # Back-pointers: entry t holds the token each running beam took at step t and its parent
        # among step t-1's beams, so a hypothesis' tokens are rebuilt only when it finishes
        # (``prefix``) instead of every beam's sequence being copied at every step.
        self.history: list[tuple[list[int], list[int]]] = []
        self.scores = np.full(k, _INITIAL_OTHER_BEAMS, dtype=np.float64)
        self.scores[0] = 0.0
        self.tokens = np.full(k, bos_id, dtype=np.int64)  # input of the next step
        self.parents: np.ndarray | None = None  # parent of each beam among the previous step's
        self.t = 0  # tokens generated so far
        self.done = False

    def prefix(self, beam: int) -> list[int]:
        """Tokens generated so far by running beam ``beam``."""
        out = []
        for tokens, parents in reversed(self.history):
            out.append(tokens[beam])
            beam = parents[beam]
        return out[::-1]

    def results(self) -> list[Hypothesis]:
        return sorted(self.pool.hyps, key=lambda h: -h.score)[: self.options.num_hypotheses]


def advance(searches: list[SentenceSearch], log_probs: np.ndarray | Candidates) -> None:
    """One step for sentences that share a beam width, from their log-probs (b, K, V) or
    their ``Candidates`` (b, K, m)."""
    min_len = np.array([s.t < s.options.min_length for s in searches])
    eos = searches[0].eos_id
    scores = np.stack([s.scores for s in searches])
    b, k = scores.shape
    if isinstance(log_probs, Candidates):
        vocab = log_probs.vocab
        values = np.asarray(log_probs.values, dtype=np.float64)
        tokens = np.asarray(log_probs.tokens, dtype=np.int64)
        if min_len.any():
            values = np.where(min_len[:, None, None] & (tokens == eos), -np.inf, values)
        cand = (scores[:, :, None] + values).reshape(b, -1)
        flat = (np.arange(k)[None, :, None] * vocab + tokens).reshape(b, -1)  # index in the (K, V) layout
        order = np.lexsort((flat, -cand), axis=1)[:, : 2 * k]
        top_scores = np.take_along_axis(cand, order, axis=1)
        top = np.take_along_axis(flat, order, axis=1)
    else:
        log_probs = np.asarray(log_probs, dtype=np.float64)
        vocab = log_probs.shape[2]
        if min_len.any():
            log_probs = log_probs.copy()
            log_probs[min_len, :, eos] = -np.inf
        cand = (scores[:, :, None] + log_probs).reshape(b, k * vocab)
        top = _topk_desc(cand, 2 * k)  # (b, 2K)
        top_scores = np.take_along_axis(cand, top, axis=1)
    _advance_group(searches, top // vocab, top % vocab, top_scores)


def _advance_group(searches: list[SentenceSearch], top_beam: np.ndarray, top_token: np.ndarray,
                   top_scores: np.ndarray) -> None:
    """Apply one step's ranked candidates (b, n), best first, to sentences of beam width K:
    finished hypotheses go to each sentence's pool, the first K non-EOS candidates run on."""
    k, eos = searches[0].options.beam_size, searches[0].eos_id
    b, n = top_token.shape
    if n < k:  # a vocabulary too small to refill every beam: the missing ones stay dead
        pad = ((0, 0), (0, k - n))
        top_beam, top_scores = np.pad(top_beam, pad), np.pad(top_scores, pad, constant_values=-np.inf)
        top_token = np.pad(top_token, pad, constant_values=eos)
        n = k
    gen_len = np.array([s.t for s in searches]) + 1
    at_max = gen_len >= np.array([s.max_len for s in searches])
    is_eos = top_token == eos
    # Only candidates ranked in the top K may finish (transformers' rule); at the maximum length
    # every top-K candidate finishes, whatever its token.
    finishing = (is_eos | at_max[:, None]) & (np.arange(n) < k) & (top_scores > -np.inf)
    for row, col in zip(*np.nonzero(finishing), strict=True):  # row-major: rank order per sentence
        s, score = searches[row], float(top_scores[row, col])
        tokens_ = [*s.prefix(int(top_beam[row, col])), int(top_token[row, col])]
        s.pool.add(Hypothesis(tokens_, score / float(gen_len[row]) ** s.options.length_penalty, score))
    running = ~is_eos
    chosen = running & (np.cumsum(running, axis=1) <= k)
    order = np.argsort(~chosen, axis=1, kind="stable")[:, :k]  # the chosen, in rank order, first
    valid = np.take_along_axis(chosen, order, axis=1)
    tokens = np.where(valid, np.take_along_axis(top_token, order, axis=1), eos)
    parents = np.where(valid, np.take_along_axis(top_beam, order, axis=1), 0)
    scores = np.where(valid, np.take_along_axis(top_scores, order, axis=1), -np.inf)  # dead beams
    for row, s in enumerate(searches):
        t = s.t
        s.history.append((tokens[row].tolist(), parents[row].tolist()))
        s.tokens, s.parents, s.scores, s.t = tokens[row], parents[row], scores[row], t + 1
        s.done = bool(at_max[row]) or _is_done(s.pool, scores[row, 0], t + 1, s.max_len, s.options)


def beam_search(
    model: StepModel,
    batch_size: int,
    source_lengths: np.ndarray | list[int],
    options: SearchOptions,
    *,
    bos_id: int,
    eos_id: int,
) -> list[list[Hypothesis]]:
    """Decode ``batch_size`` sentences; returns, per sentence, its best hypotheses (best first).

    Each sentence's result is independent of the others in the batch; finished sentences leave
    the running batch at once.
    """
    searches = [SentenceSearch(options, int(n), bos_id=bos_id, eos_id=eos_id) for n in source_lengths]
    assert len(searches) == batch_size
    live = list(range(batch_size))
    parents = batch_index = None
    while live:
        tokens = np.stack([searches[i].tokens for i in live])
        log_probs = model.step(tokens, parents, batch_index)
        advance([searches[i] for i in live], log_probs)
        keep = [row for row, i in enumerate(live) if not searches[i].done]
        batch_index = np.asarray(keep, dtype=np.int64)
        live = [live[row] for row in keep]
        # Every live search has advanced at least once, so its parents are set.
        parents = np.stack([cast(np.ndarray, searches[i].parents) for i in live]) if live else None
    return [s.results() for s in searches]


def _is_done(pool: _Finished, best_running: float, gen_len: int, max_len: int, options: SearchOptions) -> bool:
    if len(pool.hyps) < pool.capacity:
        return False
    if options.early_stopping is True:
        return True
    lp = options.length_penalty
    length = max_len if options.early_stopping == "never" and lp > 0 else gen_len
    return best_running / length**lp <= pool.worst()
