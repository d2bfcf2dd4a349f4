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

Two more need more than the texts:

* **A content word nothing attended to** (``omitted_words``): with the decoder's alignments, a
  source word that is not punctuation, a number (the number check covers those), a tag or a
  function word of the source language (``function_words``: the lists in
  ``nmtserve/function_words/``) and that no target token attended to most may be missing.
* **Degenerate output** (``degenerate``): a block of words written over and over ("six. six.
  six."), or the source copied into the translation.

The figures (how many dropped translations it catches, how many right ones it flags) are measured
on the demo's held-out joined set by ``bench/omission.py``; the thresholds are chosen there.
Dependency-free but for num2words, optional: without it (or for a language it does not know)
only digits are compared.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from functools import lru_cache
from importlib import resources

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


@lru_cache(maxsize=64)
def _spelled(language: str | None) -> tuple[dict[tuple[str, ...], int], dict[str, int], frozenset[str],
                                           dict[str, str]] | None:
    """(the words of each number under 1,000 in ``language`` (joiners left out) -> its value,
    the words that multiply ("thousand", "mille", "million") -> by how much, the joiners, the
    words that end an ordinal -> the cardinal word they stand for ("sixth" -> "six", "unième" ->
    "un", "millième" -> "mille")), from num2words; None where it is missing or does not know the
    language."""
    vocabulary = number_words(language)
    if vocabulary is None or not language:
        return None
    from num2words import num2words  # number_words found it

    code = language.split("_")[0].split("-")[0].lower()
    joiners = vocabulary[1]
    table: dict[tuple[str, ...], int] = {}
    try:
        for n in range(1000):
            table.setdefault(tuple(w for w in _WORD.findall(num2words(n, lang=code).lower()) if w not in joiners), n)
        multipliers = {}
        for m in (1000, 10**6, 10**9):
            words = [w for w in _WORD.findall(num2words(m, lang=code).lower()) if w not in joiners]
            multipliers[words[-1]] = m
            multipliers.setdefault(words[-1] + "s", m)  # "millions", "milliards"
    except (NotImplementedError, OverflowError, KeyError, AttributeError, TypeError, ValueError):
        return None
    one = [w for w in _WORD.findall(num2words(1, lang=code).lower())]
    for word in _EXTRA_WORDS.get(code, ()):  # "une", and "vingt et une" as "vingt et un"
        for key, value in list(table.items()):
            if len(one) == 1 and one[0] in key:
                table.setdefault(tuple(word if w == one[0] else w for w in key), value)
    ordinals: dict[str, str] = {}
    try:
        for n in (*range(1, 101), 1000, 10**6):
            spelled = _WORD.findall(num2words(n, lang=code, to="ordinal").lower())
            cardinal = [w for w in _WORD.findall(num2words(n, lang=code).lower()) if w not in joiners]
            if spelled and cardinal and spelled[-1] not in vocabulary[0]:
                ordinals.setdefault(spelled[-1], cardinal[-1])
    except (NotImplementedError, OverflowError, KeyError, AttributeError, TypeError, ValueError):
        pass
    return table, multipliers, joiners, ordinals


class Ordinal(int):
    """An ordinal's value ("fifteenth", "quinzième": 15): it equals another ordinal of that value,
    never the cardinal ("quatre cent vingt-huitième siècle" does not hold "428 bottles")."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Ordinal) and int(self) == int(other)

    def __ne__(self, other: object) -> bool:
        return not self == other

    def __hash__(self) -> int:
        return hash(("ordinal", int(self)))

    def __repr__(self) -> str:
        return f"Ordinal({int(self)})"


@lru_cache(maxsize=1024)
def _values(text: str, language: str | None) -> tuple[tuple[int, str], ...] | None:
    """``number_values``, kept: WARNING's checks read each text more than once."""
    values = number_values(text, language)
    return None if values is None else tuple(values)


def number_values(text: str, language: str | None) -> list[tuple[int, str]] | None:
    """The numbers ``text`` holds, each (its value, as written): digit runs ("12 000" and "12,000"
    are 12000; "7:45" is 7 and 45; "0" is zero, but "7:00"'s zeros do not count: it is "7 h" in
    French) and runs of the language's number words read as a reader would ("three hundred
    seventy-five" is 375, "vingt et un" 21, "six and seven" 6 and 7, "zero" 0), an ordinal as an
    ``Ordinal`` ("the fifty-first day": Ordinal(51); "first" and "second" alone are not read);
    None for a language num2words does not know, or a run of number words it cannot read (German
    compounds: the caller falls back on counting mentions)."""
    values = []
    for match in _DIGITS.finditer(text):
        digits = "".join(ch for ch in match.group() if ch.isdigit())
        if int(digits) or match.group() == "0":  # "0" alone is zero; "7:00"'s "00" is not a number
            values.append((int(digits), match.group()))
    spelled = _spelled(language)
    if spelled is None:
        return None
    table, multipliers, joiners, ordinals = spelled
    words = number_words(language)[0]  # type: ignore[index]  # _spelled found it
    tokens = re.findall(r"[^\W\d_]+|\S", text.lower())
    run: list[str] = []
    for token in [*tokens, "."]:
        if token in words or token in multipliers or (run and (token in joiners or token == "-")):
            run.append(token)
            continue
        ordinal = ordinals.get(token) or (ordinals.get(token[:-1]) if token.endswith("s") else None)
        while run and (run[-1] in joiners or run[-1] == "-") and not ordinal:  # "six and" before a word
            run.pop()
        if ordinal and (run or table.get((ordinal,), 3) >= 3 or ordinal in multipliers):
            # An ordinal is its number ("the three hundred eighty-sixth time" holds 386), but
            # "first" and "second" ("at first", "a second") alone are words like any other.
            run.append(token)
            kept = [i for i, w in enumerate(run) if w not in joiners and w != "-"]
            read = _read_run([run[i] for i in kept[:-1]] + [ordinal], table, multipliers)
            if read is None:  # "hundredth": an ordinal this table cannot read is left out
                run = []
                continue
            read[-1] = (Ordinal(read[-1][0]), *read[-1][1:])  # "six and seventh": 6, then the 7th
        elif run:
            kept = [i for i, w in enumerate(run) if w not in joiners and w != "-"]
            read = _read_run([run[i] for i in kept], table, multipliers)
        else:
            continue
        if read is None:
            return None
        for value, first, last in read:
            shown = run[kept[first]: kept[last - 1] + 1]
            values.append((value, " ".join(shown).replace(" - ", "-")))
        run = []
    return values


def _read_run(words: list[str], table: dict[tuple[str, ...], int],
              multipliers: dict[str, int]) -> list[tuple[int, int, int]] | None:
    """The numbers of a run of number words, each (value, first word, end): the longest group
    under 1,000 at each point, times the multiplier after it; a group joins the number before it
    when its multiplier is smaller ("twenty three thousand" + "eight hundred" = 23800), else
    starts a new one. None when a word cannot be read there."""
    out: list[tuple[int, int, int]] = []
    total, last, start = 0, 0, 0  # the number being read, its last group's multiplier (0: none yet), its first word
    i = 0
    while i < len(words):
        value, j = None, i
        for end in range(min(len(words), i + 6), i, -1):
            group = tuple(words[i:end])
            # "quatre-vingt mille" and "deux cent un" drop the plural s of "quatre-vingts", "deux
            # cents" (and a slip writes "cents" alone): a group reads with or without it.
            tail = group[-1]
            forms = (group, (*group[:-1], tail[:-1] if tail.endswith("s") else tail + "s"))
            if (found := next((table[f] for f in forms if f in table), None)) is not None:
                value, j = found, end
                break
        if value is None and words[i] not in multipliers:
            return None
        multiplier = 1
        if j < len(words) and words[j] in multipliers:
            multiplier = multipliers[words[j]]
            j += 1
        part = (1 if value is None else value) * multiplier
        if last and multiplier < last:
            total += part
        else:
            if last:
                out.append((total, start, i))
            total, start = part, i
        last, i = multiplier, j
    if last:
        out.append((total, start, i))
    return [v for v in out if v[0] or v[2] - v[1] == 1]  # "zero" alone is a number


def missing_numbers(source: str, translation: str, source_language: str | None = None,
                    target_language: str | None = None) -> str:
    """"" when every number of ``source`` is in ``translation``; else which are not: a number of
    the source (in digits or words, ``number_values``) whose value the translation does not hold
    (in digits or words), or where the words cannot be read, digits (1-9) of the source missing
    or fewer mentions of numbers (digits or words) than the source's."""
    have, get = _values(source, source_language), _values(translation, target_language)
    if have is not None and get is not None:
        lost = Counter(v for v, _ in have) - Counter(v for v, _ in get)
        if lost:
            written = {v: w for v, w in have}
            named = ", ".join(f"'{written[v]}'" for v in sorted(lost.elements(), key=list(written).index))
            return f"the source's numbers {named} are not in the translation" if sum(lost.values()) > 1 \
                else f"the source's number {named} is not in the translation"
        return ""
    lost = nonzero_digits(source) - nonzero_digits(translation)
    if lost:
        return "digits of the source are missing (" + ", ".join(sorted(lost.elements())) + ")"
    # Without the target's number words only the digits can be compared.
    have = mentions(source, source_language if number_words(target_language) is not None else None)
    get = mentions(translation, target_language)
    return f"the source mentions {have} numbers, the translation {get}" if get < have else ""


def extra_numbers(source: str, translation: str, source_language: str | None = None,
                  target_language: str | None = None) -> str:
    """"" unless ``translation`` holds a number (``number_values``) that ``source`` has nowhere: a
    model that lost its way writes one it knows ("et douze clés" for "wooden keys"). One is left
    out: "un", "une", "one" are articles and pronouns as often as numbers; a number of the source
    said again is not counted (a loop is ``degenerate``'s, and "deux par deux" says two twice)."""
    have, get = _values(source, source_language), _values(translation, target_language)
    if have is None or get is None:
        return ""
    known = {v for v, _ in have}
    extra = list(dict.fromkeys(v for v, _ in get if v != 1 and v not in known))  # a number said again is a loop's
    if not extra:
        return ""
    written = {v: w for v, w in get}
    named = ", ".join(f"'{written[v]}'" for v in extra)
    return f"the translation has the numbers {named}, which the source has not" if len(extra) > 1 \
        else f"the translation has the number {named}, which the source has not"


def missing_terms(translation: str, terms: Sequence[Sequence[str]]) -> list[str]:
    """The terms (each its renderings, any one will do) none of whose renderings is in
    ``translation``, each named by its first rendering: a term the length limit cut off, which
    constrained decoding otherwise always writes."""
    text = " ".join(translation.split())
    return [term[0] for term in terms if term and not any(" ".join(t.split()) in text for t in term)]


# Source words (lower-cased) that may be named without a function word list: clitics after an
# apostrophe ("I'm", "we'll", "l'", "d'").
_CLITICS = frozenset({"s", "m", "ll", "re", "ve", "d", "l", "j", "n", "qu", "c"})
_APOSTROPHE = re.compile(r"['\u2019]")
_EDGES = re.compile(r"^[^\w<]+|[^\w>]+$")  # punctuation around a word (a tag's brackets stay)
_TAG = re.compile(r"^(?:<[^<>]*>|\{\d+\}|%\w|\$\{?\w+\}?)$")  # <b>, </x1>, <x2/>, {1}, %s, $name


@lru_cache(maxsize=64)
def _word_lists(language: str | None) -> tuple[frozenset[str], tuple[tuple[str, ...], ...]] | None:
    """(the function words, the phrases) of ``nmtserve/function_words/<code>.txt``: a line of one
    word is a function word; a line of several ("good morning") a phrase a translation often
    renders by one word ("Bonjour"), counted as one content word."""
    if not language:
        return None
    code = language.split("_")[0].split("-")[0].lower()
    if not code.isalpha():
        return None
    try:
        text = resources.files("nmtserve").joinpath("function_words", f"{code}.txt").read_text(encoding="utf-8")
    except (FileNotFoundError, OSError):
        return None
    lines = [w for line in text.splitlines() if (w := " ".join(line.split("#")[0].lower().split()))]
    return (frozenset(w for w in lines if " " not in w),
            tuple(sorted((tuple(w.split()) for w in lines if " " in w), key=len, reverse=True)))


@lru_cache(maxsize=64)
def _phrases_by_first_word(language: str | None) -> dict[str, tuple[tuple[str, ...], ...]]:
    """The phrases of ``_word_lists`` by their first word, the longest first."""
    out: dict[str, list[tuple[str, ...]]] = {}
    for phrase in (_word_lists(language) or ((), ()))[1]:
        out.setdefault(phrase[0], []).append(phrase)
    return {first: tuple(found) for first, found in out.items()}


def function_words(language: str | None) -> frozenset[str] | None:
    """The function words of ``language`` (its ISO 639-1 code, "en"; "pt_BR" reads pt), from
    ``nmtserve/function_words/<code>.txt``; None for a language without a list."""
    lists = _word_lists(language)
    return None if lists is None else lists[0]


def content_units(source: str, language: str | None) -> list[tuple[int, ...]]:
    """The content words of ``source``, each as the positions (from 0, over its whitespace-separated
    words) it takes: one, or several for a phrase of the list ("good morning"). A content word
    has a letter and is not a number (digits or the language's number words: the number check
    covers those), a tag (``<b>``, ``{1}``, ``%s``) or a function word of the language (an elided
    form counts by its parts: "I'm" is two function words). [] for a language without a list."""
    return list(_units(source, language))


# WARNING's checks read each text more than once (``omitted_words``, ``fewer_content_words``), and
# every served sentence goes through them: a text's units, a word's plain form and its kind are
# kept (bounded, least recently used first).
@lru_cache(maxsize=1024)
def _units(source: str, language: str | None) -> tuple[tuple[int, ...], ...]:
    if _word_lists(language) is None:
        return ()
    phrases = _phrases_by_first_word(language)
    raw_words = source.split()
    plain = [_plain(raw) for raw in raw_words]
    out: list[tuple[int, ...]] = []
    i = 0
    while i < len(plain):
        word = plain[i]
        phrase = next((p for p in phrases.get(word, ()) if tuple(plain[i:i + len(p)]) == p), None)
        if phrase:
            out.append(tuple(range(i, i + len(phrase))))
            i += len(phrase)
            continue
        i += 1
        kind = _word_kind(word, language)
        if kind == _NOT_A_WORD or (kind & _FUNCTION_WORD and not _named(raw_words, i - 1)) or kind & _NUMBER_WORD:
            continue
        out.append((i - 1,))
    return tuple(out)


@lru_cache(maxsize=16384)
def _plain(raw: str) -> str:
    """A word without the punctuation around it, lower-cased."""
    return _EDGES.sub("", raw).lower()


_NOT_A_WORD, _FUNCTION_WORD, _NUMBER_WORD = 4, 1, 2


@lru_cache(maxsize=16384)
def _word_kind(word: str, language: str | None) -> int:
    """``_NOT_A_WORD`` (empty, a tag, a digit in it, no letter), else the flags ``_FUNCTION_WORD``
    (its parts around an apostrophe are function words or clitics) and ``_NUMBER_WORD`` (its
    parts, also around hyphens, are number words of ``language``)."""
    if not word or _TAG.match(word) or any(ch.isdigit() for ch in word) or not any(ch.isalpha() for ch in word):
        return _NOT_A_WORD
    functions = (_word_lists(language) or (frozenset(), ()))[0]
    vocabulary = number_words(language)
    numbers = vocabulary[0] if vocabulary else frozenset()
    parts = [p for p in _APOSTROPHE.split(word) if p]
    kind = _FUNCTION_WORD if all(p in functions or p in _CLITICS for p in parts) else 0
    if all(part in numbers for p in parts for part in p.split("-") if part):
        kind |= _NUMBER_WORD
    return kind


# Function words that are also months: the month when capitalised inside a sentence ("in May")
# or before a day ("May 23, 1954"). Other capitalised function words stay function words: a
# run-on line starts its second sentence after a comma ("..., The red bird costs").
_MONTHS = frozenset({"may"})


def _named(words: list[str], i: int) -> bool:
    """Whether ``words[i]``, a function word, is a month ("in May", "May 23, 1954")."""
    word = _EDGES.sub("", words[i])
    if word.lower() not in _MONTHS or not word[:1].isupper() or word.isupper():  # text in capitals
        return False
    if i + 1 < len(words) and words[i + 1][:1].isdigit():
        return True
    return not (i == 0 or words[i - 1].rstrip("\"')»”’").endswith((".", "!", "?", ":")))


def content_words(source: str, language: str | None) -> list[int]:
    """The positions of ``source``'s content words (``content_units``; a phrase by its first)."""
    return [unit[0] for unit in content_units(source, language)]


def omitted_words(source: str, covered: Iterable[int], language: str | None, translation: str | None = None,
                  target_language: str | None = None) -> list[int]:
    """The positions of the content words of ``source`` (``content_units``: every word of a
    phrase) none of whose words is in ``covered``, the positions of the source words some target
    token attended to most: words the translation may have left out. With ``translation`` and a
    function word list for ``target_language``, none unless the translation also has fewer
    content words than the source: an attention maximum one word off ("born" -> "née"
    attending to "on") then leaves no content word without its counterpart, and is not an
    omission (measured: docs/measurements.md#omissions)."""
    units = content_units(source, language)
    seen = set(covered)
    missing = [i for unit in units if not seen.intersection(unit) for i in unit]
    if missing and translation is not None and function_words(target_language) is not None:
        if len(content_units(translation, target_language)) >= len(units):
            return []
    return missing


def fewer_content_words(source: str, translation: str, source_language: str | None,
                        target_language: str | None) -> str:
    """"" unless both languages have function word lists and ``translation`` has fewer content
    words (``content_units``: a phrase such as "good morning" is one) than ``source``: a word left
    out leaves one fewer, whether or not the alignment can say which (measured:
    docs/measurements.md#omissions)."""
    if function_words(target_language) is None:
        return ""
    want = len(content_units(source, source_language))
    got = len(content_units(translation, target_language))
    if got >= want:
        return ""
    return f"it has {got} content word{'s' if got != 1 else ''} where the source has {want}"


# Degenerate output: a block of at most LOOP_BLOCK words written LOOP_REPEATS times in a row (a
# block of LOOP_LONG_BLOCK words or more: twice) that the source does not repeat as often.
LOOP_BLOCK = 8
LOOP_REPEATS = 3
LOOP_LONG_BLOCK = 4
# A translation whose words are nearly all the source's own (COPY_SHARE of them, at least
# COPY_MIN_WORDS words with letters) copies the source instead of translating it.
COPY_SHARE = 0.8
COPY_MIN_WORDS = 3


def _plain_words(text: str) -> list[str]:
    return [w for w in map(_plain, text.split()) if w]


def longest_loop(words: Sequence[str]) -> tuple[int, int]:
    """(block length n, times in a row k) of the most repeated block of ``words`` that counts as a
    loop (k >= LOOP_REPEATS, or k >= 2 for n >= LOOP_LONG_BLOCK); (0, 0) when none; the first
    such block (shortest n, then earliest start) among equals.

    A block of n words at ``start`` comes k times in a row exactly when the word n places on
    matches for the (k - 1) n words from ``start``; so per n one pass from the end counts those
    runs, and k = 1 + run // n (linear in the words for each n; it runs on every translation)."""
    best = (0, 0)
    size = len(words)
    for n in range(1, min(LOOP_BLOCK, size // 2) + 1):
        run = [0] * (size - n + 1)  # run[i]: how many of words[i + j] == words[i + j + n] hold, j = 0, 1, ...
        for i in range(size - n - 1, -1, -1):
            if words[i] == words[i + n]:
                run[i] = run[i + 1] + 1
        for start in range(size - 2 * n + 1):
            k = 1 + run[start] // n
            if (k >= LOOP_REPEATS or (k >= 2 and n >= LOOP_LONG_BLOCK)) and k * n > best[0] * best[1]:
                best = (n, k)
    return best


def degenerate(source: str, translation: str) -> str:
    """"" or how ``translation`` is degenerate: a loop ("the words 'six' come 4 times in a row")
    the source does not have, or a copy of the source ("it copies the source")."""
    target = _plain_words(translation)
    n, k = longest_loop(target)
    if k:
        _, source_k = longest_loop(_plain_words(source))
        if k > source_k:
            block = " ".join(_loop_block(target, n, k))
            return f"the words '{block}' come {k} times in a row"
    words = [w for w in target if any(ch.isalpha() for ch in w)]
    source_words = set(_plain_words(source))
    if len(words) >= COPY_MIN_WORDS and sum(w in source_words for w in words) >= COPY_SHARE * len(words):
        return "it copies the source"
    return ""


def _loop_block(words: Sequence[str], n: int, k: int) -> Sequence[str]:
    for start in range(len(words) - k * n + 1):
        if all(words[start + j * n: start + (j + 1) * n] == words[start: start + n] for j in range(k)):
            return words[start: start + n]
    return words[:n]


def warning(source: str, translation: str, source_language: str | None = None, target_language: str | None = None,
            length_ratio: float = 0.0, score: float | None = None, score_floor: float = 0.0,
            terms: Sequence[Sequence[str]] = (), omitted: Sequence[int] = (),
            word_confidence: Sequence[float] = ()) -> str:
    """"" when nothing suggests the translation leaves part of ``source`` out or is wrong; else why
    it may ("may be incomplete: ...", "may be wrong: ...").

    ``length_ratio``: the model's usual target / source length in characters (0: unknown, the
    length is not checked); ``score`` the translation's score and ``score_floor`` the model's
    floor (``usual_score_floor``; 0: not checked); ``terms``: the terms the request asked for
    (``missing_terms``); ``omitted``: the positions of source words no target word attended to
    (``omitted_words``; needs the decoder's alignments), named when the translation has fewer
    content words than the source (``fewer_content_words``, which needs no alignment);
    ``word_confidence``: per word of ``translation`` its confidence (``nmtserve.confidence``;
    asked with CONFIDENCE), a word under ``confidence.UNSURE_WORD`` named as unsure."""
    if not source.strip():
        return ""
    wrong = []
    if score is not None and score_floor < 0 and score < score_floor:
        wrong.append(f"the model is unsure of it (score {score:.2f}, under this model's floor of {score_floor:.2f})")
    odd = degenerate(source, translation)
    if odd:
        wrong.append(odd)
    extra = extra_numbers(source, translation, source_language, target_language)
    if extra:
        wrong.append(extra)
    if word_confidence:
        from .confidence import UNSURE_WORD

        shown = translation.split()
        unsure = [f"'{_EDGES.sub('', shown[i]) or shown[i]}' ({c:.2f})" for i, c in enumerate(word_confidence)
                  if c < UNSURE_WORD and i < len(shown)]
        if unsure:
            wrong.append(f"the model is unsure of the word{'s' if len(unsure) > 1 else ''} {', '.join(unsure)}")
    unsure = "may be wrong: " + "; ".join(wrong) if wrong else ""
    lost = missing_numbers(source, translation, source_language, target_language)
    reasons = [lost] if lost else []
    reasons += [f"the term '{term}' is missing" for term in missing_terms(translation, terms)]
    words = source.split()
    named = ", ".join(f"'{_EDGES.sub('', words[i])}'" for i in omitted if 0 <= i < len(words))
    fewer = fewer_content_words(source, translation, source_language, target_language)
    if named:
        reasons.append(f"no word of the translation stands for {named}" + (f" ({fewer})" if fewer else ""))
    elif fewer:
        reasons.append(fewer)
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
