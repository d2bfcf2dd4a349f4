"""Which hypotheses of an n-best list to offer a person: the plausible ones, or none.

A beam search returns ``num_hypotheses`` hypotheses however bad the lower ones are, and a small
model's lower ones are mostly broken copies of the best ("Le trainerme à 7 h 45.", "J'ai vingt
pommes.6 pommes.", "Le train clés Le train part à 7 h 45."). The best is the translation and is
always kept; each other hypothesis is offered only when all of these hold:

* **Close in score**: its score (length-normalised log-probability, higher is better) is at
  least the best's minus ``MARGIN``.
* **A different text**: it differs from the best and from every hypothesis kept before it once
  case, spaces and punctuation are set aside ("le train part à 7 h 45" is no alternative to
  "Le train part à 7 h 45."); an empty one is never offered.
* **The same numbers**: it writes the best's numbers, no more, no fewer ("2042" or "1923" for
  the best's "2024", the "6" of "pommes.6 pommes" are other numbers; in words too where the
  target language is known and num2words writes it), and keeps every number of the source the
  best keeps (``nmtserve.coverage.missing_numbers``). Other numbers are offered only as a
  repair of the best: losing none of the source's, adding no digit it lacks, where the best
  loses one or only the alternative has the source's digits in order ("1934", the best "1943").

So a list of k comes back as the best and 0 to k-1 others: fewer, or none, rather than junk.
``MARGIN`` is chosen, and the rule's figures measured, by ``bench/alternatives.py`` on the demo
model's held-out sets (docs/client.md, "Alternatives"). Dependency-free (the number check uses
num2words when it is installed, as ``nmtserve.coverage`` does), so the client imports it.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Sequence

from .coverage import missing_numbers, nonzero_digits, number_words

# Chosen on the demo's held-out sets (bench/alternatives.py, docs/client.md): the demo's lower
# hypotheses are junk at every gap (the right translation was one in 8 of 9,900), but junk thins
# out fast under 0.2. 0.1 (each token about 10% less likely than the best's) keeps 3 of those 8
# and offers anything at all for 45 of 3,300 sentences (10 of them with a right best); 0.2
# keeps 5 for 4x the junk, 0.3 for 18x; 1.0 offers junk for 79% of sentences.
MARGIN = 0.1

KEPT = ""
FAR = "score"  # further than the margin under the best
SAME = "same"  # the best's text (or a kept one's) but for case, spaces and punctuation
EMPTY = "empty"
NUMBERS = "numbers"  # loses a number the best keeps, or writes one nobody wrote


def key(text: str) -> str:
    """What two texts must differ in to be two translations: letters and digits, case folded."""
    return "".join(ch for ch in unicodedata.normalize("NFKC", text).casefold() if ch.isalnum())


def numbers(text: str, language: str | None = None) -> Counter:
    """The numbers ``text`` writes: its runs of digits, and its number words when num2words
    knows ``language`` ("vingt et un": "vingt", "et", "un")."""
    found = Counter(re.findall(r"\d+", text))
    vocabulary = number_words(language)
    if vocabulary is not None:
        found.update(w for w in re.findall(r"[^\W\d_]+", text.casefold()) if w in vocabulary[0])
    return found


def verdicts(
    texts: Sequence[str], scores: Sequence[float], source: str = "", *, margin: float = MARGIN,
    source_language: str | None = None, target_language: str | None = None,
) -> list[str]:
    """For each hypothesis of an n-best list (best first, ``scores`` beside ``texts``): ``KEPT``
    ("") when it is offered, else why not (``FAR``, ``SAME``, ``EMPTY``, ``NUMBERS``). The best is
    always kept. ``source`` (the sentence translated; "" if unknown) and the language codes feed
    the number check (the codes only for numbers written in words)."""
    if not texts:
        return []
    best, best_score = texts[0], scores[0]
    langs = (source_language, target_language)
    best_lost = bool(source) and bool(missing_numbers(source, best, *langs))
    seen = {key(best)}
    out = [KEPT]
    for text, score in zip(texts[1:], scores[1:], strict=True):
        text_key = key(text)
        if not text_key:
            verdict = EMPTY
        elif text_key in seen:
            verdict = SAME
        elif not score >= best_score - margin:  # also a NaN score
            verdict = FAR
        elif not _numbers_fit(text, best, source, best_lost, target_language, langs):
            verdict = NUMBERS
        else:
            verdict = KEPT
            seen.add(text_key)
        out.append(verdict)
    return out


def plausible(
    texts: Sequence[str], scores: Sequence[float], source: str = "", *, margin: float = MARGIN,
    source_language: str | None = None, target_language: str | None = None,
) -> list[int]:
    """The positions in an n-best list (best first) of the hypotheses to offer: 0 and the others
    ``verdicts`` keeps, in order ([] for an empty list)."""
    found = verdicts(texts, scores, source, margin=margin, source_language=source_language,
                     target_language=target_language)
    return [i for i, verdict in enumerate(found) if verdict == KEPT]


def _numbers_fit(text: str, best: str, source: str, best_lost: bool, target_language: str | None,
                 langs: tuple[str | None, str | None]) -> bool:
    """Whether ``text`` writes the best's numbers (and loses none of the source's the best
    keeps), or other numbers that repair the best: it loses none of the source's, adds no digit
    the source lacks, and either the best loses some or only ``text`` has the source's digits in
    the source's order (the source's "1934" where the best wrote "1943")."""
    if numbers(text, target_language) == numbers(best, target_language):
        return best_lost or not (source and missing_numbers(source, text, *langs))
    if not source or missing_numbers(source, text, *langs) or nonzero_digits(text) - nonzero_digits(source):
        return False
    return best_lost or _digits_in_order(text) == _digits_in_order(source) != _digits_in_order(best)


def _digits_in_order(text: str) -> str:
    # Zeros left out: "7:00" is "7 h" in French, "12.50" "12,50".
    return re.sub(r"[^1-9]", "", text)
