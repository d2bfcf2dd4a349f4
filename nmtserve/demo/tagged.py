"""Tagged sentences with known word correspondences: the measure of inline-markup placement.

A person's document has bold words and links inside sentences; a model trained without tags
cannot carry them, so the document path puts the tags back around the target words the decoder's
attention aligns to the tagged source words (``nmtserve.documents.align``). To measure that, this
module writes sentences of the demo corpus (``corpus.render_clause``, ``render_price``,
``render_time``) together with where each *unit* (a number, an adjective, a noun, a noun phrase,
a verb, a time) lies in the English and in its French reference, and wraps one or two units in
HTML or Markdown inline markup on both sides: the French side is where the tags belong.

    examples = tagged_examples(500, seed=11)
    examples[0].source   # 'I have three <b>red</b> apples.'
    examples[0].expected # "J'ai trois pommes <b>rouges</b>."

The sentences are drawn with their own seed (their plain forms may occur in the training data,
the markup never does: the model was trained without tags). Deterministic: the same seed gives
the same examples everywhere.
"""

from __future__ import annotations

import html
import random
import re
from dataclasses import dataclass

from . import corpus

# (opening, closing) inline markup per format; a link's target is fixed text.
HTML_TAGS = (("<b>", "</b>"), ("<i>", "</i>"), ('<a href="https://example.org/a?x=1&amp;y=2">', "</a>"),
             ("<em>", "</em>"), ('<span class="k">', "</span>"))
MARKDOWN_TAGS = (("**", "**"), ("*", "*"), ("[", "](https://example.org/a)"), ("~~", "~~"))
FORMATS = ("html", "markdown")

_TIME_NOUNS = {"train": "train", "bus": "bus", "meeting": "réunion", "film": "film", "shop": "magasin",
               "museum": "musée"}


@dataclass(frozen=True)
class Unit:
    """A stretch of words in both languages: character offsets [start, end) in each."""

    kind: str
    en: tuple[int, int]
    fr: tuple[int, int]


@dataclass(frozen=True)
class TaggedExample:
    format: str  # "html" or "markdown"
    plain_source: str
    plain_reference: str
    source: str  # the English with its units wrapped in markup
    expected: str  # the French reference with the same markup around the corresponding words
    units: tuple[Unit, ...]  # the wrapped units, outermost first
    tags: tuple[tuple[str, str], ...]  # each unit's (opening, closing) markup


@dataclass(frozen=True)
class Placement:
    """How one translated tagged sentence came out (``score``)."""

    text_kept: bool  # its text without markup is the plain sentence's translation
    valid: bool  # every tag once, opened before closed, pairs nested or apart
    exact: tuple[bool, ...]  # per unit: its tags wrap exactly the reference's words
    reference: bool  # the plain translation equals the reference (so ``exact`` is meaningful)


class _Text:
    """A sentence written piece by piece, remembering where named pieces start and end."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.spans: dict[str, tuple[int, int]] = {}

    def add(self, text: str, *names: str) -> None:
        start = sum(len(p) for p in self.parts)
        self.parts.append(text)
        for name in names:
            lo, hi = self.spans.get(name, (start, start + len(text)))
            self.spans[name] = (min(lo, start), max(hi, start + len(text)))

    def words(self, *items: tuple[str, ...]) -> None:
        """Each (text, *names) after a space: " costs twelve euros" in three named pieces."""
        for text, *names in items:
            self.add(" ")
            self.add(text, *names)

    @property
    def text(self) -> str:
        return "".join(self.parts)


def _clause(rng: random.Random) -> tuple[_Text, _Text]:
    """"We bought three red apples." with its units: number, adjective, noun, phrase, verb."""
    while True:
        subj = rng.choice(corpus.SUBJECTS)
        verb = rng.choice(corpus.VERBS)
        noun = rng.choice(corpus.NOUNS)
        n = rng.choice([*range(1, 13), 20, 21, 30, 40, 99, 100, 300, 1000])
        if not (noun.feminine and corpus._fr_feminine_ambiguous(n)):
            break
    adj = corpus._sample_adjective(rng)
    plural = n > 1
    en, fr = _Text(), _Text()
    en_verb = verb.en_third if subj.person == "3s" else verb.en
    en.add(corpus._capitalise(subj.en) + " ")
    en.add(en_verb, "verb")
    en.add(" ")
    en.add(corpus.en_cardinal(n), "number", "phrase")
    if adj:
        en.add(" ")
        en.add(adj.en, "adjective", "phrase")
    en.add(" ")
    en.add(noun.en_plural if plural else noun.en, "noun", "phrase")
    en.add(".")
    fr_subject_verb = corpus._capitalise(corpus._elide(f"{subj.fr} {verb.fr_forms[subj.person]}"))
    elided = "'" in fr_subject_verb
    if elided:  # "J'ai": the verb is not a word of its own
        fr.add(fr_subject_verb + " ")
        en.spans.pop("verb")
    else:
        head, _, tail = fr_subject_verb.partition(" ")
        fr.add(head + " ")
        fr.add(tail, "verb")
        fr.add(" ")
    fr.add(corpus.fr_cardinal(n, feminine=noun.feminine), "number", "phrase")
    fr_adj = corpus._adjective_form(adj, noun.feminine, plural) if adj else None
    fr_noun = noun.fr_plural if plural else noun.fr
    if fr_adj and adj.before_noun:
        fr.add(" ")
        fr.add(fr_adj, "adjective", "phrase")
    fr.add(" ")
    fr.add(fr_noun, "noun", "phrase")
    if fr_adj and not adj.before_noun:
        fr.add(" ")
        fr.add(fr_adj, "adjective", "phrase")
    fr.add(".")
    return en, fr


def _price(rng: random.Random) -> tuple[_Text, _Text]:
    """"The red car costs twelve euros." with its units."""
    noun = rng.choice(corpus.NOUNS)
    adj = corpus._sample_adjective(rng)
    n = rng.choice([*range(2, 13), 15, 20, 30, 50, 99, 100, 250, 1000, 5000])
    en, fr = _Text(), _Text()
    en.add("The ")
    if adj:
        en.add(adj.en, "adjective")
        en.add(" ")
    en.add(noun.en, "noun")
    en.words(("costs", "verb"), (corpus.en_cardinal(n), "number", "price"), ("euros", "price"))
    en.add(".")
    article = "La" if noun.feminine else "Le"
    fr_adj = corpus._adjective_form(adj, noun.feminine, False) if adj else None
    if fr_adj and adj.before_noun:
        fr.add(f"{article} ")
        fr.add(fr_adj, "adjective")
        fr.add(" ")
        fr.add(noun.fr, "noun")
    else:
        elided = corpus._capitalise(corpus._elide(f"{article.lower()} {noun.fr}"))
        if "'" in elided:  # "L'oiseau": the noun starts inside the word
            fr.add(elided[:2])
            fr.add(noun.fr, "noun")
        else:
            fr.add(f"{article} ")
            fr.add(noun.fr, "noun")
        if fr_adj:
            fr.add(" ")
            fr.add(fr_adj, "adjective")
    fr.words(("coûte", "verb"), (corpus.fr_cardinal(n), "number", "price"), ("euros", "price"))
    fr.add(".")
    return en, fr


def _time(rng: random.Random) -> tuple[_Text, _Text]:
    """"The train leaves at 7:45." with the noun and the time."""
    templates = [(i, e, f) for i, (e, f) in enumerate(corpus._TIME_TEMPLATES) if e.split()[1] in _TIME_NOUNS]
    _, en_tpl, fr_tpl = rng.choice(templates)
    hour, minute = rng.randint(1, 23), rng.choice([0, 5, 10, 15, 20, 30, 40, 45, 50, 55])
    en, fr = _Text(), _Text()
    for tpl, text, time, nouns in ((en_tpl, en, corpus.en_time(hour, minute), list(_TIME_NOUNS)),
                                   (fr_tpl, fr, corpus.fr_time(hour, minute), list(_TIME_NOUNS.values()))):
        words = tpl.split(" ")
        for i, word in enumerate(words):
            if i:
                text.add(" ")
            if word == "{t}.":
                text.add(time, "time")
                text.add(".")
            elif i == 1 and word in nouns:
                text.add(word, "noun")
            else:
                text.add(word)
    return en, fr


_KINDS = ((_clause, 0.6), (_price, 0.25), (_time, 0.15))


def _wrap(text: str, spans: list[tuple[int, int]], tags: list[tuple[str, str]]) -> str:
    """``text`` with tags[i] around spans[i] (nested or disjoint spans)."""
    inserts: list[tuple[int, int, int, str]] = []  # (offset, closers first, width order, marker)
    for (lo, hi), (open_, close) in zip(spans, tags, strict=True):
        inserts.append((lo, 1, -(hi - lo), open_))  # at one offset the wider span opens first
        inserts.append((hi, 0, hi - lo, close))  # ... and the narrower closes first
    out, last = [], 0
    for offset, _, _, marker in sorted(inserts):
        out.append(text[last:offset])
        out.append(marker)
        last = offset
    out.append(text[last:])
    return "".join(out)


def _relation(a: tuple[int, int], b: tuple[int, int]) -> str | None:
    """"apart", "nested" (either way), or None when the spans cross or are the same."""
    if a == b:
        return None
    if a[1] <= b[0] or b[1] <= a[0]:
        return "apart"
    if (a[0] <= b[0] and b[1] <= a[1]) or (b[0] <= a[0] and a[1] <= b[1]):
        return "nested"
    return None


def _choose_units(rng: random.Random, en: dict[str, tuple[int, int]], fr: dict[str, tuple[int, int]]) -> list[str]:
    """One unit, or two that nest or lie apart in both languages alike (never crossing),
    the wider first."""
    names = sorted(set(en) & set(fr))
    first = rng.choice(names)
    others = [u for u in names if u != first and _relation(en[first], en[u]) is not None
              and _relation(en[first], en[u]) == _relation(fr[first], fr[u])]
    if rng.random() < 0.5 or not others:
        return [first]
    pair = [first, rng.choice(others)]
    pair.sort(key=lambda u: -(en[u][1] - en[u][0]))
    return pair


def tagged_examples(n: int, seed: int) -> list[TaggedExample]:
    """``n`` tagged sentences, distinct sources, half HTML and half Markdown."""
    rng = random.Random(seed)
    out: list[TaggedExample] = []
    seen: set[str] = set()
    kinds, weights = zip(*_KINDS, strict=True)
    while len(out) < n:
        make = rng.choices(kinds, weights)[0]
        en, fr = make(rng)
        fmt = FORMATS[len(out) % 2]
        names = _choose_units(rng, en.spans, fr.spans)
        pool = HTML_TAGS if fmt == "html" else MARKDOWN_TAGS
        tags = rng.sample(pool, len(names))
        if fmt == "markdown" and len(names) == 2 and tags[0][0][0] == tags[1][0][0]:
            tags = [pool[0], pool[2]]  # "*" inside "**" reads as one marker run: bold around a link
        source = _wrap(en.text, [en.spans[u] for u in names], tags)
        if source in seen:
            continue
        seen.add(source)
        expected = _wrap(fr.text, [fr.spans[u] for u in names], tags)
        units = tuple(Unit(u, en.spans[u], fr.spans[u]) for u in names)
        out.append(TaggedExample(fmt, en.text, fr.text, source, expected, units, tuple(tags)))
    return out


def _strip(text: str, example: TaggedExample) -> str:
    """``text`` without the example's markup, its spaces made single."""
    if example.format == "html":
        text = html.unescape(re.sub(r"<[^>]+>", "", text))
    else:
        for open_, close in example.tags:
            text = text.replace(close, "").replace(open_, "")
    return " ".join(text.split())


def _spans(text: str, tags: tuple[tuple[str, str], ...]) -> list[tuple[int, int, int, int]] | None:
    """Each tag's (open start, open end, close start, close end) in ``text``; None unless each
    occurs exactly once, opened before it closes."""
    out = []
    for open_, close in tags:
        if open_ == close:
            found = [m.start() for m in re.finditer(re.escape(open_), text)]
            if len(found) != 2:
                return None
            first, second = found
        else:
            if text.count(open_) != 1 or text.count(close) != 1:
                return None
            first, second = text.index(open_), text.index(close)
        if second < first + len(open_):
            return None
        out.append((first, first + len(open_), second, second + len(close)))
    return out


def score(example: TaggedExample, output: str, plain_translation: str) -> Placement:
    """``output`` (the served translation of ``example.source``) against the plain sentence's
    translation and the reference's tags."""
    text_kept = _strip(output, example) == " ".join(plain_translation.split())
    got, want = _spans(output, example.tags), _spans(example.expected, example.tags)
    valid = got is not None and all(
        a[3] <= b[0] or b[3] <= a[0] or (a[0] <= b[0] and b[3] <= a[3]) or (b[0] <= a[0] and a[3] <= b[3])
        for i, a in enumerate(got) for b in got[i + 1:])
    exact = [False] * len(example.units)
    if valid and got is not None and want is not None:
        exact = [_strip(output[g0:g1], example) == _strip(example.expected[w0:w1], example)
                 for (_, g0, g1, _), (_, w0, w1, _) in zip(got, want, strict=True)]
    reference = " ".join(plain_translation.split()) == example.plain_reference
    return Placement(text_kept, valid, tuple(exact), reference)
