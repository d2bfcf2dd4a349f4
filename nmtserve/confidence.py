"""Word and sentence confidence from the model's own log-probabilities, and which source words
the decoder attended to.

With ``SearchOptions.confidence`` every hypothesis carries the log-probability the search added
for each of its tokens (``Hypothesis.token_logprobs``). From those:

* a **target word's confidence** is the probability of its least likely piece,
  ``exp(min log p)``. The minimum, not the mean: a word is wrong when any of its pieces is, and
  the pieces after a word's first are nearly always sure continuations (``▁cinquante`` then
  ``-trois``), so a mean hides one unsure choice among sure ones (measured on the demo's
  held-out sets: bench/quality_signals.py, docs/measurements.md#confidence);
* a **sentence's confidence** is its tokens' geometric mean probability, ``exp(mean log p)``,
  the end-of-sentence token included (an unsure stop is how a dropped clause shows): the
  sentence log-probability Guerreiro et al. (2022) found the best glass-box detector of
  hallucinations, per token so that long and short sentences compare. Equal to ``exp(SCORE)``
  at the default length penalty of 1.

Firefox Translations (Bergamot) calls a word "bad" under ln 0.5; ``LOW_CONFIDENCE`` is this
project's threshold, chosen on the demo's held-out sets (docs/measurements.md#confidence).

``covered_words`` gives the source words some target token attended to most (the decoder's
alignment, ``Hypothesis.alignment``), which ``nmtserve.coverage.omitted_words`` turns into the
words a translation may have left out. Dependency-free.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

from .alignment import piece_words, word_alignment

# A target word under this confidence is marked on the page and by the CLI (the client's
# ``Translation.low_confidence_words``). Chosen on the demo's held-out sets (test, joined, typed,
# first: 3,300 sentences, bench/quality_signals.py): a translation whose lowest word is under 0.3
# is wrong with precision 0.89 and recall 0.76 (9 of 3,208 exact translations marked); under 0.5
# (Bergamot's ln 0.5) precision falls to 0.67 for recall 0.85. ROC AUC 0.987.
LOW_CONFIDENCE = 0.3
# A target word under this confidence puts "may be wrong" in WARNING when the request asked for
# CONFIDENCE (nmtserve.coverage.warning): on the demo's held-out sets no exact translation of
# 3,208 has one, 48 of 92 wrong ones do, and it catches the garbled words of a model that lost
# its way ("ils voienture chats"); docs/measurements.md#confidence.
UNSURE_WORD = 0.1


def word_confidences(target_pieces: Sequence[str | None], logprobs: Sequence[float] | None,
                     how: Literal["min", "mean"] = "min") -> list[float]:
    """Per target word (the words of ``alignment.piece_words``: the whitespace-separated words of
    the translation), the probability of its least likely piece (``how="mean"``: the geometric
    mean of its pieces', for comparison); [] without log-probabilities. ``target_pieces`` are the
    generated tokens' pieces, None for the specials (EOS)."""
    if not logprobs:
        return []
    words = piece_words(target_pieces)
    pieces: dict[int, list[float]] = {}
    for word, logprob in zip(words, logprobs, strict=False):
        if word >= 0:
            pieces.setdefault(word, []).append(logprob)
    reduce = min if how == "min" else (lambda v: sum(v) / len(v))
    return [math.exp(reduce(pieces[w])) if w in pieces else 1.0 for w in range(max(words, default=-1) + 1)]


def sentence_confidence(logprobs: Sequence[float] | None) -> float:
    """The tokens' geometric mean probability, ``exp(mean log p)``; 1.0 for none."""
    if not logprobs:
        return 1.0
    return math.exp(sum(logprobs) / len(logprobs))


def covered_words(source_pieces: Sequence[str | None], target_pieces: Sequence[str | None],
                  positions: Sequence[int] | None) -> set[int]:
    """The source words (from 0, ``piece_words`` of the source pieces) that a generated token with
    a letter or digit attended to most, by a piece with one (``positions``: per token, its most attended source position), and the ones
    ``alignment.word_alignment`` gives a target word (its ``fill_gaps`` rule: a function word the
    decoder wrote while attending to what it introduces)."""
    if not positions:
        return set()
    source_words = piece_words(source_pieces)
    covered = {source_words[p] for p, piece in zip(positions, target_pieces, strict=False)
               if _has_content(piece) and 0 <= p < len(source_words) and _has_content(source_pieces[p])}
    covered.update(s for s, _ in word_alignment(source_words, target_pieces, positions))
    return covered


def _has_content(piece: str | None) -> bool:
    """A piece with a letter or a digit: a full stop attending to the source's full stop says
    nothing about the word that stop is glued to ("houses.")."""
    return piece is not None and any(ch.isalnum() for ch in piece)


def format_confidences(values: Sequence[float]) -> str:
    """"0.98 0.41 1.00": one probability a word, two decimals (WORD_CONFIDENCE)."""
    return " ".join(f"{v:.2f}" for v in values)


def parse_confidences(text: str) -> list[float]:
    """The numbers of a WORD_CONFIDENCE string; ValueError names one that is not a number."""
    out = []
    for item in text.split():
        try:
            out.append(float(item))
        except ValueError:
            raise ValueError(f"not a confidence (a number between 0 and 1): {item!r}") from None
    return out
