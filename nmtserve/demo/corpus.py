"""Deterministic synthetic English->French parallel corpus for the demo translation model.

(Over 600 lines because most of it is the corpus's tables: words, numbers and their French rules.)

Why synthetic: the demo model must be trainable on any machine without downloading a corpus
(no network at run time, no licensing questions, no multi-gigabyte archives). A generator with
a fixed seed gives the same data everywhere, so a trained model and its reported scores can be
reproduced exactly. The content is deliberately systematic -- the same English always maps to
the same French -- so that a small Transformer can reach high exact-match accuracy and the
serving stack can be tested against known answers.

Categories (``CATEGORY_WEIGHTS`` holds their share of the draws):

``cardinal``
    Numbers 0..999,999 in words, skewed toward small ones: "the number twenty-one" ->
    "le nombre vingt et un". English follows the American style (no "and", no commas,
    hyphens kept); French is num2words' traditional spelling ("quatre-vingt-dix").
``ordinal``
    "the twenty-first day" -> "le vingt et unième jour", "the first page" -> "la première
    page". The French ordinal is derived from the cardinal here, because num2words 0.5.14
    writes "quatre-vingtsième" / "deux centsième" for 80th / 200th.
``date``
    babel's ``full`` / ``long`` formats, years 1900..2099: "Tuesday, March 5, 2024" ->
    "mardi 5 mars 2024". The first of a month is written "1er" in French, which CLDR omits.
``sentence``
    A subject, a verb, a number, an optional adjective and a noun from a small closed
    vocabulary with French gender and number agreement: "I have one red apple." ->
    "J'ai une pomme rouge.", "We bought three small cats." -> "Nous avons acheté trois
    petits chats."
``time``
    "The train leaves at 7:45." -> "Le train part à 7 h 45."
``price``
    "The red car costs twelve thousand euros." -> "La voiture rouge coûte douze mille euros."
``compound``
    The long tail: two sentences joined by " and " / " et ", or a date followed by a
    sentence in the past: "On Tuesday, March 5, 2024, we bought seven chairs." ->
    "Le mardi 5 mars 2024, nous avons acheté sept chaises."

Every source has between ``MIN_TOKENS`` and ``MAX_TOKENS`` whitespace tokens, sources are
unique within a call, and all randomness comes from a ``random.Random(seed)`` instance.
Ambiguous English is always resolved the same way ("you" -> "vous", "they" -> "ils", 24-hour
times) so that each source has exactly one reference. The shares hold for corpora up to about
10^5 pairs; beyond that the smaller spaces (ordinals, times) run out of unseen sentences and
their share of the kept pairs drops.
"""

from __future__ import annotations

import calendar
import datetime as dt
import logging
import random
import re
from collections.abc import Callable
from functools import lru_cache
from typing import NamedTuple

from babel.dates import format_date
from num2words import num2words

logger = logging.getLogger(__name__)

MIN_TOKENS = 3
MAX_TOKENS = 40
MAX_NUMBER = 999_999
YEAR_RANGE = (1900, 2099)

# Shares of the draws per category (they sum to 1). Templated sentences dominate because they
# exercise agreement, the hardest part for the model; compounds give the long tail.
CATEGORY_WEIGHTS: dict[str, float] = {
    "cardinal": 0.18,
    "ordinal": 0.12,
    "date": 0.12,
    "sentence": 0.30,
    "time": 0.08,
    "price": 0.08,
    "compound": 0.12,
}


class Example(NamedTuple):
    """One generated pair together with the category that produced it."""

    category: str
    source: str
    target: str


# --------------------------------------------------------------------------------------------
# Numbers
# --------------------------------------------------------------------------------------------

# (low, high, weight): a log-like skew so that small numbers, which recur inside larger ones,
# are seen often, while every magnitude up to MAX_NUMBER still appears.
_NUMBER_BUCKETS: tuple[tuple[int, int, float], ...] = (
    (0, 20, 0.22),
    (21, 99, 0.26),
    (100, 999, 0.24),
    (1_000, 9_999, 0.14),
    (10_000, 99_999, 0.08),
    (100_000, MAX_NUMBER, 0.06),
)


# Share of draws of 100 or more rounded to one or two significant digits ("twelve thousand",
# "three hundred"): uniform draws almost never end in a bare "mille"/"cent", and a model that
# never saw one invents a tail ("douze mille douze euros").
ROUND_SHARE = 0.2


def sample_number(rng: random.Random, low: int = 0, high: int = MAX_NUMBER) -> int:
    """Draw an integer in [low, high] with the small-number skew of ``_NUMBER_BUCKETS``.

    A ``ROUND_SHARE`` of the draws of 100 or more is rounded down to one or two significant
    digits (kept within [low, high]).
    """
    buckets = [(max(lo, low), min(hi, high), w) for lo, hi, w in _NUMBER_BUCKETS]
    buckets = [b for b in buckets if b[0] <= b[1]]
    lo, hi, _ = rng.choices(buckets, weights=[w for _, _, w in buckets])[0]
    n = rng.randint(lo, hi)
    if n >= 100 and rng.random() < ROUND_SHARE:
        factor = 10 ** (len(str(n)) - rng.choice((1, 2)))
        n = max(low, n // factor * factor)
    return n


# Share of ordinal draws taken uniformly from 1..20: "first", "second", ... are irregular in
# both languages and the bucketed draw sees each of them too rarely ("le unième jour").
SMALL_ORDINAL_SHARE = 0.35


def sample_ordinal(rng: random.Random, highest: int) -> int:
    """An ordinal in [1, highest], a ``SMALL_ORDINAL_SHARE`` of them uniform in 1..20."""
    if rng.random() < SMALL_ORDINAL_SHARE:
        return rng.randint(1, min(20, highest))
    return sample_number(rng, low=1, high=highest)


def _americanise(words: str) -> str:
    # num2words writes British English ("one thousand, two hundred and five"); the corpus uses
    # the American form so each number has exactly one spelling.
    words = words.replace(",", "")
    return re.sub(r"\s+", " ", re.sub(r"\band\b", "", words)).strip()


# num2words spends ~0.25 ms per call in its generic splitter; composing from cached values
# below one thousand is ~50x faster and yields the same words (checked in the tests).
@lru_cache(maxsize=1_000)
def _en_below_1000(n: int) -> str:
    return _americanise(num2words(n, lang="en"))


@lru_cache(maxsize=1_000)
def _fr_below_1000(n: int) -> str:
    return num2words(n, lang="fr")


def en_cardinal(n: int) -> str:
    """English words for ``n``: 312 -> "three hundred twelve", 21 -> "twenty-one"."""
    _check_range(n)
    thousands, rest = divmod(n, 1000)
    if thousands == 0:
        return _en_below_1000(rest)
    words = f"{_en_below_1000(thousands)} thousand"
    return f"{words} {_en_below_1000(rest)}" if rest else words


def _fr_cardinal_masc(n: int) -> str:
    _check_range(n)
    thousands, rest = divmod(n, 1000)
    if thousands == 0:
        return _fr_below_1000(rest)
    if thousands == 1:
        words = "mille"  # never "un mille"
    else:
        # "vingt" and "cent" take the plural -s only at the very end of a number, so
        # "quatre-vingts" becomes "quatre-vingt mille" and "deux cents" "deux cent mille".
        words = re.sub(r"(vingt|cent)s$", r"\1", _fr_below_1000(thousands)) + " mille"
    return f"{words} {_fr_below_1000(rest)}" if rest else words


def _check_range(n: int) -> None:
    if not 0 <= n <= MAX_NUMBER:
        raise ValueError(f"number out of range 0..{MAX_NUMBER}: {n}")


def fr_cardinal(n: int, feminine: bool = False) -> str:
    """French words for ``n``; with ``feminine`` a final "un" becomes "une" (vingt et une)."""
    words = _fr_cardinal_masc(n)
    if feminine:
        # Only the units "un" at the very end agrees with the noun ("cent une pommes"); an
        # "un" before "mille" is ambiguous in usage and is avoided by the callers.
        words = re.sub(r"\bun$", "une", words)
    return words


def _fr_feminine_ambiguous(n: int) -> bool:
    """True when "un" precedes "mille" (21 000 pommes): usage varies, so such numbers are skipped."""
    return re.search(r"\bun mille\b", _fr_cardinal_masc(n)) is not None


@lru_cache(maxsize=65_536)
def en_ordinal(n: int) -> str:
    """English ordinal words: 21 -> "twenty-first", 101 -> "one hundred first"."""
    return _americanise(num2words(n, lang="en", to="ordinal"))


_FR_ORDINAL_STEMS = {"un": "unième", "cinq": "cinquième", "neuf": "neuvième"}


def fr_ordinal(n: int, feminine: bool = False) -> str:
    """French ordinal words: 1 -> "premier"/"première", 21 -> "vingt et unième", 80 -> "quatre-vingtième".

    Built from the cardinal rather than num2words' ordinal, which is wrong for 80, 200, ...
    """
    if n < 1:
        raise ValueError(f"ordinal needs n >= 1, got {n}")
    if n == 1:
        return "première" if feminine else "premier"
    words = _fr_cardinal_masc(n)
    # The suffix attaches to the last word only ("vingt-cinq" -> "vingt-cinquième").
    head, last = _split_last_word(words)
    # The plural -s of "vingts"/"cents" disappears in the ordinal (quatre-vingtième).
    if last in ("vingts", "cents"):
        last = last[:-1]
    if last in _FR_ORDINAL_STEMS:
        last = _FR_ORDINAL_STEMS[last]
    elif last.endswith("e"):
        last = last[:-1] + "ième"
    else:
        last += "ième"
    return head + last


def _split_last_word(words: str) -> tuple[str, str]:
    cut = max(words.rfind(" "), words.rfind("-")) + 1
    return words[:cut], words[cut:]


# --------------------------------------------------------------------------------------------
# Dates and times
# --------------------------------------------------------------------------------------------


def sample_date(rng: random.Random) -> dt.date:
    """A uniformly drawn valid calendar date in ``YEAR_RANGE``."""
    year = rng.randint(*YEAR_RANGE)
    month = rng.randint(1, 12)
    day = rng.randint(1, calendar.monthrange(year, month)[1])
    return dt.date(year, month, day)


def en_date(date: dt.date, fmt: str) -> str:
    """English date: "Tuesday, March 5, 2024" (full) or "March 5, 2024" (long)."""
    return format_date(date, format=fmt, locale="en")


def fr_date(date: dt.date, fmt: str) -> str:
    """French date: "mardi 5 mars 2024" (full) or "5 mars 2024" (long); the 1st is "1er"."""
    text = format_date(date, format=fmt, locale="fr")
    if date.day == 1:
        # CLDR gives "1 mars"; written French uses the ordinal "1er mars".
        text = re.sub(r"(^|\s)1 ", r"\g<1>1er ", text, count=1)
    return text


def en_time(hour: int, minute: int) -> str:
    """24-hour clock digits: "7:45", "19:05"."""
    return f"{hour}:{minute:02d}"


def fr_time(hour: int, minute: int) -> str:
    """French typography: "7 h 45", "19 h 05", and "7 h" on the hour."""
    return f"{hour} h" if minute == 0 else f"{hour} h {minute:02d}"


# --------------------------------------------------------------------------------------------
# Closed vocabulary
# --------------------------------------------------------------------------------------------


class Noun(NamedTuple):
    en: str
    en_plural: str
    fr: str
    fr_plural: str
    feminine: bool


class Adjective(NamedTuple):
    en: str
    # French forms: masculine singular, feminine singular, masculine plural, feminine plural.
    fr_ms: str
    fr_fs: str
    fr_mp: str
    fr_fp: str
    before_noun: bool  # "petit" precedes the noun; colours follow it.


class Subject(NamedTuple):
    en: str
    fr: str
    person: str  # key into Verb.fr_forms


class Verb(NamedTuple):
    en: str  # base form ("have"); the 3rd person singular is en_third
    en_third: str
    fr_forms: dict[str, str]  # person -> conjugated French verb (with auxiliary when past)
    past: bool


NOUNS: tuple[Noun, ...] = (
    Noun("apple", "apples", "pomme", "pommes", True),
    Noun("chair", "chairs", "chaise", "chaises", True),
    Noun("book", "books", "livre", "livres", False),
    Noun("car", "cars", "voiture", "voitures", True),
    Noun("house", "houses", "maison", "maisons", True),
    Noun("cat", "cats", "chat", "chats", False),
    Noun("dog", "dogs", "chien", "chiens", False),
    Noun("box", "boxes", "boîte", "boîtes", True),
    Noun("pen", "pens", "stylo", "stylos", False),
    Noun("table", "tables", "table", "tables", True),
    Noun("bottle", "bottles", "bouteille", "bouteilles", True),
    Noun("bag", "bags", "sac", "sacs", False),
    Noun("flower", "flowers", "fleur", "fleurs", True),
    Noun("key", "keys", "clé", "clés", True),
    Noun("horse", "horses", "cheval", "chevaux", False),
    Noun("bird", "birds", "oiseau", "oiseaux", False),
)

ADJECTIVES: tuple[Adjective, ...] = (
    Adjective("red", "rouge", "rouge", "rouges", "rouges", False),
    Adjective("blue", "bleu", "bleue", "bleus", "bleues", False),
    Adjective("green", "vert", "verte", "verts", "vertes", False),
    Adjective("black", "noir", "noire", "noirs", "noires", False),
    Adjective("white", "blanc", "blanche", "blancs", "blanches", False),
    Adjective("yellow", "jaune", "jaune", "jaunes", "jaunes", False),
    Adjective("gray", "gris", "grise", "gris", "grises", False),
    Adjective("small", "petit", "petite", "petits", "petites", True),
)

SUBJECTS: tuple[Subject, ...] = (
    Subject("I", "je", "1s"),
    # "you" is always rendered "vous" so that each English sentence has one French answer.
    Subject("you", "vous", "2p"),
    Subject("we", "nous", "1p"),
    # "they" is always "ils" for the same reason.
    Subject("they", "ils", "3p"),
    Subject("she", "elle", "3s"),
    Subject("he", "il", "3s"),
)


def _avoir_past(participle: str) -> dict[str, str]:
    # Passé composé with "avoir"; the object follows the verb, so the participle never agrees.
    return {
        "1s": f"ai {participle}",
        "2p": f"avez {participle}",
        "1p": f"avons {participle}",
        "3p": f"ont {participle}",
        "3s": f"a {participle}",
    }


VERBS: tuple[Verb, ...] = (
    Verb("have", "has", {"1s": "ai", "2p": "avez", "1p": "avons", "3p": "ont", "3s": "a"}, False),
    Verb(
        "see",
        "sees",
        {"1s": "vois", "2p": "voyez", "1p": "voyons", "3p": "voient", "3s": "voit"},
        False,
    ),
    Verb(
        "want",
        "wants",
        {"1s": "veux", "2p": "voulez", "1p": "voulons", "3p": "veulent", "3s": "veut"},
        False,
    ),
    Verb("bought", "bought", _avoir_past("acheté"), True),
    Verb("sold", "sold", _avoir_past("vendu"), True),
    Verb("found", "found", _avoir_past("trouvé"), True),
    Verb("saw", "saw", _avoir_past("vu"), True),
)

# (English noun, French noun, feminine, highest sensible ordinal) for ordinal phrases. The
# article never elides: French ordinals start with a consonant, "onz-" or "huit-".
_ORDINAL_NOUNS: tuple[tuple[str, str, bool, int], ...] = (
    ("day", "jour", False, 365),
    ("century", "siècle", False, 21),
    ("chapter", "chapitre", False, 199),
    ("episode", "épisode", False, 999),
    ("page", "page", True, 9_999),
    ("line", "ligne", True, 9_999),
    ("time", "fois", True, 999),
    ("question", "question", True, 999),
    ("lesson", "leçon", True, 199),
    ("step", "étape", True, 99),
)


def noun(en: str) -> Noun:
    """The entry of NOUNS whose English is ``en`` (and so on for the other tables below)."""
    return next(n for n in NOUNS if n.en == en)


def adjective(en: str) -> Adjective:
    return next(a for a in ADJECTIVES if a.en == en)


def subject(en: str) -> Subject:
    return next(s for s in SUBJECTS if s.en == en)


def verb(en: str) -> Verb:
    return next(v for v in VERBS if v.en == en)


# (English template, French template) with "{t}" for the time.
_TIME_TEMPLATES: tuple[tuple[str, str], ...] = (
    ("The train leaves at {t}.", "Le train part à {t}."),
    ("The bus leaves at {t}.", "Le bus part à {t}."),
    ("The meeting starts at {t}.", "La réunion commence à {t}."),
    ("The film starts at {t}.", "Le film commence à {t}."),
    ("The shop opens at {t}.", "Le magasin ouvre à {t}."),
    ("The shop closes at {t}.", "Le magasin ferme à {t}."),
    ("The museum closes at {t}.", "Le musée ferme à {t}."),
    ("We arrive at {t}.", "Nous arrivons à {t}."),
    ("We leave at {t}.", "Nous partons à {t}."),
    ("I wake up at {t}.", "Je me réveille à {t}."),
    ("She arrived at {t}.", "Elle est arrivée à {t}."),
    ("He arrived at {t}.", "Il est arrivé à {t}."),
)

_DATE_TEMPLATES: tuple[tuple[str, str], ...] = (
    ("{d}", "{d}"),
    ("The meeting is on {d}.", "La réunion a lieu le {d}."),
    ("She was born on {d}.", "Elle est née le {d}."),
)


# --------------------------------------------------------------------------------------------
# Phrase builders
# --------------------------------------------------------------------------------------------


def _capitalise(text: str) -> str:
    return text[:1].upper() + text[1:]


def _elide(words: str) -> str:
    """Apply French elision: "je ai" -> "j'ai", "le oiseau" -> "l'oiseau"."""
    # Only "je", "le" and "la" occur before a vowel in this vocabulary; "onze"/"onzième" and
    # "huit"/"huitième" never elide (h aspiré / traditional exception), and "un"/"une" only
    # start a phrase after a verb, never after an article.
    return re.sub(r"\b(je|le|la) (?=[aeiouéèê])(?!onz|huit)", lambda m: m.group(1)[0] + "'", words)


def noun_phrase(n: int, noun: Noun, adj: Adjective | None) -> tuple[str, str]:
    """("three red apples", "trois pommes rouges") for a count ``n`` >= 1."""
    plural = n > 1
    en_noun = noun.en_plural if plural else noun.en
    fr_noun = noun.fr_plural if plural else noun.fr
    en = f"{en_cardinal(n)} {adj.en} {en_noun}" if adj else f"{en_cardinal(n)} {en_noun}"
    fr_num = fr_cardinal(n, feminine=noun.feminine)
    if adj is None:
        return en, f"{fr_num} {fr_noun}"
    fr_adj = _adjective_form(adj, noun.feminine, plural)
    fr = f"{fr_num} {fr_adj} {fr_noun}" if adj.before_noun else f"{fr_num} {fr_noun} {fr_adj}"
    return en, fr


def _adjective_form(adj: Adjective, feminine: bool, plural: bool) -> str:
    if feminine:
        return adj.fr_fp if plural else adj.fr_fs
    return adj.fr_mp if plural else adj.fr_ms


def _sample_count(rng: random.Random, noun: Noun) -> int:
    """A count >= 1 for ``noun``; feminine nouns skip "vingt et un mille" style numbers."""
    while True:
        n = sample_number(rng, low=1)
        if not (noun.feminine and _fr_feminine_ambiguous(n)):
            return n


def _sample_adjective(rng: random.Random) -> Adjective | None:
    # About a third of noun phrases carry no adjective, so bare "number + noun" is common.
    return None if rng.random() < 0.35 else rng.choice(ADJECTIVES)


def render_clause(
    subject: Subject, verb: Verb, n: int, noun: Noun, adj: Adjective | None
) -> tuple[str, str]:
    """A lower-case sentence body without final punctuation.

    ``render_clause(I, have, 312, apple, red)`` -> ("I have three hundred twelve red apples",
    "j'ai trois cent douze pommes rouges").
    """
    en_np, fr_np = noun_phrase(n, noun, adj)
    en_verb = verb.en_third if subject.person == "3s" else verb.en
    en = f"{subject.en} {en_verb} {en_np}"
    fr = _elide(f"{subject.fr} {verb.fr_forms[subject.person]} {fr_np}")
    return en, fr


def clause(rng: random.Random, past_only: bool = False) -> tuple[str, str]:
    """A random ``render_clause``; ``past_only`` restricts it to verbs in the past tense."""
    subject = rng.choice(SUBJECTS)
    verb = rng.choice([v for v in VERBS if v.past or not past_only])
    noun = rng.choice(NOUNS)
    return render_clause(subject, verb, _sample_count(rng, noun), noun, _sample_adjective(rng))


# --------------------------------------------------------------------------------------------
# Category generators: each returns one (english, french) pair.
# --------------------------------------------------------------------------------------------


# The render_* functions write one pair from its parts; the _gen_* functions draw the parts.
# The showcase sentences (showcase.py) are rendered by the same functions, so their references
# come from the generator, not from a model.


def render_cardinal(n: int, imperative: bool) -> tuple[str, str]:
    """("the number twelve", "le nombre douze") or its "Write the number ..." form."""
    # A frame is needed because a bare number can be a single token (MIN_TOKENS is 3).
    if imperative:
        return f"Write the number {en_cardinal(n)}.", f"Écrivez le nombre {fr_cardinal(n)}."
    return f"the number {en_cardinal(n)}", f"le nombre {fr_cardinal(n)}"


# Frames of a score sentence: (English, French) with "{a}" and "{b}" for the two numbers.
SCORE_FRAMES: tuple[tuple[str, str], ...] = (
    ("The score is {a} to {b}.", "Le score est de {a} à {b}."),
    ("The final score was {a} to {b}.", "Le score final était de {a} à {b}."),
    ("The match ended {a} to {b}.", "Le match s'est terminé sur le score de {a} à {b}."),
    ("The result was {a} to {b}.", "Le résultat était de {a} à {b}."),
    ("They lost {a} to {b}.", "Ils ont perdu {a} à {b}."),
)


def render_score(a: int, b: int, frame: int = 0) -> tuple[str, str]:
    """("The score is three to zero.", "Le score est de trois à zéro.") for ``SCORE_FRAMES[frame]``."""
    en, fr = SCORE_FRAMES[frame]
    return en.format(a=en_cardinal(a), b=en_cardinal(b)), fr.format(a=fr_cardinal(a), b=fr_cardinal(b))


# Share of cardinal draws that are a score. "zero" occurs nowhere else but in "the number
# zero", two sentences in all, so the score sentences must carry it: each side is zero a
# SCORE_ZERO_SHARE of the time, and the sentence space (5 frames x 100 x 100; 995 of them hold a zero) is large enough
# that the held-out sets cannot take most of it. (With 0..20 and one frame there were 441
# sentences: the training split kept about 400 of 400k pairs, and the model garbled scores.)
SCORE_SHARE = 0.25
SCORE_ZERO_SHARE = 0.2


def _score_side(rng: random.Random) -> int:
    if rng.random() < SCORE_ZERO_SHARE:
        return 0
    return rng.randint(1, 20) if rng.random() < 0.6 else rng.randint(21, 99)


def _gen_cardinal(rng: random.Random) -> tuple[str, str]:
    if rng.random() < SCORE_SHARE:
        return render_score(_score_side(rng), _score_side(rng), rng.randrange(len(SCORE_FRAMES)))
    n = sample_number(rng)
    return render_cardinal(n, imperative=rng.random() >= 0.7)


# Frames around an ordinal phrase: (English, French) with "{}" for the phrase.
ORDINAL_FRAMES: dict[str, tuple[str, str]] = {
    "bare": ("{}", "{}"),
    "this": ("This is {}.", "C'est {}."),
    "was": ("It was {}.", "C'était {}."),
}


def render_ordinal(n: int, noun: str, frame: str) -> tuple[str, str]:
    """("the first day", "le premier jour") for an English noun of ``_ORDINAL_NOUNS``."""
    _, fr_noun, feminine, _ = next(entry for entry in _ORDINAL_NOUNS if entry[0] == noun)
    article = "la" if feminine else "le"
    en_frame, fr_frame = ORDINAL_FRAMES[frame]
    en = f"the {en_ordinal(n)} {noun}"
    fr = f"{article} {fr_ordinal(n, feminine)} {fr_noun}"
    return en_frame.format(en), fr_frame.format(fr)


def _gen_ordinal(rng: random.Random) -> tuple[str, str]:
    en_noun, _, _, highest = rng.choice(_ORDINAL_NOUNS)
    n = sample_ordinal(rng, highest)
    draw = rng.random()
    return render_ordinal(n, en_noun, "this" if draw < 0.3 else "was" if draw < 0.45 else "bare")


def _gen_date(rng: random.Random) -> tuple[str, str]:
    date = sample_date(rng)
    fmt = rng.choice(("full", "long"))
    en_tpl, fr_tpl = rng.choice(_DATE_TEMPLATES)
    return en_tpl.format(d=en_date(date, fmt)), fr_tpl.format(d=fr_date(date, fmt))


def sentence(en: str, fr: str) -> tuple[str, str]:
    """A clause as a sentence: capitalised, with a full stop."""
    return f"{_capitalise(en)}.", f"{_capitalise(fr)}."


def _gen_sentence(rng: random.Random) -> tuple[str, str]:
    return sentence(*clause(rng))


def render_time(hour: int, minute: int, template: int) -> tuple[str, str]:
    """("The train leaves at 7:45.", "Le train part à 7 h 45.") for ``_TIME_TEMPLATES[template]``."""
    en_tpl, fr_tpl = _TIME_TEMPLATES[template]
    return en_tpl.format(t=en_time(hour, minute)), fr_tpl.format(t=fr_time(hour, minute))


def _gen_time(rng: random.Random) -> tuple[str, str]:
    hour = rng.randint(1, 23)
    # Mostly round five-minute times, as in real timetables, but every minute can occur.
    minute = rng.randrange(0, 60, 5) if rng.random() < 0.7 else rng.randint(0, 59)
    return render_time(hour, minute, rng.randrange(len(_TIME_TEMPLATES)))


def _gen_price(rng: random.Random) -> tuple[str, str]:
    noun = rng.choice(NOUNS)
    adj = _sample_adjective(rng)
    return render_price(sample_number(rng, low=1), noun, adj)


def render_price(n: int, noun: Noun, adj: Adjective | None) -> tuple[str, str]:
    """("The red car costs twelve thousand euros.", "La voiture rouge coûte douze mille euros.")."""
    en_np = f"{adj.en} {noun.en}" if adj else noun.en
    if adj is None:
        fr_np = noun.fr
    elif adj.before_noun:
        fr_np = f"{_adjective_form(adj, noun.feminine, False)} {noun.fr}"
    else:
        fr_np = f"{noun.fr} {_adjective_form(adj, noun.feminine, False)}"
    article = "la" if noun.feminine else "le"
    currency = "euro" if n == 1 else "euros"  # the same word in both languages
    en = f"The {en_np} costs {en_cardinal(n)} {currency}."
    # "euro" is masculine, so the count keeps its masculine form ("vingt et un euros").
    fr = _capitalise(_elide(f"{article} {fr_np} coûte {fr_cardinal(n)} {currency}."))
    return en, fr


# (English opener, French opener) with "{o}" for the ordinal and "{o_f}" for its feminine.
# "century" has 21 ordinals x 3 frames in the ordinal category: the held-out sets took most of
# them, so the opener gives it a large space ("Au" is "à le").
_ORDINAL_OPENERS: tuple[tuple[str, str, int], ...] = (
    ("On the {o} day", "Le {o} jour", 365),
    ("For the {o} time", "Pour la {o_f} fois", 99),
    ("In the {o} century", "Au {o} siècle", 21),
)


def _gen_compound(rng: random.Random) -> tuple[str, str]:
    kind = rng.random()
    if kind < 0.4:
        en1, fr1 = clause(rng)
        en2, fr2 = clause(rng)
        return f"{_capitalise(en1)} and {en2}.", f"{_capitalise(fr1)} et {fr2}."
    if kind < 0.6:
        # An ordinal inside a sentence: "On the first day, we bought seven chairs." ->
        # "Le premier jour, nous avons acheté sept chaises."
        en_open, fr_open, highest = rng.choice(_ORDINAL_OPENERS)
        n = sample_ordinal(rng, highest)
        en_c, fr_c = clause(rng, past_only=True)
        en_o = en_open.format(o=en_ordinal(n))
        fr_o = fr_open.format(o=fr_ordinal(n), o_f=fr_ordinal(n, feminine=True))
        return f"{en_o}, {en_c}.", f"{fr_o}, {fr_c}."
    # A date needs a past-tense clause to read naturally ("On ..., we bought ...").
    date = sample_date(rng)
    fmt = rng.choice(("full", "long"))
    return render_dated(date, fmt, clause(rng, past_only=True))


def render_dated(date: dt.date, fmt: str, past_clause: tuple[str, str]) -> tuple[str, str]:
    """("On Tuesday, March 5, 2024, we bought seven chairs.", "Le mardi 5 mars 2024, nous ...")."""
    en_c, fr_c = past_clause
    return f"On {en_date(date, fmt)}, {en_c}.", f"Le {fr_date(date, fmt)}, {fr_c}."


_GENERATORS: dict[str, Callable[[random.Random], tuple[str, str]]] = {
    "cardinal": _gen_cardinal,
    "ordinal": _gen_ordinal,
    "date": _gen_date,
    "sentence": _gen_sentence,
    "time": _gen_time,
    "price": _gen_price,
    "compound": _gen_compound,
}


# --------------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------------


_RETRIES_PER_CATEGORY = 8


def _length_ok(source: str) -> bool:
    return MIN_TOKENS <= len(source.split()) <= MAX_TOKENS


def generate_examples(n: int, seed: int) -> list[Example]:
    """``n`` examples with unique English sources, deterministic for ``seed``.

    The stream is prefix-stable: the first k examples are the same for any n >= k, which is
    what lets ``build_splits`` keep its test set fixed when the training size changes.
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    rng = random.Random(seed)
    categories = list(CATEGORY_WEIGHTS)
    weights = [CATEGORY_WEIGHTS[c] for c in categories]
    seen: set[str] = set()
    examples: list[Example] = []
    # The bound turns a request larger than the sentence space into an error, not a hang.
    max_draws = 20 * n + 1_000
    draws = 0
    while len(examples) < n:
        category = rng.choices(categories, weights=weights)[0]
        # Retrying inside the category keeps its share near CATEGORY_WEIGHTS even though
        # small categories (ordinals, times) produce duplicates more often than the others.
        for _ in range(_RETRIES_PER_CATEGORY):
            if draws >= max_draws:
                raise ValueError(f"could only draw {len(examples)} unique pairs of {n} requested")
            draws += 1
            source, target = _GENERATORS[category](rng)
            if source not in seen and _length_ok(source):
                seen.add(source)
                examples.append(Example(category, source, target))
                break
    logger.debug("drew %d unique examples in %d draws (seed %d)", n, draws, seed)
    return examples


def generate_pairs(n: int, seed: int) -> list[tuple[str, str]]:
    """``n`` (english, french) pairs, unique by English source, deterministic for ``seed``."""
    return [(ex.source, ex.target) for ex in generate_examples(n, seed)]


def build_splits(
    n_train: int, n_valid: int, n_test: int, seed: int
) -> dict[str, list[tuple[str, str]]]:
    """Train/valid/test splits whose English sources are pairwise disjoint.

    All splits come from one deduplicated stream, test first, then valid, then train, so the
    test and valid sets depend only on (seed, n_test, n_valid) and never on n_train.
    """
    pairs = generate_pairs(n_test + n_valid + n_train, seed)
    splits = {
        "test": pairs[:n_test],
        "valid": pairs[n_test : n_test + n_valid],
        "train": pairs[n_test + n_valid :],
    }
    logger.info(
        "synthetic corpus (seed %d): %d train, %d valid, %d test",
        seed,
        len(splits["train"]),
        len(splits["valid"]),
        len(splits["test"]),
    )
    return splits
