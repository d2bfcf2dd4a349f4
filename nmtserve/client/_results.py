"""What a translation call returns."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .errors import TranslationError


@dataclass(frozen=True, slots=True)
class Hypothesis:
    """One entry of an n-best list."""

    text: str
    score: float


@dataclass(frozen=True, slots=True)
class Translation:
    """The translation of one input sentence.

    ``score`` is the model's score of ``text`` (length-normalised log-probability; higher is
    better); 0.0 for a blank input line, which is never sent to the server (its empty
    translation is certain). ``hypotheses`` is the n-best list, best first, when more than one
    hypothesis was asked for (an empty list for a blank line), else None. ``str(translation)``
    is its text.

    ``error`` is set only with ``on_error="return"``: the sentence was rejected (``text`` is
    empty, ``score`` None) and ``error`` says why (an InvalidInputError whose ``index`` is the
    sentence's input position); every other sentence was translated.
    """

    text: str
    score: float | None
    hypotheses: list[Hypothesis] | None = None
    error: TranslationError | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    def __str__(self) -> str:
        return self.text
