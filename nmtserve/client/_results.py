"""What a translation call returns."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Hypothesis:
    """One entry of an n-best list."""

    text: str
    score: float


@dataclass(frozen=True, slots=True)
class Translation:
    """The translation of one input sentence.

    ``score`` is the model's score of ``text`` (length-normalised log-probability; higher is
    better), None for a blank input line, which is never sent to the server. ``hypotheses`` is
    the n-best list, best first, when more than one hypothesis was asked for (an empty list for
    a blank line), else None. ``str(translation)`` is its text.
    """

    text: str
    score: float | None
    hypotheses: list[Hypothesis] | None = None

    def __str__(self) -> str:
        return self.text
