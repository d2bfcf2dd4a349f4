"""Whether a translation may leave out part of its source: a cheap check on every sentence served.

A small or out-of-domain model can drop a clause and still write fluent text ("I bought 3 chairs
and twenty-one books" -> "J'ai acheté vingt et un livres"): the worst answer a translation
service can give, because nothing looks wrong. ``warning`` looks for four signs of trouble:

* **A number left out.** Every number of the source should be in the translation. Numbers in
  digits are compared by their digits (1-9: "12,000" -> "12 000", "7:00" -> "7 h" and "12.50"
  -> "12,50" all keep them); numbers in words are counted as mentions, runs of the language's
  number words (num2words' vocabulary for the language: "twenty-one", "vingt et un"), and the
  translation must hold at least as many mentions, in digits or words, as the source.
* **Too short.** A translation under ``SHORT_FACTOR`` times the model's usual length ratio
  (target / source characters, measured by the export on its held-out sentences and recorded in
  the model's spec) for a source of at least ``MIN_CHARS_FOR_LENGTH`` characters.
* **A term missing.** A term the request asked for (TERMS) none of whose renderings is in the
  translation: constrained decoding writes every term unless the length limit ended it first.
* **A score far under the model's usual** (``SCORE_FLOOR_FACTOR`` times the 1st percentile of its
  held-out scores, measured at export): input outside what the model knows, answered with fluent
  nonsense ("may be wrong").

The figures (how many dropped translations it catches, how many right ones it flags) are measured
on the demo's held-out joined set by ``bench/omission.py``; the thresholds are chosen there.
Dependency-free but for num2words, optional: without it (or for a language it does not know)
only digits are compared.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from functools import lru_cache

# A score (length-normalised log-probability) under this many times the 1st percentile of the
# model's scores on its held-out sentences (measured at export) is flagged: a model far outside
# what it knows ("hello" to a model of numbers) writes fluent nonsense with a low score.
SCORE_FLOOR_FACTOR = 3.0
# A translation shorter than this share of the model's usual length ratio is flagged ...
SHORT_FACTOR = 0.55
# ... for sources of at least this many characters (a greeting's ratio is anyone's guess).
MIN_CHARS_FOR_LENGTH = 30

# A number in digits: "12", "12,000", "12 000" (a space before a group of three), "12.50";
# a time "7:45" is two (the French "7 h 45" also is two).
_DIGITS = re.compile(r"(?<!\d)\d+(?:(?:[.,]|[ \u00a0\u202f](?=\d{3}(?!\d)))\d+)*")
_WORD = re.compile(r"[^\W\d_]+", re.UNICODE)


# Forms num2words does not write: "une pomme" counts as "un".
_EXTRA_WORDS = {"fr": {"une"}, "es": {"una", "un"}, "it": {"una", "un"}, "pt": {"uma"}, "ca": {"una"},
                "de": {"eine", "einen", "einem", "einer"}}


@lru_cache(maxsize=64)
def number_words(language: str | None) -> tuple[frozenset[str], frozenset[str]] | None:
    """(the words numbers are written with in ``language``, the ones that only join others:
    "and", "et"), from num2words; None where num2words is missing or does not know the language."""
    if not language:
        return None
    try:
        from num2words import num2words
    except ImportError:
        return None
    code = language.split("_")[0].split("-")[0].lower()
    values = [*range(0, 101), *range(100, 1000, 100), 101, 121, 171, 181, 191, 1000, 1001, 2000, 21000, 10**6, 2 * 10**6]
    words: set[str] = set()
    starts: set[str] = set()
    singles: set[str] = set()  # numbers of one word ("twenty", "mille")
    try:
        for n in values:
            spelled = _WORD.findall(num2words(n, lang=code).lower())
            words.update(spelled)
            if spelled:
                starts.add(spelled[0])
            if len(spelled) == 1:
                singles.add(spelled[0])
    except (NotImplementedError, OverflowError, KeyError, AttributeError, TypeError, ValueError):
        return None
    if not words:
        return None
    joiners = frozenset(w for w in words if w not in starts and w not in singles and len(w) <= 3)
    return frozenset(words | _EXTRA_WORDS.get(code, set())), joiners


def nonzero_digits(text: str) -> Counter:
    """The digits 1-9 of the numbers in ``text``, counted."""
    return Counter(ch for match in _DIGITS.finditer(text) for ch in match.group() if ch in "123456789")


def mentions(text: str, language: str | None) -> int:
    """How many numbers ``text`` mentions: digit runs that are not all zeros ("7:00" is one), plus
    runs of the language's number words ("one hundred and twenty" is one)."""
    count = sum(1 for m in _DIGITS.finditer(text) if m.group().strip("0., \u00a0\u202f"))
    vocabulary = number_words(language)
    if vocabulary is None:
        return count
    words, joiners = vocabulary
    run = False
    for token in re.findall(r"[^\W\d_]+|\d+|[^\s\w-]", text.lower()):
        if token in words and not (not run and token in joiners):
            if not run:
                count += 1
            run = True
        else:
            run = False
    return count


def missing_numbers(source: str, translation: str, source_language: str | None = None,
                    target_language: str | None = None) -> str:
    """"" when every number of ``source`` is in ``translation``; else which are not: digits (1-9)
    of the source missing, or fewer mentions of numbers (digits or words) than the source's."""
    lost = nonzero_digits(source) - nonzero_digits(translation)
    if lost:
        return "digits of the source are missing (" + ", ".join(sorted(lost.elements())) + ")"
    # Without the target's number words only the digits can be compared.
    have = mentions(source, source_language if number_words(target_language) is not None else None)
    get = mentions(translation, target_language)
    return f"the source mentions {have} numbers, the translation {get}" if get < have else ""


def missing_terms(translation: str, terms: Sequence[Sequence[str]]) -> list[str]:
    """The terms (each its renderings, any one will do) none of whose renderings is in
    ``translation``, each named by its first rendering: a term the length limit cut off, which
    constrained decoding otherwise always writes."""
    text = " ".join(translation.split())
    return [term[0] for term in terms if term and not any(" ".join(t.split()) in text for t in term)]


def warning(source: str, translation: str, source_language: str | None = None, target_language: str | None = None,
            length_ratio: float = 0.0, score: float | None = None, score_floor: float = 0.0,
            terms: Sequence[Sequence[str]] = ()) -> str:
    """"" when nothing suggests the translation leaves part of ``source`` out or is wrong; else why
    it may ("may be incomplete: ...", "may be wrong: ...").

    ``length_ratio``: the model's usual target / source length in characters (0: unknown, the
    length is not checked); ``score`` the translation's score and ``score_floor`` the model's
    floor (``usual_score_floor``; 0: not checked); ``terms``: the terms the request asked for
    (``missing_terms``)."""
    if not source.strip():
        return ""
    unsure = ""
    if score is not None and score_floor < 0 and score < score_floor:
        unsure = f"may be wrong: the model is unsure of it (score {score:.2f}, under this model's floor of {score_floor:.2f})"
    lost = missing_numbers(source, translation, source_language, target_language)
    reasons = [lost] if lost else []
    reasons += [f"the term '{term}' is missing" for term in missing_terms(translation, terms)]
    if length_ratio > 0 and len(source) >= MIN_CHARS_FOR_LENGTH:
        ratio = len(translation) / len(source)
        if ratio < SHORT_FACTOR * length_ratio:
            reasons.append(f"the translation is {ratio:.0%} of the source's length (this model's usual: {length_ratio:.0%})")
    incomplete = "may be incomplete: " + "; ".join(reasons) if reasons else ""
    return "; ".join(w for w in (incomplete, unsure) if w)


def usual_score_floor(scores: list[float]) -> float:
    """SCORE_FLOOR_FACTOR times the 1st percentile of ``scores`` (0.0 for fewer than 20 of them)."""
    if len(scores) < 20:
        return 0.0
    low = sorted(scores)[len(scores) // 100]
    return round(SCORE_FLOOR_FACTOR * min(low, 0.0), 3)


def usual_length_ratio(sources: list[str], translations: list[str]) -> float:
    """The median target / source length in characters of sentences of at least MIN_CHARS_FOR_LENGTH."""
    ratios = sorted(len(t) / len(s) for s, t in zip(sources, translations, strict=True) if len(s) >= MIN_CHARS_FOR_LENGTH)
    return round(ratios[len(ratios) // 2], 3) if ratios else 0.0
