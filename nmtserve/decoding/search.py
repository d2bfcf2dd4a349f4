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
* below ``min_length`` generated tokens EOS has probability 0;
* a sentence may have a ``TargetPrefix``: tokens forced after the decoder start token, one per
  step, each adding 0 to the score (transformers' ``forced_bos_token_id`` for a language token).
  Its first ``prompt`` tokens are a decoder prompt instead (transformers'
  ``decoder_input_ids=[start, *prompt]``): not counted in the generated length, so the length
  penalty, ``max_length`` and ``min_length`` count from after them.

A step may hand ``advance`` either the full log-probs ``(b, K, V)`` or ``Candidates``: each
hypothesis' ``m >= 2K + 1`` most likely tokens (the served decoder graph picks them with a
TopK node, so ``V`` floats per hypothesis never leave it), in any order. The result is the
same: a sentence's top ``2K`` continuations are among its hypotheses' top ``2K`` tokens (one
more covers a masked EOS), and ties keep the same order (lower beam, then lower token) as long
as a tie at a hypothesis' cut-off kept its lower ids (ONNX TopK's rule).

``patience`` is CTranslate2's: 1.0 is the transformers rule; larger values search longer.

``rule`` picks whose beam search this is, so that an imported model decodes as its toolkit did
(``RULES``): "transformers" (the rules above); "fairseq" (``SequenceGenerator``: as transformers
with ``early_stopping=True``, K finished at most, first come, and at the maximum length every
hypothesis ends with EOS, its log-probability added: a step needs the full log-probs there
(``wants_log_probs``; on ``Candidates`` alone a hypothesis without EOS among them ends as
transformers' rule ends it); "opennmt" (OpenNMT-py's and eole's ``BeamSearch``: a step keeps
only its top ``K`` candidates, those ending in EOS finish and the others run on, so fewer than ``K``
beams may run; a sentence is done at a step whose best candidate ended in EOS once
``num_hypotheses`` have finished; the length penalty counts the decoder start token too, so a
score is ``sum of log-probs / (generated length + 1) ** length_penalty``).
Finished sentences leave the running batch at once, so the step model computes only live rows.

Repetition controls, per sentence (off by default; a sentence without them decodes as before):

* ``repetition_penalty`` θ is transformers' (``RepetitionPenaltyLogitsProcessor``) as its beam
  search applies it, to the log-probs: a token already in the hypothesis' decoder tokens (the
  decoder start token, the target prefix and the generated tokens) gets ``log p * θ`` (``/ θ`` if
  ``log p > 0``), and the running score sums these values. transformers' greedy search
  (``num_beams=1``) and CTranslate2 apply it to the logits before the softmax instead, which the
  log-probs a step returns cannot reproduce (the logits' offset is gone); beam 1 here is the beam
  rule with K = 1.
* ``no_repeat_ngram_size`` n is transformers' (``NoRepeatNGramLogitsProcessor``): a token that
  would complete an n-gram already in the hypothesis' decoder tokens (start token included) has
  probability 0.
* ``suppress_sequences`` are CTranslate2's: a one-token sequence is never generated; a longer one
  bans its last token after a hypothesis' target tokens (start token excluded) end with the rest.
  A ban sets the log-prob to -inf without renormalising the others (transformers' rule, as for
  ``min_length``; CTranslate2 renormalises, so its scores differ slightly).
* ``loop_repeats`` R (a deployment's setting, ``ModelSpec.loop_repeats``; 0 = off) ends a
  runaway loop: a candidate whose token makes the hypothesis' tokens end with the same block of
  n <= ``loop_ngram`` tokens written R times in a row ends that hypothesis as EOS would (it
  finishes if it ranks in the top K, without an EOS token, and never runs on). Rows still in
  their target prefix are not cut.

On ``Candidates`` a ban removes a known candidate and a penalty rescales it. The unknown tokens of
a hypothesis score at most its lowest known log-prob ``lo`` (a penalty below 1 may lift one of its
own unknown tokens to ``lo * θ``), so a sentence's step is still exact when its ``2K``-th known
continuation outranks ``running score + that bound`` of every hypothesis; a step where that
cannot be shown ranks the known candidates only and is counted in ``BeamBatch.inexact_steps``
(docs/contract.md gives how often, measured: rarely, and the wider the candidates the rarer).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

import numpy as np

from .. import defaults
from . import native as _native
from .constraints import START, Candidate, Constraint, Progress, allocate, step_candidates

# transformers starts beams 1..K-1 at -1e9 so the first step expands beam 0 only; a finite
# value keeps degenerate tiny vocabularies (V < 2K) well defined.
_INITIAL_OTHER_BEAMS = -1e9

# Whose beam search (see the module's text); the index is what ``BeamBatch.rule`` holds per row.
RULES = ("transformers", "fairseq", "opennmt")
_FAIRSEQ, _OPENNMT = RULES.index("fairseq"), RULES.index("opennmt")


@dataclass(frozen=True)
class Candidates:
    """Each hypothesis' best tokens: log-probs ``values`` and ids ``tokens``, both (b, K, m)."""

    values: np.ndarray
    tokens: np.ndarray
    vocab: int


@dataclass(frozen=True)
class TargetPrefix:
    """Tokens a sentence's hypotheses must start with (see the module's rules)."""

    tokens: tuple[int, ...] = ()
    prompt: int = 0  # the first ``prompt`` tokens are a decoder prompt (not counted)

    def __post_init__(self) -> None:
        if not 0 <= self.prompt <= len(self.tokens):
            raise ValueError(f"prompt must be in [0, {len(self.tokens)}], got {self.prompt}")


NO_PREFIX = TargetPrefix()


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

    beam_size: int = defaults.BEAM_SIZE
    length_penalty: float = 1.0
    # Maximum generated length per sentence: min(max_length, a * source_length + b).
    max_length: int = 256
    max_length_a: float = 0.0
    max_length_b: int | None = None
    min_length: int = 0
    num_hypotheses: int = 1
    early_stopping: bool | Literal["never"] = False
    patience: float = 1.0
    # Each hypothesis' source position per generated token (``Hypothesis.alignment``): the step's
    # ``attention`` (the decoder's cross-attention, argmax over the source) carried with the beams.
    alignment: bool = False
    # Each hypothesis' log-probability per generated token (``Hypothesis.token_logprobs``): the
    # running score after each step carried with the beams, its differences taken at the end.
    confidence: bool = False
    rule: str = "transformers"  # RULES
    # Repetition controls (the module's text): transformers' ``no_repeat_ngram_size`` (0: off) and
    # ``repetition_penalty`` (1.0: off), CTranslate2's ``suppress_sequences`` (token ids).
    no_repeat_ngram_size: int = 0
    repetition_penalty: float = 1.0
    suppress_sequences: tuple[tuple[int, ...], ...] = ()
    # The runaway-loop cut (0: off): a block of up to ``loop_ngram`` tokens written ``loop_repeats``
    # times in a row ends the hypothesis. A deployment's setting (``ModelSpec.loop_repeats``).
    loop_repeats: int = 0
    loop_ngram: int = 8

    def __post_init__(self) -> None:
        problems = self._control_problems()
        if self.rule not in RULES:
            problems.append(f"rule must be one of {', '.join(RULES)}, got {self.rule!r}")
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

    def _control_problems(self) -> list[str]:
        """The repetition controls checked (``suppress_sequences`` made a tuple of tuples)."""
        problems = []
        if not _is_int(self.no_repeat_ngram_size) or self.no_repeat_ngram_size < 0:
            problems.append(f"no_repeat_ngram_size must be an integer >= 0, got {self.no_repeat_ngram_size!r}")
        penalty = self.repetition_penalty
        if isinstance(penalty, bool) or not isinstance(penalty, (int, float)) or not (0 < penalty < math.inf):
            problems.append(f"repetition_penalty must be a finite number > 0, got {penalty!r}")
        sequences = self.suppress_sequences
        if isinstance(sequences, (list, tuple)) and all(
                isinstance(seq, (list, tuple)) and seq and all(_is_int(x) and x >= 0 for x in seq) for seq in sequences):
            object.__setattr__(self, "suppress_sequences", tuple(tuple(int(x) for x in seq) for seq in sequences))
        else:
            problems.append(f"suppress_sequences must be non-empty sequences of token ids >= 0, got {sequences!r}")
        if not _is_int(self.loop_repeats) or self.loop_repeats < 0 or self.loop_repeats == 1:
            problems.append(f"loop_repeats must be 0 (off) or >= 2, got {self.loop_repeats!r}")
        if not _is_int(self.loop_ngram) or self.loop_ngram < 1:
            problems.append(f"loop_ngram must be an integer >= 1, got {self.loop_ngram!r}")
        return problems

    @property
    def controls(self) -> bool:
        """Whether a repetition control changes the step's log-probs (the loop cut does not)."""
        return bool(self.no_repeat_ngram_size or self.repetition_penalty != 1.0 or self.suppress_sequences)

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
    # With ``SearchOptions.alignment``: per generated token, the source position the decoder
    # attended to most when it chose that token (its step's ``attention`` argmax).
    alignment: list[int] | None = None
    # With ``SearchOptions.confidence``: per generated token, the log-probability the search added
    # for it (the step's, after any repetition control; 0 for a forced prefix token).
    token_logprobs: list[float] | None = None
    # A sentence with terminology constraints (``BeamBatch.add``): how many this hypothesis met
    # (all, unless the length limit ended it first); None without constraints.
    constraints_met: int | None = None


@dataclass
class _Finished:
    """A row's pool of finished hypotheses as a list (``BeamBatch.pools``: a copy, for reading)."""

    capacity: int
    hyps: list[Hypothesis] = field(default_factory=list)


def _is_int(value: object) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _penalised(values, theta):
    """transformers' repetition penalty of (log-prob) values: ``* θ`` below 0, ``/ θ`` otherwise."""
    return np.where(values < 0, values * theta, values / theta)


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


_EARLY_STOPPING = {False: 0, True: 1, "never": 2}
_ROW_ARRAYS = ("scores", "tokens", "parents", "t", "max_len", "min_len", "penalty", "stopping",
               "pool_size", "pool_capacity", "pool_worst", "done", "sequences", "forced", "n_forced", "prompt",
               "aligned", "align", "cumulative", "confident", "rule", "top_finished",
               "no_repeat", "repetition", "suppress", "loop_repeats", "loop_ngram", "constrained",
               "pool_keep", "fin_order", "fin_len", "fin_score", "fin_sum", "fin_met", "fin_flags", "fin_tokens",
               "fin_align", "fin_totals")
# fin_flags: the hypothesis has an alignment / token log-probabilities (fin_align / fin_totals hold them).
_HAS_ALIGNMENT, _HAS_LOGPROBS = 1, 2


class BeamBatch:
    """The beam search state of sentences that share a beam width ``K``, one row each, as arrays.

    A step costs a fixed number of NumPy calls whatever the number of sentences: no Python per
    sentence, except for the (rare) candidates that finish. ``beam_search`` drives one batch in
    lockstep; the server's in-flight batcher keeps one per beam width, adds sentences that join at
    any step (``add``) and drops those that are done (``reorder``). Both run exactly this code.

    Per row: running ``scores`` (K,), the next input ``tokens`` (K,), each beam's ``parents``
    among the previous step's, ``t`` tokens generated so far, and each beam's tokens
    ``sequences`` (K, T), reordered with the beams by one gather per step over all rows (cheaper
    than walking back-pointers in Python for every finished hypothesis). Each row keeps its own
    options (length penalty, maximum
    length, ...) as arrays, and so are its finished hypotheses (its *pool*): up to ``pool_keep``
    of them in slots ``fin_*[row, slot]``, ``fin_order[row, :pool_size]`` the live slots in the
    order a list would hold them (appended; once over ``pool_keep``, sorted best first (stable)
    and the last dropped), the rest of ``fin_order[row]`` the free slots. As arrays, a pool moves
    with its row (``reorder``) and the compiled step adds to it as the Python step does
    (``_pool_add``); ``results`` makes the ``Hypothesis`` objects once, when the row is done.
    """

    # Per-row arrays (capacity first), allocated by _grow; rows [0, size) are live.
    scores: np.ndarray
    tokens: np.ndarray
    parents: np.ndarray
    t: np.ndarray
    max_len: np.ndarray
    min_len: np.ndarray
    penalty: np.ndarray
    stopping: np.ndarray
    pool_size: np.ndarray
    pool_capacity: np.ndarray
    pool_worst: np.ndarray
    done: np.ndarray
    sequences: np.ndarray
    forced: np.ndarray
    n_forced: np.ndarray
    prompt: np.ndarray
    aligned: np.ndarray  # (capacity, K, T): each beam's source position per token (rows with ``align``)
    align: np.ndarray  # (capacity,) bool: the row's options ask for alignments
    cumulative: np.ndarray  # (capacity, K, T): each beam's running score after each token (rows with ``confident``)
    confident: np.ndarray  # (capacity,) bool: the row's options ask for token log-probabilities
    rule: np.ndarray  # (capacity,) int8: the row's RULES index
    top_finished: np.ndarray  # (capacity,) bool: "opennmt": this step's best candidate ended in EOS
    # The repetition controls (SearchOptions): n-gram size, penalty, the row's suppressed
    # sequences (an index into ``suppress_sets``; 0: none), the loop cut's R and largest block.
    no_repeat: np.ndarray
    repetition: np.ndarray
    suppress: np.ndarray
    loop_repeats: np.ndarray
    loop_ngram: np.ndarray
    constrained: np.ndarray  # (capacity,) bool: the row has terminology constraints (nmtserve.decoding.constraints)
    # The pools (the class text): per row its size ``pool_keep``; per slot (capacity, P + 1) the
    # hypothesis' length, normalised score, sum of log-probs, constraints met (-1: none asked),
    # flags; (capacity, P + 1, T) its tokens, alignment and running scores (token log-probabilities
    # are their differences). ``fin_order`` (capacity, P + 1): the live slots first, in list order.
    pool_keep: np.ndarray
    fin_order: np.ndarray
    fin_len: np.ndarray
    fin_score: np.ndarray
    fin_sum: np.ndarray
    fin_met: np.ndarray
    fin_flags: np.ndarray
    fin_tokens: np.ndarray
    fin_align: np.ndarray
    fin_totals: np.ndarray

    # Up to this many rows, ``advance`` of ``Candidates`` runs row by row in Python
    # (``_advance_few``): the ~60 NumPy calls of a vectorized step cost ~0.15 ms whatever the
    # rows, the Python rows ~25 us each; one sentence at a time is what interactive use waits on.
    # Both give identical states (tests/test_search.py runs them side by side); 0 turns it off.
    few_rows: int = 4
    # Steps on ``Candidates`` without controls or constraints run compiled when nmtserve_native is
    # installed (``nmtserve.decoding.native``): the same state, ~10x less time. False: Python only.
    native: bool = _native.available()

    def __init__(self, beam: int, *, bos_id: int, eos_id: int, capacity: int = 8, max_steps: int = 256):
        self.k, self.bos_id, self.eos_id = beam, bos_id, eos_id
        self.size, self.capacity = 0, 0
        self.max_steps = max(1, max_steps)
        self.pool_slots = beam  # P: the largest pool_keep the arrays hold (grows with a row's)
        self.options: list[SearchOptions] = []
        self._attention: np.ndarray | None = None  # the current step's (b, K) source positions
        # Distinct ``suppress_sequences`` of the rows added (``suppress`` indexes it), and whether
        # any row ever asked for a control or the loop cut: until then a step skips them at no cost.
        self.suppress_sets: list[tuple[tuple[int, ...], ...]] = [()]
        # Per row: its terminology constraints, and each beam's progress through them.
        self.terms: list[tuple[Constraint, ...]] = []
        self.progress: list[list[Progress]] = []
        self._controls = self._loops = False
        self._confidence = False  # whether any row ever asked for token log-probabilities
        # Whether any row ever was "fairseq" or constrained: until then no step needs the full
        # log-probs, and ``wants_log_probs`` answers without looking at the rows.
        self._full_steps = False
        # Sentence-steps on ``Candidates`` where a control's result could not be shown to equal the
        # full-vocabulary search's (the module's text); the known candidates were ranked.
        self.inexact_steps = 0
        self._grow(max(1, capacity))

    def _grow(self, capacity: int) -> None:
        k, b, t, slots = self.k, self.size, self.max_steps, self.pool_slots + 1
        fresh: dict[str, np.ndarray] = {
            "scores": np.zeros((capacity, k)), "tokens": np.zeros((capacity, k), np.int64),
            "parents": np.zeros((capacity, k), np.int64), "t": np.zeros(capacity, np.int64),
            "max_len": np.zeros(capacity, np.int64), "min_len": np.zeros(capacity, np.int64),
            "penalty": np.zeros(capacity), "stopping": np.zeros(capacity, np.int8),
            "pool_size": np.zeros(capacity, np.int64), "pool_capacity": np.ones(capacity, np.int64),
            "pool_worst": np.full(capacity, -np.inf), "done": np.zeros(capacity, bool),
            "sequences": np.zeros((capacity, k, t), np.int32),
            "forced": np.zeros((capacity, t), np.int32), "n_forced": np.zeros(capacity, np.int64),
            "prompt": np.zeros(capacity, np.int64),
            "aligned": np.zeros((capacity, k, t), np.int16), "align": np.zeros(capacity, bool),
            "cumulative": np.zeros((capacity, k, t)), "confident": np.zeros(capacity, bool),
            "rule": np.zeros(capacity, np.int8), "top_finished": np.zeros(capacity, bool),
            "no_repeat": np.zeros(capacity, np.int64), "repetition": np.ones(capacity),
            "suppress": np.zeros(capacity, np.int64), "loop_repeats": np.zeros(capacity, np.int64),
            "loop_ngram": np.ones(capacity, np.int64), "constrained": np.zeros(capacity, bool),
            "pool_keep": np.ones(capacity, np.int64),
            "fin_order": np.tile(np.arange(slots, dtype=np.int64), (capacity, 1)),
            "fin_len": np.zeros((capacity, slots), np.int64), "fin_score": np.zeros((capacity, slots)),
            "fin_sum": np.zeros((capacity, slots)), "fin_met": np.full((capacity, slots), -1, np.int64),
            "fin_flags": np.zeros((capacity, slots), np.int8), "fin_tokens": np.zeros((capacity, slots, t), np.int32),
            "fin_align": np.zeros((capacity, slots, t), np.int16), "fin_totals": np.zeros((capacity, slots, t)),
        }
        for name, array in fresh.items():
            if b:  # the live rows, into the leading part of every axis (new slots and steps after)
                old = getattr(self, name)
                array[(slice(0, b),) + tuple(slice(0, n) for n in old.shape[1:])] = old[:b]
            setattr(self, name, array)
        self.capacity = capacity
        self._native_step = None  # the compiled step's views of the arrays just replaced

    @staticmethod
    def steps_for(options: SearchOptions, source_length: int, prefix: TargetPrefix = NO_PREFIX) -> int:
        """The most steps a sentence may take: its maximum generated length after its prompt."""
        return options.max_length_for(source_length) + prefix.prompt

    def add(self, options: SearchOptions, source_length: int, prefix: TargetPrefix = NO_PREFIX,
            max_steps: int | None = None, constraints: Sequence[Constraint] = ()) -> int:
        """A new sentence in the next row; returns the row. ``max_steps`` caps its steps (the
        server's target length), prompt included. ``constraints``: target terms its translation
        must contain (``nmtserve.decoding.constraints``; its steps then need the full log-probs)."""
        if options.beam_size != self.k:
            raise ValueError(f"beam_size {options.beam_size} in a batch of beam {self.k}")
        if self.eos_id in prefix.tokens:
            raise ValueError("a target prefix cannot hold the end-of-sentence token")
        max_len = self.steps_for(options, source_length, prefix)
        if max_steps is not None:
            max_len = min(max_len, max_steps)
        # "opennmt": done once a step's best candidate finished and num_hypotheses have (the pool
        # keeps the best K, so its best num_hypotheses are the toolkit's).
        capacity = options.num_hypotheses if options.rule == "opennmt" else options.n_finished
        keep = max(options.n_finished, capacity)
        if self.size == self.capacity or max_len > self.max_steps or keep > self.pool_slots:
            self.max_steps = max(self.max_steps, max_len)
            self.pool_slots = max(self.pool_slots, keep)
            self._grow(2 * self.capacity if self.size == self.capacity else self.capacity)
        row = self.size
        self.scores[row] = _INITIAL_OTHER_BEAMS
        self.scores[row, 0] = 0.0
        self.tokens[row], self.parents[row] = self.bos_id, 0
        self.t[row], self.max_len[row], self.min_len[row] = 0, max_len, options.min_length + prefix.prompt
        self.forced[row, : len(prefix.tokens)] = prefix.tokens
        self.n_forced[row], self.prompt[row] = len(prefix.tokens), prefix.prompt
        rule = RULES.index(options.rule)
        self.penalty[row] = options.length_penalty
        self.stopping[row] = _EARLY_STOPPING[True if options.rule == "fairseq" else options.early_stopping]
        self.align[row], self.rule[row], self.top_finished[row] = options.alignment, rule, False
        self.confident[row] = options.confidence
        self._confidence |= options.confidence
        self.pool_size[row], self.pool_capacity[row], self.pool_worst[row] = 0, capacity, -np.inf
        self.pool_keep[row] = keep
        self.done[row] = False
        self.no_repeat[row], self.repetition[row] = options.no_repeat_ngram_size, options.repetition_penalty
        if options.suppress_sequences not in self.suppress_sets:
            self.suppress_sets.append(options.suppress_sequences)
        self.suppress[row] = self.suppress_sets.index(options.suppress_sequences)
        self.loop_repeats[row], self.loop_ngram[row] = options.loop_repeats, options.loop_ngram
        self._controls |= options.controls
        self._loops |= options.loop_repeats > 0
        self._full_steps |= options.rule == "fairseq" or bool(constraints)
        self.options.append(options)
        if constraints and (self.n_forced[row] or options.rule != "transformers"):
            raise ValueError("terminology constraints are for the transformers rule without a target prefix")
        self.constrained[row] = bool(constraints)
        self.terms.append(tuple(constraints))
        self.progress.append([START] * self.k)
        self.size += 1
        return row

    def reorder(self, order: np.ndarray) -> None:
        """Keep rows ``order`` (the old row of each new row), in that order; drop the others."""
        order = np.asarray(order, dtype=np.int64)
        moved = np.flatnonzero(order != np.arange(len(order)))
        if len(moved):
            arrays = self.row_arrays()
            if _native.module is not None:  # one call for every array
                _native.module.move_rows(arrays, moved, order[moved])
            else:
                for array in arrays:
                    array[moved] = array[order[moved]]  # the right side is a copy: overlaps are safe
        self.keep_rows(order.tolist())

    def row_arrays(self) -> list[np.ndarray]:
        """Every per-row array (rows on the first axis): what ``reorder`` moves. The engine moves
        them in the same call as its own rows, then calls ``keep_rows``."""
        return [getattr(self, name) for name in _ROW_ARRAYS]

    def keep_rows(self, rows: list[int]) -> None:
        """``reorder``'s per-row lists and size, once ``row_arrays`` have moved: new row i is old
        row ``rows[i]``."""
        self.options = [self.options[i] for i in rows]
        self.terms = [self.terms[i] for i in rows]
        self.progress = [self.progress[i] for i in rows]
        self.size = len(rows)

    def prefix(self, row: int, beam: int) -> list[int]:
        """Tokens generated so far by running beam ``beam`` of ``row``."""
        return self.sequences[row, beam, : int(self.t[row])].tolist()

    def results(self, row: int) -> list[Hypothesis]:
        """The row's best hypotheses; with constraints, those that met more of them first. Only
        those kept are made into ``Hypothesis`` objects (the pool holds K of them; a request
        usually asks for one)."""
        size = int(self.pool_size[row])
        met, scores = self.fin_met[row].tolist(), self.fin_score[row].tolist()
        slots = sorted(self.fin_order[row, :size].tolist(), key=lambda s: (-max(met[s], 0), -scores[s]))
        return self._hypotheses(row, slots[: self.options[row].num_hypotheses])

    def _hypotheses(self, row: int, slots: list[int] | None = None) -> list[Hypothesis]:
        """The row's pool as ``Hypothesis`` objects, in its list order (or those of ``slots``)."""
        size = int(self.pool_size[row])
        if not size:
            return []
        lengths, flags, met = self.fin_len[row].tolist(), self.fin_flags[row].tolist(), self.fin_met[row].tolist()
        scores, sums = self.fin_score[row].tolist(), self.fin_sum[row].tolist()
        out = []
        for slot in self.fin_order[row, :size].tolist() if slots is None else slots:
            n = lengths[slot]
            logprobs = None
            if flags[slot] & _HAS_LOGPROBS:
                logprobs = np.diff(self.fin_totals[row, slot, :n], prepend=0.0).tolist()
            out.append(Hypothesis(self.fin_tokens[row, slot, :n].tolist(), scores[slot], sums[slot],
                                  self.fin_align[row, slot, :n].tolist() if flags[slot] & _HAS_ALIGNMENT else None,
                                  token_logprobs=logprobs, constraints_met=None if met[slot] < 0 else met[slot]))
        return out

    @property
    def pools(self) -> list[_Finished]:
        """Every live row's pool as a list of hypotheses (a copy: for reading and tests)."""
        return [_Finished(int(self.pool_keep[row]), self._hypotheses(row)) for row in range(self.size)]

    def _pool_add(self, row: int, tokens, score: float, sum_logprobs: float, alignment=None, totals=None,
                  met: int | None = None) -> None:
        """Offer a finished hypothesis to ``row``'s pool (its ``tokens``; ``alignment`` and the
        running ``totals`` when asked): kept while the pool has room or when it beats the pool's
        worst; over ``pool_keep``, the pool is sorted best first (stable: on equal scores the
        earlier stays) and the last dropped. nmtserve_native's ``finish`` repeats it rule for rule."""
        keep, size = int(self.pool_keep[row]), int(self.pool_size[row])
        order = self.fin_order[row]
        if size >= keep and not score > float(self.fin_score[row, order[:size]].min()):
            return
        slot, n = int(order[size]), len(tokens)
        self.fin_tokens[row, slot, :n] = tokens
        self.fin_len[row, slot], self.fin_score[row, slot], self.fin_sum[row, slot] = n, score, sum_logprobs
        self.fin_met[row, slot] = -1 if met is None else met
        flags = 0
        if alignment is not None:
            self.fin_align[row, slot, :n] = alignment
            flags |= _HAS_ALIGNMENT
        if totals is not None:
            self.fin_totals[row, slot, :n] = totals
            flags |= _HAS_LOGPROBS
        self.fin_flags[row, slot] = flags
        size += 1
        if size > keep:
            live = order[:size].copy()
            order[:size] = live[np.argsort(-self.fin_score[row, live], kind="stable")]
            size -= 1
        self.pool_size[row] = size
        self.pool_worst[row] = float(self.fin_score[row, order[:size]].min()) if size >= keep else -np.inf

    @property
    def wants_attention(self) -> bool:
        """Whether a live row asks for alignments: its steps must pass ``attention`` to ``advance``."""
        return bool(self.align[: self.size].any())

    def advance(self, log_probs: np.ndarray | Candidates, attention: np.ndarray | None = None) -> None:
        """One step for rows ``[0, size)`` from their log-probs (b, K, V) or ``Candidates`` (b, K, m);
        ``attention`` (b, K): each hypothesis' most attended source position at this step (needed
        while ``wants_attention``)."""
        b, k, eos = self.size, self.k, self.eos_id
        self._attention = None if attention is None else np.asarray(attention, dtype=np.int16)
        constrained = np.flatnonzero(self.constrained[:b])
        if len(constrained) and isinstance(log_probs, Candidates):
            raise ValueError("a sentence with terminology constraints needs the step's full log-probs "
                             "(BeamBatch.wants_log_probs)")
        if isinstance(log_probs, Candidates) and self.native and not len(constrained) \
                and not len(self._controlled_rows()):
            self._advance_native(log_probs)
            return
        if isinstance(log_probs, Candidates) and b <= self.few_rows:
            self._advance_few(log_probs)
            return
        before = {int(r): (self.scores[r].copy(), self.sequences[r, :, : int(self.t[r])].copy(), int(self.t[r]))
                  for r in constrained}
        totals_before = {int(r): self.cumulative[r, :, : int(self.t[r])].copy() for r in constrained if self.confident[r]}
        scores = self.scores[:b]
        no_eos = self.t[:b] < self.min_len[:b]  # below min_length, EOS has probability 0
        controlled = self._controlled_rows()
        if isinstance(log_probs, Candidates):
            vocab = log_probs.vocab
            values = np.asarray(log_probs.values, dtype=np.float64)
            tokens = np.asarray(log_probs.tokens, dtype=np.int64)
            raw = values
            if len(controlled):
                values = self._control_candidates(controlled, values, tokens)
            if no_eos.any():
                values = np.where(no_eos[:, None, None] & (tokens == eos), -np.inf, values)
            only_eos = self._eos_forced()
            if only_eos.any():  # "fairseq" at its last step: EOS or nothing (where EOS is a candidate)
                is_eos = tokens == eos
                keep = ~only_eos[:, None, None] | is_eos | ~is_eos.any(axis=2, keepdims=True)
                values = np.where(keep, values, -np.inf)
            cand = (scores[:, :, None] + values).reshape(b, -1)
            flat = (np.arange(k)[None, :, None] * vocab + tokens).reshape(b, -1)  # index in the (K, V) layout
            order = np.lexsort((flat, -cand), axis=1)[:, : 2 * k]
            rows = np.arange(b)[:, None]  # plain fancy indexing: take_along_axis costs ~30 us a call
            top_scores, top = cand[rows, order], flat[rows, order]
            if len(controlled) and raw.shape[2] < vocab:
                self._count_inexact(controlled, raw, tokens, vocab, top_scores, order)
        else:
            log_probs = np.asarray(log_probs, dtype=np.float64)
            vocab = log_probs.shape[2]
            if len(controlled):
                log_probs = self._control_dense(controlled, log_probs)
            only_eos = self._eos_forced()
            if no_eos.any() or only_eos.any():
                log_probs = log_probs.copy()
                log_probs[no_eos, :, eos] = -np.inf
                eos_scores = log_probs[only_eos, :, eos]
                log_probs[only_eos] = -np.inf
                log_probs[only_eos, :, eos] = eos_scores
            cand = (scores[:, :, None] + log_probs).reshape(b, k * vocab)
            top = _topk_desc(cand, 2 * k)  # (b, 2K)
            top_scores = np.take_along_axis(cand, top, axis=1)
        top_beam, top_token = top // vocab, top % vocab
        opennmt = self.rule[:b] == _OPENNMT
        if opennmt.any():  # OpenNMT keeps its top K candidates only
            top_scores[opennmt, k:] = -np.inf
        forcing = np.flatnonzero(self.t[:b] < self.n_forced[:b])
        if len(forcing):
            self._force(forcing, top_beam, top_token, top_scores)
        self._apply(top_beam, top_token, top_scores)
        for row, state in before.items():  # their step again, by dynamic beam allocation
            assert isinstance(log_probs, np.ndarray)  # checked above: constrained rows come with every token
            self._advance_constrained(row, log_probs[row], *state, totals=totals_before.get(row))

    def _advance_native(self, candidates: Candidates) -> None:
        """``advance`` on ``Candidates`` in compiled code (``nmtserve.decoding.native``): one call
        ranks, puts the finished hypotheses in their rows' pools and applies."""
        step = _native.module
        assert step is not None
        if self._native_step is None:
            self._native_step = step.Step(self)
        step.step(self._native_step, self.size, candidates.values, candidates.tokens, candidates.vocab,
                  self._loops, self._confidence, self._attention)

    def compiled_steps(self) -> dict | None:
        """What the decoder's compiled steps need to run this batch's search between them with no
        Python (``nmtserve_native.DecoderStep.run_steps``: the same compiled step as
        ``_advance_native``), or None where a step must come back here: the compiled search is off,
        a row has a repetition control or terms, or this step needs every token's log-probability.
        The compiled steps stop by themselves before fairseq's full-vocabulary last step."""
        b = self.size
        # (_full_steps and _controls stay False until a row asks for what they cover: a batch that
        # never did answers without looking at its rows)
        if not (self.native and _native.module is not None) or self.wants_log_probs \
                or (self._full_steps and self.constrained[:b].any()) or len(self._controlled_rows()):
            return None
        if self._native_step is None:
            self._native_step = _native.module.Step(self)
        return {"search": self._native_step, "loops": self._loops, "confidence": self._confidence,
                "attention": self.wants_attention, "full_steps": self._full_steps}

    def _counted(self, gen_len: np.ndarray) -> np.ndarray:
        """Rows [0, size): the length the penalty sees after a step that makes ``gen_len`` tokens:
        after the prompt, at least 1; OpenNMT's counts the decoder start token too."""
        b = self.size
        return np.maximum(gen_len - self.prompt[:b], 1) + (self.rule[:b] == _OPENNMT)

    def _force(self, rows: np.ndarray, top_beam: np.ndarray, top_token: np.ndarray, top_scores: np.ndarray) -> None:
        """Rows still in their prefix: every beam continues itself with the forced token and its
        running score (the forced token adds 0), the other candidates are dropped."""
        k = self.k
        top_beam[rows] = 0
        top_beam[rows, :k] = np.arange(k)
        top_token[rows] = self.forced[rows, self.t[rows]][:, None]
        top_scores[rows] = -np.inf
        top_scores[rows, :k] = self.scores[rows]

    def _apply(self, top_beam: np.ndarray, top_token: np.ndarray, top_scores: np.ndarray) -> None:
        """Apply one step's ranked candidates (b, n), best first: finished hypotheses go to each
        row's pool, the first K non-EOS candidates run on."""
        b, k, eos = self.size, self.k, self.eos_id
        n = top_token.shape[1]
        if n < k:  # a vocabulary too small to refill every beam: the missing ones stay dead
            pad = ((0, 0), (0, k - n))
            top_beam, top_scores = np.pad(top_beam, pad), np.pad(top_scores, pad, constant_values=-np.inf)
            top_token = np.pad(top_token, pad, constant_values=eos)
            n = k
        t = self.t[:b].copy()
        gen_len = t + 1
        counted = self._counted(gen_len)
        at_max = gen_len >= self.max_len[:b]
        is_eos = top_token == eos
        if self._loops:  # a candidate that completes a runaway loop ends as EOS would
            is_eos = is_eos | self._looped(top_beam, top_token)
        # Only candidates ranked in the top K may finish (transformers' rule); at the maximum length
        # every top-K candidate finishes, whatever its token.
        finishing = (is_eos | at_max[:, None]) & (np.arange(n) < k) & (top_scores > -np.inf)
        finishing &= ~self.constrained[:b, None]  # their own step follows (_advance_constrained)
        if finishing.any():
            self._finish(finishing, top_beam, top_token, top_scores, counted)
        running = ~is_eos
        chosen = running & (np.cumsum(running, axis=1) <= k)
        order = np.argsort(~chosen, axis=1, kind="stable")[:, :k]  # the chosen, in rank order, first
        rows = np.arange(b)[:, None]
        valid = chosen[rows, order]
        tokens = np.where(valid, top_token[rows, order], eos)
        parents = np.where(valid, top_beam[rows, order], 0)
        scores = np.where(valid, top_scores[rows, order], -np.inf)  # dead beams
        width = int(t.max()) if b else 0  # reorder only the steps some row has taken
        self.sequences[:b, :, :width] = self.sequences[:b, :, :width][rows, parents]
        self.sequences[rows[:, 0], :, t] = tokens
        if self._attention is not None:
            self.aligned[:b, :, :width] = self.aligned[:b, :, :width][rows, parents]
            self.aligned[rows[:, 0], :, t] = self._attention[rows, parents]
        if self._confidence:
            self.cumulative[:b, :, :width] = self.cumulative[:b, :, :width][rows, parents]
            self.cumulative[rows[:, 0], :, t] = scores
        self.tokens[:b], self.parents[:b], self.scores[:b], self.t[:b] = tokens, parents, scores, gen_len
        self.top_finished[:b] = is_eos[:, 0] & (top_scores[:, 0] > -np.inf)
        self.done[:b] = at_max | self._cannot_improve(scores[:, 0], counted)

    @property
    def wants_all_candidates(self) -> bool:
        """Whether a live row has a repetition control: its step is exact more often on all the
        candidates a graph gives than on the top ``2K + 1`` (the module's text)."""
        return bool(len(self._controlled_rows()))

    @property
    def wants_log_probs(self) -> bool:
        """Whether this step needs every token's log-probability, not just ``Candidates``: a
        "fairseq" row at its last step, where EOS is forced whether or not it is a candidate."""
        return self._full_steps and bool(self._eos_forced().any() or self.constrained[: self.size].any())

    def _advance_constrained(self, row: int, log_probs: np.ndarray, scores: np.ndarray, sequences: np.ndarray,
                             t: int, totals: np.ndarray | None = None) -> None:
        """One step of a constrained row from its state before the step (``scores`` (K,),
        ``sequences`` (K, t)) and its log-probs (K, V) with the step's bans applied: the beam is
        shared out by dynamic beam allocation (``constraints.allocate``); EOS only once every
        term is met; at the length limit every chosen candidate ends as it is. ``totals``: each
        beam's running scores before the step, for a row that asked for token log-probabilities."""
        k, eos, terms = self.k, self.eos_id, self.terms[row]
        gen_len = t + 1
        counted = max(gen_len - int(self.prompt[row]), 1)
        at_max = gen_len >= int(self.max_len[row])
        cands = step_candidates(scores, log_probs, self.progress[row], terms, eos,
                                no_eos=t < int(self.min_len[row]), at_max=at_max, best=2 * k)
        chosen = allocate(cands, k, terms)
        penalty = float(self.penalty[row])
        everything = (1 << len(terms)) - 1
        met_done = bool((self.fin_met[row, self.fin_order[row, : int(self.pool_size[row])]] == len(terms)).any())
        running: list[Candidate] = []
        for cand in chosen:
            if cand.token == eos or at_max:
                if cand.progress.met != everything and met_done:
                    continue  # a translation with every term is already there
                self._pool_add(row, [*sequences[cand.beam].tolist(), cand.token], cand.score / float(counted) ** penalty,
                               cand.score, totals=None if totals is None else np.append(totals[cand.beam], cand.score),
                               met=cand.progress.count())
            else:
                running.append(cand)
        dead = k - len(running)
        parents = [c.beam for c in running] + [0] * dead
        self.sequences[row, :, :t] = sequences[parents]
        self.sequences[row, :, t] = [c.token for c in running] + [eos] * dead
        if totals is not None:
            self.cumulative[row, :, :t] = totals[parents]
            self.cumulative[row, :, t] = [c.score for c in running] + [-np.inf] * dead
        self.tokens[row] = self.sequences[row, :, t]
        self.parents[row] = parents
        self.scores[row] = [c.score for c in running] + [-np.inf] * dead
        self.progress[row] = [c.progress for c in running] + [START] * dead
        self.t[row] = gen_len
        self.done[row] = at_max or not running or self._cannot_improve_one(row, running[0].score, counted)

    def _eos_forced(self) -> np.ndarray:
        """Rows of the "fairseq" rule at their last step, where only EOS may follow (b,)."""
        b = self.size
        return (self.rule[:b] == _FAIRSEQ) & (self.t[:b] + 1 >= self.max_len[:b])

    def _finish(self, finishing, top_beam, top_token, top_scores, counted) -> None:
        for row, col in zip(*np.nonzero(finishing), strict=True):  # row-major: rank order per sentence
            self._finish_one(int(row), int(top_beam[row, col]), int(top_token[row, col]), float(top_scores[row, col]),
                             int(counted[row]))

    def _finish_one(self, row: int, beam: int, token: int, score: float, counted: int) -> None:
        if int(self.rule[row]) == _FAIRSEQ and int(self.pool_size[row]) >= int(self.pool_keep[row]):
            return  # fairseq finalizes the first K, in rank order, and no more
        t = int(self.t[row])
        alignment = totals = None
        if self.align[row] and self._attention is not None:
            alignment = [*self.aligned[row, beam, :t].tolist(), int(self._attention[row, beam])]
        if self.confident[row]:  # the running scores: token log-probabilities are their differences
            totals = np.append(self.cumulative[row, beam, :t], score)
        self._pool_add(row, [*self.prefix(row, beam), token], score / float(counted) ** float(self.penalty[row]), score,
                       alignment, totals)

    def _advance_few(self, candidates: Candidates) -> None:
        """``advance`` + ``_apply`` for a few rows, row by row on Python numbers: the same ranking
        (score desc, then the lower index in the (K, V) layout), the same forcing, finishing,
        refilling and stopping rules, float64 arithmetic as the arrays'."""
        b, k, eos, vocab = self.size, self.k, self.eos_id, candidates.vocab
        inf = math.inf
        values, ids = candidates.values.tolist(), candidates.tokens.tolist()
        t_all = self.t[:b].tolist()
        width = max(t_all, default=0)  # as the vectorized step: reorder the steps some row has taken
        for row in range(b):
            t = t_all[row]
            no_eos = t < int(self.min_len[row])
            rule = int(self.rule[row])
            only_eos = rule == _FAIRSEQ and t + 1 >= int(self.max_len[row])
            running = self.scores[row].tolist()
            controlled = self._controls and self._controlled_one(row)
            row_values = self._control_one(row, t, values[row], ids[row]) if controlled else values[row]
            ranked = []
            for beam in range(k):
                base, score = beam * vocab, running[beam]
                forced = only_eos and eos in ids[row][beam]
                for value, token in zip(row_values[beam], ids[row][beam], strict=True):
                    banned = (no_eos and token == eos) or (forced and token != eos)
                    ranked.append((-(score + (-inf if banned else value)), base + token))
            ranked.sort()
            ranked = ranked[: 2 * k]
            if controlled and len(ids[row][0]) < vocab:
                self._count_inexact_one(row, running, values[row], ids[row], ranked, vocab)
            if rule == _OPENNMT:
                ranked = [(c if j < k else inf, f) for j, (c, f) in enumerate(ranked)]
            top_scores = [-c for c, _ in ranked]
            top_beam = [f // vocab for _, f in ranked]
            top_token = [f % vocab for _, f in ranked]
            if t < int(self.n_forced[row]):  # a prefix token: every beam continues itself with it
                n = len(ranked)
                top_beam = [*range(k), *[0] * (n - k)]
                top_token = [int(self.forced[row, t])] * n
                top_scores = [*running, *[-inf] * (n - k)]
            gen_len = t + 1
            counted = max(gen_len - int(self.prompt[row]), 1) + (rule == _OPENNMT)
            at_max = gen_len >= int(self.max_len[row])
            ends = [token == eos for token in top_token]
            if self._loops and int(self.loop_repeats[row]) and t >= int(self.n_forced[row]):
                ends = [end or self._loops_one(row, t, beam, token)
                        for end, beam, token in zip(ends, top_beam, top_token, strict=True)]
            for j in range(min(k, len(top_token))):
                if (ends[j] or at_max) and top_scores[j] > -inf:
                    self._finish_one(row, top_beam[j], top_token[j], top_scores[j], counted)
            chosen = [j for j in range(len(top_token)) if not ends[j]][:k]
            dead = k - len(chosen)
            tokens = [top_token[j] for j in chosen] + [eos] * dead
            parents = [top_beam[j] for j in chosen] + [0] * dead
            scores = [top_scores[j] for j in chosen] + [-inf] * dead
            self.sequences[row, :, :width] = self.sequences[row, parents, :width]
            self.sequences[row, :, t] = tokens
            if self._attention is not None:
                self.aligned[row, :, :width] = self.aligned[row, parents, :width]
                self.aligned[row, :, t] = self._attention[row, parents]
            if self._confidence:
                self.cumulative[row, :, :width] = self.cumulative[row, parents, :width]
                self.cumulative[row, :, t] = scores
            self.tokens[row], self.parents[row], self.scores[row], self.t[row] = tokens, parents, scores, gen_len
            self.top_finished[row] = bool(top_token) and ends[0] and top_scores[0] > -inf
            self.done[row] = at_max or self._cannot_improve_one(row, scores[0], counted)

    # ---- the repetition controls and the loop cut (the module's text) ----------------------------

    def _controlled_rows(self) -> np.ndarray:
        """Live rows with a repetition control (none at no cost until a row asked for one)."""
        b = self.size
        if not self._controls:
            return np.zeros(0, np.int64)
        return np.flatnonzero((self.no_repeat[:b] > 0) | (self.repetition[:b] != 1.0) | (self.suppress[:b] > 0))

    def _controlled_one(self, row: int) -> bool:
        return bool(self.no_repeat[row] > 0 or self.repetition[row] != 1.0 or self.suppress[row] > 0)

    def _history(self, rows: np.ndarray) -> np.ndarray:
        """(r, K, 1 + W): each hypothesis' decoder tokens, the start token first (what transformers'
        processors see), -1 past its length."""
        t = self.t[rows]
        width = int(t.max())
        hist = np.full((len(rows), self.k, 1 + width), -1, np.int64)
        hist[:, :, 0] = self.bos_id
        seq = self.sequences[rows, :, :width]
        hist[:, :, 1:] = np.where(np.arange(width)[None, None, :] < t[:, None, None], seq, -1)
        return hist

    def _banned(self, rows: np.ndarray, hist: np.ndarray) -> np.ndarray | None:
        """(r, K, J): tokens each hypothesis may not take (-1: none), from its n-gram ban and its
        suppressed sequences; None when no row has either."""
        r, k = len(rows), self.k
        t, sizes, sets = self.t[rows], self.no_repeat[rows], self.suppress[rows]
        length = t + 1  # decoder tokens, the start token included
        parts = []
        for n in np.unique(sizes[sizes > 0]).tolist():
            windows = hist.shape[2] - n + 1  # window j is hist[j : j + n]
            if windows <= 0:
                continue
            match = np.ones((r, k, windows), bool)
            for i in range(n - 1):  # the window's first n - 1 tokens equal the last n - 1
                last = hist[np.arange(r), :, np.maximum(length - n + 1 + i, 0)]  # (r, K)
                match &= hist[:, :, i : i + windows] == last[:, :, None]
            valid = (sizes == n)[:, None] & (np.arange(windows)[None, :] <= (length - n)[:, None])
            parts.append(np.where(match & valid[:, None, :], hist[:, :, n - 1 : n - 1 + windows], -1))
        seq = self.sequences[rows]
        for index in np.unique(sets[sets > 0]).tolist():
            for banned in self.suppress_sets[index]:
                before = banned[:-1]
                hit = np.repeat(((sets == index) & (t >= len(before)))[:, None], k, axis=1)
                for i, token in enumerate(before):  # the target tokens end with the sequence's first ones
                    hit &= seq[np.arange(r), :, np.maximum(t - len(before) + i, 0)] == token
                parts.append(np.where(hit, banned[-1], -1)[:, :, None])
        return np.concatenate(parts, axis=2) if parts else None

    def _control_dense(self, rows: np.ndarray, log_probs: np.ndarray) -> np.ndarray:
        """The controlled rows' log-probs (b, K, V) penalised and banned (a new array)."""
        r, k, vocab = len(rows), self.k, log_probs.shape[2]
        sub = log_probs[rows]
        hist = self._history(rows)

        def mask_of(ids: np.ndarray) -> np.ndarray:  # (r, K, V): ids (-1 or out of range: none) as a mask
            mask = np.zeros((r, k, vocab + 1), bool)
            np.put_along_axis(mask, np.where((ids >= 0) & (ids < vocab), ids, vocab), True, axis=2)
            return mask[:, :, :vocab]

        theta = self.repetition[rows]
        if (theta != 1.0).any():
            seen = mask_of(hist) & (theta != 1.0)[:, None, None]
            sub = np.where(seen, _penalised(sub, theta[:, None, None]), sub)
        banned = self._banned(rows, hist)
        if banned is not None:
            sub = np.where(mask_of(banned), -np.inf, sub)
        out = log_probs.copy()
        out[rows] = sub
        return out

    def _control_candidates(self, rows: np.ndarray, values: np.ndarray, tokens: np.ndarray) -> np.ndarray:
        """The controlled rows' candidate values (b, K, m) penalised and banned (a new array)."""
        sub, ids = values[rows], tokens[rows]
        hist = self._history(rows)
        theta = self.repetition[rows]
        if (theta != 1.0).any():
            seen = (ids[..., None] == hist[:, :, None, :]).any(-1) & (theta != 1.0)[:, None, None]
            sub = np.where(seen, _penalised(sub, theta[:, None, None]), sub)
        banned = self._banned(rows, hist)
        if banned is not None:
            sub = np.where((ids[..., None] == banned[:, :, None, :]).any(-1), -np.inf, sub)
        out = values.copy()
        out[rows] = sub
        return out

    def _count_inexact(self, rows: np.ndarray, raw: np.ndarray, tokens: np.ndarray, vocab: int,
                       top_scores: np.ndarray, order: np.ndarray) -> None:
        """Count the controlled rows whose step on ``Candidates`` may differ from the full search's:
        some hypothesis' unknown tokens (raw log-prob <= its lowest known ``lo``; a penalty lifts
        one of its decoder tokens to at most ``f(lo)``, which only a penalty below 1 makes larger)
        could outrank the sentence's 2K-th known continuation. A tie with it is safe when that
        continuation comes from a lower beam, or from the same beam at its ``lo`` (the unknown
        tokens at ``lo`` have higher ids: TopK's tie rule)."""
        k, m = self.k, raw.shape[2]
        rows = rows[self.t[rows] >= self.n_forced[rows]]  # a prefix token is forced whatever ranks
        if not len(rows) or top_scores.shape[1] < 2 * k:
            return
        lo = raw[rows].min(axis=2)  # (r, K)
        theta = self.repetition[rows]
        top = lo
        if (theta < 1.0).any():  # lifted only where one of the hypothesis' tokens is an unknown one
            hist = self._history(rows)
            known = (hist[..., None] == tokens[rows][:, :, None, :]).any(-1) | (hist < 0) | (hist >= vocab)
            top = np.where(known.all(-1), lo, np.maximum(lo, _penalised(lo, theta[:, None])))
        bound = self.scores[rows] + top
        last = order[rows, 2 * k - 1]  # the 2K-th continuation: its place in the (K, m) layout
        worst, beam = top_scores[rows, 2 * k - 1][:, None], (last // m)[:, None]
        at_lo = raw[rows].reshape(len(rows), -1)[np.arange(len(rows)), last][:, None] == lo
        beams = np.arange(k)[None, :]
        safe = (bound == -np.inf) | (worst > bound) | ((worst == bound) & ((beam < beams) | ((beam == beams) & at_lo)))
        self.inexact_steps += int((~safe.all(axis=1)).sum())

    def _control_one(self, row: int, t: int, values: list, ids: list) -> list:
        """``_control_candidates`` of one row, on Python numbers."""
        theta, n = float(self.repetition[row]), int(self.no_repeat[row])
        suppressed = self.suppress_sets[int(self.suppress[row])]
        out = []
        for beam in range(self.k):
            target = self.sequences[row, beam, :t].tolist()
            hist = [self.bos_id, *target]
            banned: set[int] = set()
            if n and len(hist) >= n:
                last = hist[len(hist) - n + 1:]
                banned.update(hist[j + n - 1] for j in range(len(hist) - n + 1) if hist[j : j + n - 1] == last)
            for sequence in suppressed:
                before = list(sequence[:-1])
                if t >= len(before) and target[t - len(before):] == before:
                    banned.add(sequence[-1])
            seen = set(hist) if theta != 1.0 else set()
            out.append([-math.inf if token in banned else
                        (value * theta if value < 0 else value / theta) if token in seen else value
                        for value, token in zip(values[beam], ids[beam], strict=True)])
        return out

    def _count_inexact_one(self, row: int, running: list, raw: list, ids: list, ranked: list, vocab: int) -> None:
        """``_count_inexact`` of one row, on Python numbers."""
        k = self.k
        if int(self.t[row]) < int(self.n_forced[row]) or len(ranked) < 2 * k:
            return
        theta, t = float(self.repetition[row]), int(self.t[row])
        worst, flat = -ranked[2 * k - 1][0], ranked[2 * k - 1][1]
        beam, token = flat // vocab, flat % vocab
        at_lo = raw[beam][ids[beam].index(token)] == min(raw[beam])
        for h in range(k):
            lo = top = min(raw[h])
            if theta < 1.0 and any(x not in ids[h] and x < vocab
                                   for x in (self.bos_id, *self.sequences[row, h, :t].tolist())):
                top = max(lo, lo * theta if lo < 0 else lo / theta)
            bound = running[h] + top
            if not (bound == -math.inf or worst > bound or (worst == bound and (beam < h or (beam == h and at_lo)))):
                self.inexact_steps += 1
                return

    def _looped(self, top_beam: np.ndarray, top_token: np.ndarray) -> np.ndarray:
        """(b, n): whether each candidate makes its hypothesis end with the same block of n <=
        ``loop_ngram`` tokens written ``loop_repeats`` times in a row (rows past their prefix)."""
        b, k = self.size, self.k
        looped = np.zeros(top_token.shape, bool)
        rows = np.flatnonzero((self.loop_repeats[:b] > 0) & (self.t[:b] >= self.n_forced[:b]))
        if not len(rows):
            return looped
        r = len(rows)
        t, repeats, longest = self.t[rows], self.loop_repeats[rows], self.loop_ngram[rows]
        seq, at = self.sequences[rows], np.arange(r)
        beams, tokens = top_beam[rows], top_token[rows]
        for n in range(1, int(longest.max()) + 1):
            # With the candidate at position t, positions t + 1 - (R - 1) n .. t each equal the
            # token n before: the last (R - 1) n - 1 of them are the hypothesis' own.
            fits = (n <= longest) & (t + 1 >= repeats * n)
            if not fits.any():
                continue
            own = (repeats - 1) * n - 1
            width = int(own[fits].max())
            periodic = np.ones((r, k), bool)
            if width > 0:
                i = t[:, None] - 1 - np.arange(width)[None, :]  # (r, w), from the last token back
                same = seq[at[:, None, None], np.arange(k)[None, :, None], np.maximum(i, 0)[:, None, :]] == \
                    seq[at[:, None, None], np.arange(k)[None, :, None], np.maximum(i - n, 0)[:, None, :]]
                periodic = (same | (np.arange(width)[None, None, :] >= own[:, None, None])).all(axis=2)
            before = seq[at, :, np.maximum(t - n, 0)]  # (r, K): the token the candidate must repeat
            hit = (fits[:, None] & periodic)[at[:, None], beams] & (tokens == before[at[:, None], beams])
            looped[rows] |= hit
        return looped

    def _loops_one(self, row: int, t: int, beam: int, token: int) -> bool:
        """``_looped`` of one candidate, on Python numbers."""
        repeats, seq = int(self.loop_repeats[row]), self.sequences[row, beam, :t].tolist()
        for n in range(1, int(self.loop_ngram[row]) + 1):
            if t + 1 >= repeats * n and token == seq[t - n] and \
                    all(seq[i] == seq[i - n] for i in range(t + 1 - (repeats - 1) * n, t)):
                return True
        return False

    def _cannot_improve_one(self, row: int, best_running: float, counted: int) -> bool:
        """``_cannot_improve`` of one row."""
        if int(self.pool_size[row]) < int(self.pool_capacity[row]):
            return False
        if int(self.rule[row]) == _OPENNMT:
            return bool(self.top_finished[row])
        stopping, penalty = int(self.stopping[row]), float(self.penalty[row])
        if stopping == 1:
            return True
        length = float(self.max_len[row] - self.prompt[row]) if stopping == 2 and penalty > 0 else float(counted)
        return best_running / length**penalty <= float(self.pool_worst[row])

    def _cannot_improve(self, best_running: np.ndarray, counted: np.ndarray) -> np.ndarray:
        """Per row: the pool is full and either early_stopping=True, or the best running beam,
        normalised by the current length (by the maximum length with "never" and a positive
        penalty), cannot beat the pool's worst. Lengths count after the prompt."""
        b = self.size
        full = self.pool_size[:b] >= self.pool_capacity[:b]
        penalty, stopping = self.penalty[:b], self.stopping[:b]
        length = np.where((stopping == 2) & (penalty > 0), self.max_len[:b] - self.prompt[:b],
                          counted).astype(np.float64)
        bound = best_running / length**penalty  # lengths >= 1: finite, or -inf for a dead beam
        opennmt = self.rule[:b] == _OPENNMT
        return full & np.where(opennmt, self.top_finished[:b], (stopping == 1) | (bound <= self.pool_worst[:b]))


def beam_search(
    model: StepModel,
    batch_size: int,
    source_lengths: np.ndarray | list[int],
    options: SearchOptions,
    *,
    bos_id: int,
    eos_id: int,
    prefixes: Sequence[TargetPrefix] | None = None,
    constraints: Sequence[Sequence[Constraint]] | None = None,
) -> list[list[Hypothesis]]:
    """Decode ``batch_size`` sentences; returns, per sentence, its best hypotheses (best first).

    Each sentence's result is independent of the others in the batch; finished sentences leave
    the running batch at once. ``prefixes``: per sentence, the tokens its hypotheses start with;
    ``constraints``: per sentence, the terms its translation must contain.
    """
    lengths = [int(n) for n in source_lengths]
    assert len(lengths) == batch_size
    prefixes = list(prefixes) if prefixes is not None else [NO_PREFIX] * batch_size
    assert len(prefixes) == batch_size
    batch = BeamBatch(options.beam_size, bos_id=bos_id, eos_id=eos_id, capacity=batch_size,
                      max_steps=max((BeamBatch.steps_for(options, n, p) for n, p in zip(lengths, prefixes, strict=True)),
                                    default=1))
    terms = list(constraints) if constraints is not None else [()] * batch_size
    for n, prefix, sentence_terms in zip(lengths, prefixes, terms, strict=True):
        batch.add(options, n, prefix, constraints=sentence_terms)
    sentence = np.arange(batch_size)  # the sentence in each row
    results: list[list[Hypothesis]] = [[] for _ in range(batch_size)]
    parents = batch_index = None
    while batch.size:
        log_probs = model.step(batch.tokens[: batch.size].copy(), parents, batch_index)
        batch.advance(log_probs, getattr(model, "attention", None) if batch.wants_attention else None)
        done = batch.done[: batch.size]
        for row in np.flatnonzero(done).tolist():
            results[sentence[row]] = batch.results(row)
        keep = np.flatnonzero(~done)
        if len(keep) < batch.size:
            batch.reorder(keep)
            sentence = sentence[keep]
        batch_index = keep
        parents = batch.parents[: batch.size].copy() if batch.size else None
    return results
