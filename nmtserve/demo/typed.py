"""The demo corpus as people type it: lower case, no final stop, numbers spelled other ways, digits.

``corpus.py`` writes one tidy English form per sentence ("I have twenty red apples."). A person
types "i have twenty apples", "one hundred and twenty three", "twenty", "the book costs 12.50
euros" or "at 7:45". This module writes those forms with their exact French, by rules:

* **Case and stop follow the input.** An English input in lower case gets a French one whose
  first letter is lower case ("i have three cats" -> "j'ai trois chats"); an input without its
  final full stop gets none ("The train leaves at 7:45" -> "Le train part à 7 h 45").
* **Numbers in words, any common spelling.** American ("one hundred twenty-three"), British with
  "and" ("one hundred and twenty-three"), without hyphens ("twenty three"): all are the same
  French ("cent vingt-trois").
* **Numbers in digits stay digits.** "I have 20 apples." -> "J'ai 20 pommes."; a decimal point
  becomes a decimal comma ("12.50 euros" -> "12,50 euros"); from 10,000 up the French groups
  digits by three with a space ("12,000" or "12000" -> "12 000").
* **Fragments.** A bare number ("twenty" -> "vingt"), a noun phrase ("three red apples" ->
  "trois pommes rouges", "the red car" -> "la voiture rouge"), a time ("7:45" -> "7 h 45",
  "at 7:45" -> "à 7 h 45").

Every pair is written from the same tables and French rules as ``corpus.py``; ``typed_examples``
is deterministic for its seed. ``train.py`` adds a stream of these to the training data and
holds out a separate "as people type" test set (``typed.en`` / ``typed.fr`` beside the
checkpoint).
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from functools import lru_cache

from num2words import num2words

from . import corpus
from .corpus import Example

# Shares of the typed kinds (they sum to 1).
KIND_WEIGHTS: dict[str, float] = {
    "number": 0.16,  # a bare number in words
    "fragment": 0.12,  # a noun phrase, a price or a time without a sentence around it
    "digits": 0.16,  # a sentence with its count in digits
    "price": 0.16,  # a price in digits, with or without cents
    "retyped": 0.40,  # a corpus sentence typed otherwise: case, stop, spelling of its numbers
}

MAX_DIGITS_NUMBER = 99_999

# How a number in words is spelled: (name, weight). "american" is corpus.py's only spelling.
_SPELLINGS: tuple[tuple[str, float], ...] = (("american", 0.35), ("british", 0.3), ("spaced", 0.15), ("british spaced", 0.2))


@lru_cache(maxsize=1_000)
def _en_below_1000_british(n: int) -> str:
    return num2words(n, lang="en").replace(",", "")


def en_cardinal_spelled(n: int, spelling: str) -> str:
    """English words for ``n`` in one of the spellings of ``_SPELLINGS``.

    ``en_cardinal_spelled(123, "british spaced")`` -> "one hundred and twenty three".
    """
    if "british" in spelling:
        thousands, rest = divmod(n, 1000)
        if thousands == 0:
            words = _en_below_1000_british(rest)
        else:
            words = f"{_en_below_1000_british(thousands)} thousand"
            if rest:
                # British English says "one thousand and five" but "one thousand two hundred".
                words += f" and {_en_below_1000_british(rest)}" if rest < 100 else f" {_en_below_1000_british(rest)}"
    else:
        words = corpus.en_cardinal(n)
    return words.replace("-", " ") if "spaced" in spelling else words


def _spelling(rng: random.Random) -> str:
    return rng.choices([s for s, _ in _SPELLINGS], weights=[w for _, w in _SPELLINGS])[0]


def en_digits(n: int, decimals: int | None = None, grouped: bool = False) -> str:
    """English digits: 12000, 12,000 (``grouped``), 12.50 (``decimals=50``)."""
    text = f"{n:,}" if grouped else str(n)
    return text if decimals is None else f"{text}.{decimals:02d}"


def fr_digits(n: int, decimals: int | None = None) -> str:
    """French digits: 12 000 (groups of three from 10 000 up), 12,50."""
    text = f"{n:,}".replace(",", " ") if n >= 10_000 else str(n)
    return text if decimals is None else f"{text},{decimals:02d}"


# --------------------------------------------------------------------------------------------
# Case and final stop
# --------------------------------------------------------------------------------------------


def as_typed(en: str, fr: str, lower: bool, stop: bool) -> tuple[str, str]:
    """The pair with the English in lower case (French first letter lowered) and/or no final stop."""
    if lower:
        en, fr = en.lower(), fr[:1].lower() + fr[1:]
    if not stop:
        en, fr = en.removesuffix("."), fr.removesuffix(".")
    return en, fr


def _typed_case(rng: random.Random, en: str, fr: str, p_lower: float = 0.5, p_no_stop: float = 0.5) -> tuple[str, str]:
    return as_typed(en, fr, lower=rng.random() < p_lower, stop=rng.random() >= p_no_stop)


# --------------------------------------------------------------------------------------------
# Numbers in words, spelled otherwise
# --------------------------------------------------------------------------------------------

_UNIT_WORDS = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
               "sixteen seventeen eighteen nineteen").split()
_TEN_WORDS = "twenty thirty forty fifty sixty seventy eighty ninety".split()
_NUMBER_WORD = "|".join([*_UNIT_WORDS, *_TEN_WORDS, "hundred", "thousand"])
# A run of American number words ("three hundred twenty-one thousand five"), not the head of an
# ordinal ("twenty-first", "one hundred first"): those keep their corpus spelling.
_RUN = re.compile(rf"\b(?:{_NUMBER_WORD})(?:[ -](?:{_NUMBER_WORD}))*\b(?!-)(?! (?:\w+th|first|second|third)\b)")


def parse_cardinal(words: str) -> int:
    """The value of American number words: "three hundred twenty-one thousand five" -> 321005."""
    total = current = 0
    for word in words.replace("-", " ").split():
        if word in _UNIT_WORDS:
            current += _UNIT_WORDS.index(word)
        elif word in _TEN_WORDS:
            current += 20 + 10 * _TEN_WORDS.index(word)
        elif word == "hundred":
            current *= 100
        else:  # thousand
            total, current = total + current * 1000, 0
    return total + current


def respell_numbers(rng: random.Random, en: str) -> str:
    """``en`` with each number in words spelled in a drawn spelling (British, without hyphens ...)."""
    return _RUN.sub(lambda m: en_cardinal_spelled(parse_cardinal(m.group(0)), _spelling(rng)), en)


# --------------------------------------------------------------------------------------------
# The typed kinds
# --------------------------------------------------------------------------------------------


def _digits_number(rng: random.Random) -> int:
    """A count in digits: half of them of four or five digits, the ones a small model copies worst."""
    if rng.random() < 0.5:
        return rng.randint(1_000, MAX_DIGITS_NUMBER)
    return min(corpus.sample_number(rng, low=1), MAX_DIGITS_NUMBER)


def _count(rng: random.Random, noun: corpus.Noun, digits: bool) -> int:
    return corpus._sample_count(rng, noun) if not digits else _digits_number(rng)


def _digits_pair(rng: random.Random, n: int) -> tuple[str, str]:
    return en_digits(n, grouped=n >= 1000 and rng.random() < 0.5), fr_digits(n)


def noun_phrase_typed(n: int, noun: corpus.Noun, adj: corpus.Adjective | None, en_number: str, fr_number: str) -> tuple[str, str]:
    """``corpus.noun_phrase`` with the count written as given ("20 red apples", "20 pommes rouges")."""
    en, fr = corpus.noun_phrase(n, noun, adj)
    return en.replace(corpus.en_cardinal(n), en_number, 1), fr.replace(corpus.fr_cardinal(n, feminine=noun.feminine), fr_number, 1)


def _gen_number(rng: random.Random) -> tuple[str, str]:
    n = corpus.sample_number(rng)
    en, fr = en_cardinal_spelled(n, _spelling(rng)), corpus.fr_cardinal(n)
    return (en, fr) if rng.random() < 0.5 else (corpus._capitalise(en), corpus._capitalise(fr))


def _gen_fragment(rng: random.Random) -> tuple[str, str]:
    kind = rng.random()
    if kind < 0.2:
        # "7:45" -> "7 h 45", "at 7:45" -> "à 7 h 45"
        hour, minute = rng.randint(1, 23), rng.randrange(0, 60, 5) if rng.random() < 0.7 else rng.randint(0, 59)
        en, fr = corpus.en_time(hour, minute), corpus.fr_time(hour, minute)
        return (f"at {en}", f"à {fr}") if rng.random() < 0.5 else (en, fr)
    noun, adj = rng.choice(corpus.NOUNS), corpus._sample_adjective(rng)
    if kind < 0.4:
        # "the red car" -> "la voiture rouge"
        en_np, fr_np = corpus.noun_phrase(1, noun, adj)
        en_np, fr_np = en_np.removeprefix("one "), fr_np.split(" ", 1)[1]
        article = "la" if noun.feminine else "le"
        en, fr = f"the {en_np}", corpus._elide(f"{article} {fr_np}")
    elif kind < 0.7:
        n = _count(rng, noun, digits=False)
        en, fr = noun_phrase_typed(n, noun, adj, en_cardinal_spelled(n, _spelling(rng)), corpus.fr_cardinal(n, feminine=noun.feminine))
    else:
        n = _count(rng, noun, digits=True)
        en, fr = noun_phrase_typed(n, noun, adj, *_digits_pair(rng, n))
    return (en, fr) if rng.random() < 0.85 else (corpus._capitalise(en), corpus._capitalise(fr))


def _gen_digits(rng: random.Random) -> tuple[str, str]:
    subject, verb, noun = rng.choice(corpus.SUBJECTS), rng.choice(corpus.VERBS), rng.choice(corpus.NOUNS)
    adj = corpus._sample_adjective(rng)
    n = _count(rng, noun, digits=True)
    en, fr = corpus.render_clause(subject, verb, n, noun, adj)
    en_n, fr_n = _digits_pair(rng, n)
    en = en.replace(f" {corpus.en_cardinal(n)} ", f" {en_n} ", 1)
    fr = fr.replace(f" {corpus.fr_cardinal(n, feminine=noun.feminine)} ", f" {fr_n} ", 1)
    return _typed_case(rng, *corpus.sentence(en, fr), p_lower=0.3, p_no_stop=0.3)


def render_price_digits(n: int, decimals: int | None, noun: corpus.Noun, adj: corpus.Adjective | None, grouped: bool = False) -> tuple[str, str]:
    """("The book costs 12.50 euros.", "Le livre coûte 12,50 euros.")."""
    en, fr = corpus.render_price(n, noun, adj)
    if decimals is not None and n == 1:
        raise ValueError("1.xx euros takes the singular in French: not written by this corpus")
    currency = "euro" if n == 1 else "euros"  # as render_price wrote it: only the number changes
    en = en.replace(f" {corpus.en_cardinal(n)} {currency}", f" {en_digits(n, decimals, grouped)} {currency}", 1)
    fr = fr.replace(f" {corpus.fr_cardinal(n)} {currency}", f" {fr_digits(n, decimals)} {currency}", 1)
    return en, fr


def _gen_price(rng: random.Random) -> tuple[str, str]:
    noun, adj = rng.choice(corpus.NOUNS), corpus._sample_adjective(rng)
    if rng.random() < 0.5:
        n, decimals = rng.randint(2, 999) if rng.random() < 0.8 else rng.randint(1_000, 9_999), rng.randint(0, 99)
    else:
        n, decimals = _digits_number(rng), None
    en, fr = render_price_digits(n, decimals, noun, adj, grouped=n >= 1000 and rng.random() < 0.5)
    return _typed_case(rng, en, fr, p_lower=0.3, p_no_stop=0.3)


def _gen_retyped(rng: random.Random) -> tuple[str, str]:
    categories = list(corpus.CATEGORY_WEIGHTS)
    category = rng.choices(categories, weights=[corpus.CATEGORY_WEIGHTS[c] for c in categories])[0]
    source, target = corpus._GENERATORS[category](rng)
    en, fr = _typed_case(rng, respell_numbers(rng, source), target)
    if en == source:  # nothing changed: change the case (the tidy form is the corpus's, not typed)
        if source[:1].islower():
            en, fr = corpus._capitalise(source), corpus._capitalise(target)
        else:
            en, fr = as_typed(source, target, lower=True, stop=source.endswith("."))
    return en, fr


_GENERATORS: dict[str, Callable[[random.Random], tuple[str, str]]] = {
    "number": _gen_number,
    "fragment": _gen_fragment,
    "digits": _gen_digits,
    "price": _gen_price,
    "retyped": _gen_retyped,
}


def typed_examples(n: int, seed: int, exclude: set[str] = frozenset()) -> list[Example]:
    """``n`` typed pairs with unique English sources not in ``exclude``, deterministic for ``seed``.

    The category of each example is ``typed-<kind>``. Sources have 1..corpus.MAX_TOKENS words.
    """
    return unique_examples(n, random.Random(seed), KIND_WEIGHTS, _GENERATORS, exclude, "typed")


def unique_examples(n: int, rng: random.Random, weights: dict[str, float],
                    generators: dict[str, Callable[[random.Random], tuple[str, str]]],
                    exclude: set[str], label: str) -> list[Example]:
    """``n`` pairs drawn from ``generators`` in the shares of ``weights``, with unique English
    sources of 1..corpus.MAX_TOKENS words not in ``exclude``; category ``<label>-<kind>``."""
    kinds = list(weights)
    shares = [weights[k] for k in kinds]
    seen = set(exclude)
    examples: list[Example] = []
    draws, max_draws = 0, 20 * n + 1_000
    while len(examples) < n:
        draws += 1
        if draws > max_draws:
            raise ValueError(f"could only draw {len(examples)} unique {label} pairs of {n} requested")
        kind = rng.choices(kinds, weights=shares)[0]
        source, target = generators[kind](rng)
        if source not in seen and 1 <= len(source.split()) <= corpus.MAX_TOKENS:
            seen.add(source)
            examples.append(Example(f"{label}-{kind}", source, target))
    return examples
