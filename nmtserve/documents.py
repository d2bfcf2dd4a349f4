"""Translate whole documents: cut plain text, Markdown or HTML into sentences and put the
translations back into the original structure.

    from nmtserve.documents import segment, translate_document

    doc = segment(text, "markdown")            # doc.sentences: what to translate, in order
    out = doc.render(my_batch(doc.sentences))  # the same document, sentences replaced
    out = translate_document(text, "html", my_batch)   # the same, in one call

Pure Python; no Triton, torch or other nmtserve module. Sentences are found by ``sentencex``
(Wikimedia's rule-based segmenter, ~300 languages, ``language`` picks its rules), Markdown is
parsed by ``markdown-it-py`` (CommonMark, plus GFM tables and ``~~strikethrough~~``) and HTML by
the standard library's ``html.parser``. None of them rewrites the document: every piece of the
output that is not a translated sentence is a byte-for-byte slice of the input, so rendering
with the sentences themselves gives the input back, and a translation equal to its sentence is
put back as the original source text.

Rules
-----
Sentences
    A *run* is a stretch of text that sentences may span (a plain-text paragraph, a Markdown
    paragraph, heading or table cell, the text of an HTML block between two block-level tags).
    ``sentencex`` cuts each run; each piece is stripped of surrounding whitespace, which stays
    in place. A piece without a single letter (numbers, punctuation, a lone code span) is not a
    sentence: it is kept as it is and not sent to the translator. Inside a sentence each run of
    ASCII whitespace (a line break and the indentation after it, tabs, repeated spaces) reaches
    the translator as one space; translations are stripped and their whitespace runs made one
    space too, so a translation never adds a line to the document.
plain
    Paragraphs are separated by blank lines (empty or whitespace only). A paragraph is one
    run, so a sentence may continue over a line break (hard-wrapped text): the translator gets
    it as one line and its translation replaces all of its lines (the original line breaks stay
    only where the translation equals the sentence). Lines that must stay lines (a list, a
    poem) need blank lines between them, or the Markdown format and its hard line breaks.
markdown
    Translated: paragraphs (so list items and block quotes), headings, table cells. Kept as
    written: front matter (a ``---`` or ``+++`` block at the very top), fenced and indented
    code, HTML blocks, link reference definitions, thematic breaks, and every block marker
    (``#``, ``>``, ``-``, ``1.``, indentation, setext underlines, table pipes). A hard line
    break (two trailing spaces or a backslash) ends a sentence, like a new block. A sentence
    over several lines of a paragraph becomes one line when its translation differs.
html
    Block-level tags (every tag not in ``INLINE_TAGS``), ``<br>``, comments, doctype, CDATA and
    processing instructions end a run and are kept as written. Nothing inside ``code``,
    ``kbd``, ``samp``, ``var``, ``pre``, ``script``, ``style``, ``textarea``, ``svg``, ``math``
    or an element with ``translate="no"`` is translated (``translate="yes"`` turns translation
    back on below a ``translate="no"``, not below the listed elements). Attribute values
    (``alt``, ``title``...) are not translated. The HTML need not be well formed: unclosed and
    stray tags are kept as written, an end tag closes the innermost open element of its name
    (no implied end tags: ``<p translate="no">a<p>b`` leaves "b" untranslated too), and an
    unclosed ``<!--`` comments out the rest of the document, as in browsers.
Inline markup (Markdown emphasis, strikethrough, links, code spans, images, autolinks, inline
HTML; HTML inline tags such as ``<b>``, ``<a href>``, ``<span>``, ``<img>``)
    stays in the sentence as a placeholder, in the style of XLIFF: the two markers of a pair
    around text become ``<g1>``...``</g1>`` (``**bold**``, ``[text](url)``, ``<a href="x">
    text</a>``: the text between is translated); an atomic span becomes ``<x2/>`` (a code
    span, an image, an autolink, inline HTML in Markdown, ``<code>...</code>``, ``<img>``,
    untranslated text inside the sentence, a marker whose partner is in another sentence).
    Numbers count from 1 in each sentence (from above the highest one if the sentence's own
    text already reads like a placeholder). Markers at the edges of a sentence, when they wrap
    all of it or their partner lies in another sentence, stay outside the sentence and are not
    shown to the translator (``*Hello. World.*`` gives "Hello." and "World."). On render each
    placeholder is replaced by its exact source text, wherever the translation moved it, with
    any case and spaces inside (``< G1 >``). Damage is repaired, never raised: a pair that lost
    a marker or crosses another pair is dropped (its text stays, the formatting goes), a
    repeated placeholder counts once, an atomic placeholder the translation lost is appended
    at the end of the sentence (code and images are never lost), and placeholder-like text
    that is not one of the sentence's own placeholders is text.
Entities and escapes
    The translator sees decoded text: ``&amp;`` is ``&``, ``&nbsp;`` a no-break space, a
    Markdown ``\\*`` is ``*``. Translated text is escaped again when rendered: HTML ``& < >``;
    Markdown backslash-escapes ``\\ ` * _ [ ] < | ~``, an ``&`` that would start an entity, and
    a leading ``# > - + =`` or ``1.``/``1)`` that could start a block.

Bad input raises ``DocumentError`` (a ``ValueError``): ``text`` not a ``str``, an unknown
format, more than ``max_chars`` characters, or a character typical of binary data (NUL and
the other C0 controls except tab, line feed, vertical tab, form feed and carriage return; DEL;
lone surrogates; U+FFFE/U+FFFF), with its offset, line and column. Translations that do not
fit their sentences (wrong count, not strings) raise ``TranslationMismatchError``.
"""

from __future__ import annotations

import functools
import html
import re
from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any

import sentencex  # type: ignore[import-untyped]  # ships no type information
from markdown_it import MarkdownIt
from markdown_it.rules_inline import StateInline
from markdown_it.token import Token

from . import defaults

__all__ = [
    "DEFAULT_MAX_CHARS",
    "FORMATS",
    "INLINE_TAGS",
    "NO_TRANSLATE_TAGS",
    "DocumentError",
    "Segmented",
    "TranslationMismatchError",
    "segment",
    "translate_document",
]

FORMATS = ("plain", "markdown", "html")
DEFAULT_MAX_CHARS = defaults.MAX_DOCUMENT_CHARS

# HTML elements that sit inside a sentence (phrasing content); any other tag ends a run.
INLINE_TAGS = frozenset(
    "a abbr acronym b bdi bdo big cite code data del dfn em font i img ins kbd label mark q s "
    "samp small span strike strong sub sup time tt u var wbr".split())
# HTML elements whose content is never translated (translate="yes" below them does not help).
NO_TRANSLATE_TAGS = frozenset("code kbd samp var pre script style textarea svg math".split())
_VOID_TAGS = frozenset(
    "area base br col embed hr img input keygen link meta param source track wbr".split())


class DocumentError(ValueError):
    """The document cannot be translated: not text, too long, binary, or an unknown format."""


class TranslationMismatchError(RuntimeError):
    """The translations do not fit the sentences: another count, or not strings."""


# -- pieces of a run: what the segmenter and the translator see of each stretch of source

_TEXT = 0  # text the translator sees exactly as written
_DECODED = 1  # text seen decoded (an entity, a Markdown escape, a line break seen as a space)
_CODE = 2  # an atomic span of markup: a placeholder <xN/>
_OPEN = 3  # the opening marker of a pair: <gN>
_CLOSE = 4  # the closing marker of a pair: </gN>

_CODE_FOR_SEGMENTER = "X"  # what the segmenter sees of an atomic span: a word


@dataclass(slots=True)
class _Piece:
    start: int  # source span [start, end) in the document
    end: int
    kind: int
    text: str = ""  # _TEXT: the source text; _DECODED: the decoded text
    pair: int = -1  # _OPEN/_CLOSE: the same number on both markers of a pair; -1: no partner


@dataclass(frozen=True, slots=True)
class _Code:
    """A placeholder of one sentence and the source text it stands for."""

    kind: int  # _CODE (standalone), _OPEN or _CLOSE
    number: int
    markup: str


@dataclass(frozen=True, slots=True)
class _Slot:
    """One sentence: where it is in the document and what the translator sees."""

    start: int
    end: int
    sentence: str
    codes: tuple[_Code, ...] = ()


@dataclass(frozen=True)
class Segmented:
    """A document cut into the sentences to translate and everything else.

    ``sentences`` are stripped, non-empty and in document order. ``render`` takes one
    translation per sentence, in the same order, and returns the document with each sentence
    replaced; everything else is copied from the input unchanged, so
    ``doc.render(doc.sentences)`` is the input.
    """

    sentences: list[str]
    fmt: str
    _text: str = field(repr=False, compare=False)
    _slots: tuple[_Slot, ...] = field(repr=False, compare=False)

    @property
    def spans(self) -> list[tuple[int, int]]:
        """Where each sentence is in the document: ``text[start:end]``, in order, disjoint."""
        return [(slot.start, slot.end) for slot in self._slots]

    def render(self, translations: Sequence[str]) -> str:
        if isinstance(translations, (str, bytes)) or not isinstance(translations, Sequence):
            raise TranslationMismatchError(
                f"translations must be a sequence of str, got {type(translations).__name__}")
        if len(translations) != len(self._slots):
            raise TranslationMismatchError(
                f"got {len(translations)} translations for {len(self._slots)} sentences")
        escape = _ESCAPERS[self.fmt]
        out: list[str] = []
        pos = 0
        for i, (slot, translation) in enumerate(zip(self._slots, translations, strict=True)):
            if not isinstance(translation, str):
                raise TranslationMismatchError(
                    f"translation {i} is {type(translation).__name__}, not str")
            out.append(self._text[pos:slot.start])
            if translation == slot.sentence:
                out.append(self._text[slot.start:slot.end])
            else:
                out.append(_render_sentence(slot, translation, escape))
            pos = slot.end
        out.append(self._text[pos:])
        return "".join(out)


def segment(text: str, fmt: str, *, language: str = "en",
            max_chars: int = DEFAULT_MAX_CHARS) -> Segmented:
    """Cut ``text`` (``fmt`` one of ``FORMATS``) into the sentences to translate.

    ``language`` is the source language code for the segmenter's rules (ISO 639, e.g. "en",
    "de", "ja"; unknown codes fall back to its generic rules). Raises ``DocumentError`` for a
    document that is not text, longer than ``max_chars`` characters, or in an unknown format,
    and ``ValueError`` for an empty ``language``.
    """
    _check_document(text, fmt, max_chars)
    if not isinstance(language, str) or not language.strip():
        raise ValueError(f"language must be a language code such as 'en', got {language!r}")
    runs = _RUNS[fmt](text)
    slots: list[_Slot] = []
    for run in runs:
        slots.extend(_sentences_of_run(text, run, language))
    for before, after in zip(slots, slots[1:], strict=False):  # the invariant render's copying relies on
        if before.end > after.start:
            raise AssertionError(f"overlapping sentences at offset {after.start}")
    return Segmented([s.sentence for s in slots], fmt, text, tuple(slots))


def translate_document(text: str, fmt: str, translate: Callable[[list[str]], Sequence[str]], *,
                       language: str = "en", max_chars: int = DEFAULT_MAX_CHARS) -> str:
    """Translate a document: ``segment``, one call of ``translate`` for all sentences, render.

    ``translate`` gets the list of sentences and must return one translation per sentence, in
    order. It is not called when the document has no sentence (empty, whitespace, only code);
    the document then comes back unchanged.
    """
    doc = segment(text, fmt, language=language, max_chars=max_chars)
    if not doc.sentences:
        return text
    translations = translate(list(doc.sentences))
    if isinstance(translations, (str, bytes)) or not isinstance(translations, Sequence):
        raise TranslationMismatchError(
            f"translate must return a list of str, got {type(translations).__name__}")
    if len(translations) != len(doc.sentences):
        raise TranslationMismatchError(
            f"translate returned {len(translations)} translations for {len(doc.sentences)} sentences")
    return doc.render(translations)


# -- input checks

# NUL and the C0 controls but tab, LF, VT, FF, CR; DEL; lone surrogates (binary decoded with
# surrogateescape); the noncharacters U+FFFE/U+FFFF (a byte-swapped BOM).
_BINARY_RE = re.compile("[\x00-\x08\x0e-\x1f\x7f\ud800-\udfff\ufffe\uffff]")


def _check_document(text: object, fmt: object, max_chars: int) -> None:
    if fmt not in FORMATS:
        raise DocumentError(f"unknown document format {fmt!r}: expected one of {', '.join(FORMATS)}")
    if not isinstance(text, str):
        raise DocumentError(f"a {fmt} document must be str, got {type(text).__name__}")
    if not isinstance(max_chars, int) or max_chars < 0:
        raise ValueError(f"max_chars must be a non-negative int, got {max_chars!r}")
    if len(text) > max_chars:
        raise DocumentError(f"the {fmt} document has {len(text):,} characters, more than the "
                            f"limit of {max_chars:,}")
    bad = _BINARY_RE.search(text)
    if bad is not None:
        offset = bad.start()
        line = text.count("\n", 0, offset) + 1
        column = offset - (text.rfind("\n", 0, offset) + 1) + 1
        raise DocumentError(
            f"the {fmt} document holds the control character U+{ord(bad.group()):04X} at offset "
            f"{offset} (line {line}, column {column}): binary data, not text")


# -- runs to sentences (every format)

_ASCII_SPACE_RE = re.compile(r"[ \t\n\r\f\v]+")
_PLACEHOLDER_RE = re.compile(r"<\s*(/?)\s*([gx])\s*(\d{1,9})\s*(/?)\s*>", re.IGNORECASE)


def _is_space(piece: _Piece) -> bool:
    return piece.kind in (_TEXT, _DECODED) and (not piece.text or piece.text.isspace())


def _split_text(piece: _Piece, at: int) -> tuple[_Piece, _Piece]:
    """Cut a _TEXT piece after ``at`` characters (its text is its source, so offsets match)."""
    return (_Piece(piece.start, piece.start + at, _TEXT, piece.text[:at]),
            _Piece(piece.start + at, piece.end, _TEXT, piece.text[at:]))


def _merge(text: str, run: list[_Piece]) -> list[_Piece]:
    """Join neighbouring atomic spans into one placeholder, and neighbouring texts."""
    merged: list[_Piece] = []
    for piece in run:
        last = merged[-1] if merged else None
        if (last is not None and last.end == piece.start and last.kind == piece.kind
                and piece.kind in (_CODE, _TEXT)):
            last.end = piece.end
        else:
            merged.append(_Piece(piece.start, piece.end, piece.kind, piece.text, piece.pair))
    for piece in merged:
        if piece.kind == _TEXT:  # a text piece's text is its source
            piece.text = text[piece.start:piece.end]
    return merged


def _sentences_of_run(text: str, run: list[_Piece], language: str) -> list[_Slot]:
    if not any(p.kind in (_TEXT, _DECODED) and any(c.isalpha() for c in p.text) for p in run):
        return []
    run = _merge(text, run)
    seen = [_shown(piece) for piece in run]
    offsets: list[int] = []  # where each piece starts in what the segmenter sees
    length = 0
    for shown in seen:
        offsets.append(length)
        length += len(shown)
    cuts = _sentence_cuts(language, "".join(seen))

    # Cut the run where the segmenter cut the text. A cut inside text splits it; a cut inside
    # anything else moves after it; a pair's marker at a cut goes with its own side.
    segments: list[list[_Piece]] = [[]]
    ci = 0
    for piece, start in zip(run, offsets, strict=True):
        end = start + len(_shown(piece))
        while ci < len(cuts) and (cuts[ci] < start or (
                cuts[ci] == start and not (piece.kind == _CLOSE and end == start))):
            segments.append([])
            ci += 1
        if piece.kind == _TEXT:
            while ci < len(cuts) and cuts[ci] < end:
                head, piece = _split_text(piece, cuts[ci] - start)
                start = cuts[ci]
                segments[-1].append(head)
                segments.append([])
                ci += 1
        segments[-1].append(piece)
    slots = []
    for seg in segments:
        slot = _slot(text, seg)
        if slot is not None:
            slots.append(slot)
    return slots


# sentencex 1.0.32 panics (a Rust panic: pyo3's PanicException, a BaseException) on an
# uppercase letter, a non-ASCII whitespace character and a period ("X\u00a0."): it slices
# bytes assuming the character before the period is one byte. It only ever sees ASCII
# whitespace here: each other whitespace character becomes a space (same length, same cuts).
_NON_ASCII_SPACE = str.maketrans(dict.fromkeys(
    "\x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000", " "))


def _sentence_cuts(language: str, text: str) -> list[int]:
    """Offsets in ``text`` where sentencex starts a new sentence."""
    try:
        bounds = sentencex.get_sentence_boundaries(language, text.translate(_NON_ASCII_SPACE))
    except BaseException as error:  # a panic inside sentencex: the run stays one sentence
        if type(error).__name__ != "PanicException":
            raise
        return []
    return [bound["start_index"] for bound in bounds[1:]]


def _shown(piece: _Piece) -> str:
    """What the segmenter sees of a piece: its text, a word for an atomic span, nothing for a
    pair's marker (so "**Stop.** Go" is cut like "Stop. Go")."""
    if piece.kind in (_TEXT, _DECODED):
        return piece.text
    return _CODE_FOR_SEGMENTER if piece.kind == _CODE else ""


def _core(seg: list[_Piece]) -> list[_Piece]:
    """The sentence inside a segment: without surrounding whitespace, without markers whose
    partner is outside, and without the pairs that wrap all of it. Linear in the segment."""
    opens = {p.pair: i for i, p in enumerate(seg) if p.kind == _OPEN and p.pair >= 0}
    closes = {p.pair: i for i, p in enumerate(seg) if p.kind == _CLOSE and p.pair >= 0}

    def partner(i: int) -> int:
        piece = seg[i]
        return (closes if piece.kind == _OPEN else opens).get(piece.pair, -1)

    lo, hi = 0, len(seg)
    while lo < hi:
        first, last = seg[lo], seg[hi - 1]
        if _is_space(first):
            lo += 1
        elif _is_space(last):
            hi -= 1
        elif first.kind == _OPEN and partner(lo) == hi - 1:
            lo, hi = lo + 1, hi - 1
        elif first.kind == _CLOSE or (first.kind == _OPEN and not lo <= partner(lo) < hi):
            lo += 1
        elif last.kind == _OPEN or (last.kind == _CLOSE and not lo <= partner(hi - 1) < hi):
            hi -= 1
        else:
            break
    core = seg[lo:hi]
    if core and core[0].kind == _TEXT and core[0].text[0].isspace():
        core[0] = _split_text(core[0], len(core[0].text) - len(core[0].text.lstrip()))[1]
    if core and core[-1].kind == _TEXT and core[-1].text[-1].isspace():
        core[-1] = _split_text(core[-1], len(core[-1].text.rstrip()))[0]
    return core


def _slot(text: str, seg: list[_Piece]) -> _Slot | None:
    core = _core(seg)
    if not any(p.kind in (_TEXT, _DECODED) and any(c.isalpha() for c in p.text) for p in core):
        return None
    pairs = {p.pair for p in core if p.kind == _OPEN and p.pair >= 0} & {
        p.pair for p in core if p.kind == _CLOSE and p.pair >= 0}
    # Number placeholders above any placeholder-like text of the sentence itself.
    plain = "".join(p.text for p in core if p.kind in (_TEXT, _DECODED))
    number = max((int(m.group(3)) for m in _PLACEHOLDER_RE.finditer(plain)), default=0)
    numbers: dict[int, int] = {}  # pair -> placeholder number
    parts: list[str] = []
    codes: list[_Code] = []
    for p in core:
        if p.kind in (_TEXT, _DECODED):
            parts.append(p.text)
            continue
        markup = text[p.start:p.end]
        if p.kind in (_OPEN, _CLOSE) and p.pair in pairs:
            if p.kind == _OPEN:
                number += 1
                numbers[p.pair] = number
                parts.append(f"<g{number}>")
            else:
                parts.append(f"</g{numbers[p.pair]}>")
            codes.append(_Code(p.kind, numbers[p.pair], markup))
        else:
            number += 1
            parts.append(f"<x{number}/>")
            codes.append(_Code(_CODE, number, markup))
    sentence = _ASCII_SPACE_RE.sub(" ", "".join(parts)).strip()
    return _Slot(core[0].start, core[-1].end, sentence, tuple(codes))


def _render_sentence(slot: _Slot, translation: str, escape: Callable[[str, bool], str]) -> str:
    translation = _ASCII_SPACE_RE.sub(" ", translation).strip()
    if not slot.codes:
        return escape(translation, True)
    codes = {(c.kind, c.number): c for c in slot.codes}
    found: list[tuple[int, int, _Code | None]] = []  # (start, end, code); None: a repeat, dropped
    seen: set[tuple[int, int]] = set()
    for m in _PLACEHOLDER_RE.finditer(translation):
        closing, letter, digits, selfclosing = m.groups()
        letter = letter.lower()
        if letter == "x" and selfclosing and not closing:
            key = (_CODE, int(digits))
        elif letter == "g" and not selfclosing:
            key = (_CLOSE if closing else _OPEN, int(digits))
        else:
            continue
        if key not in codes:
            continue  # placeholder-like text that is not ours: plain text
        found.append((m.start(), m.end(), None if key in seen else codes[key]))
        seen.add(key)
    # Keep a pair only when both markers are there, in order, and nest with the other pairs.
    dropped: set[int] = set()
    stack: list[int] = []
    open_numbers: set[int] = set()
    for _, _, code in found:
        if code is None or code.kind == _CODE:
            continue
        if code.kind == _OPEN:
            stack.append(code.number)
            open_numbers.add(code.number)
        elif code.number in open_numbers:
            while stack[-1] != code.number:  # pairs opened inside and not closed: crossing
                open_numbers.discard(stack[-1])
                dropped.add(stack.pop())
            open_numbers.discard(stack.pop())
        else:
            dropped.add(code.number)
    dropped.update(stack)
    out: list[str] = []
    pos = 0
    for start, end, code in found:
        if start > pos:
            out.append(escape(translation[pos:start], pos == 0))
        if code is not None and (code.kind == _CODE or code.number not in dropped):
            out.append(code.markup)
        pos = end
    if pos < len(translation):
        out.append(escape(translation[pos:], pos == 0))
    lost = [c.markup for c in slot.codes if c.kind == _CODE and (_CODE, c.number) not in seen]
    if lost:
        out.append((" " if out else "") + "".join(lost))
    return "".join(out)


# -- escaping of translated text

def _plain_escape(text: str, at_start: bool) -> str:
    return text


def _html_escape(text: str, at_start: bool) -> str:
    return html.escape(text, quote=False)


_MD_SPECIAL_RE = re.compile(r"[\\`*_\[\]<|~]|&(?=#?[0-9A-Za-z]+;)")
_MD_BLOCK_START_RE = re.compile(r"^(?:[#>+=-]|\d+(?=[.)]))")


def _markdown_escape(text: str, at_start: bool) -> str:
    text = _MD_SPECIAL_RE.sub(lambda m: "\\" + m.group(), text)
    if at_start:
        m = _MD_BLOCK_START_RE.match(text)
        if m is not None:  # "1." -> "1\\.", "-" -> "\\-"
            end = m.end()
            text = text[:end] + "\\" + text[end:] if m.group()[0].isdigit() else "\\" + text
    return text


_ESCAPERS: dict[str, Callable[[str, bool], str]] = {
    "plain": _plain_escape, "markdown": _markdown_escape, "html": _html_escape}


# -- lines

_LINE_BREAK_RE = re.compile(r"\r\n|\r|\n")


def _lines(text: str) -> list[tuple[int, int]]:
    """(start, end) of each line without its line break (CRLF, CR or LF), as markdown-it counts
    lines: "a\n" is two lines, the second empty."""
    spans = []
    pos = 0
    for m in _LINE_BREAK_RE.finditer(text):
        spans.append((pos, m.start()))
        pos = m.end()
    spans.append((pos, len(text)))
    return spans


# -- plain text

def _plain_runs(text: str) -> list[list[_Piece]]:
    runs: list[list[_Piece]] = []
    start = end = -1
    for line_start, line_end in _lines(text):
        if not text[line_start:line_end].isspace() and line_end > line_start:
            if start < 0:
                start = line_start
            end = line_end
        elif start >= 0:
            runs.append([_Piece(start, end, _TEXT, text[start:end])])
            start = -1
    if start >= 0:
        runs.append([_Piece(start, end, _TEXT, text[start:end])])
    return runs


# -- Markdown

_RECORDS = "nmtserve.documents:spans"  # key in markdown-it's env for the recorded rule spans


@dataclass(slots=True)
class _Record:
    """One inline rule that matched: its source span and the tokens it made."""

    state: StateInline
    rule: str
    start: int
    end: int
    tokens: list[Token]
    delimiters: list[Any]
    label_end: int = -1


def _recording(name: str, rule: Callable[[StateInline, bool], bool]) -> Callable[[StateInline, bool], bool]:
    """Wrap an inline rule so that each match is recorded with its span (tokens have none)."""

    def recorded(state: StateInline, silent: bool) -> bool:
        if silent:
            return rule(state, silent)
        start, ntokens, delimiters = state.pos, len(state.tokens), state.delimiters
        ndelimiters = len(delimiters)
        if not rule(state, silent):
            return False
        records = state.env.get(_RECORDS)
        if records is not None:
            record = _Record(state, name, start, state.pos, state.tokens[ntokens:],
                             delimiters[ndelimiters:])
            if name == "link":  # where the link text ends: "[text" | "](url)"
                record.label_end = state.md.helpers.parseLinkLabel(state, start, True)
            records.append(record)
        return True

    return recorded


@functools.lru_cache(maxsize=1)
def _markdown() -> MarkdownIt:
    md = MarkdownIt("commonmark").enable(["table", "strikethrough"])
    # Block structure only from parse(); the inline parser is run per block (_inline_pieces).
    md.core.ruler.enableOnly(["normalize", "block"])
    # It joins text tokens by rewriting their content; the delimiter tokens must stay as made.
    md.inline.ruler2.disable("fragments_join")
    names = md.inline.ruler.get_active_rules()
    functions = md.inline.ruler.getRules("")
    for name, function in zip(names, functions, strict=True):
        if name != "text":
            md.inline.ruler.at(name, _recording(name, function))
    return md


_STRONG = ("strong_open", "strong_close")


def _inline_pieces(src: str, env: dict[str, Any]) -> list[list[_Piece]] | None:
    """The runs of one block's inline source, in offsets of ``src``; None if not understood."""
    md = _markdown()
    records: list[_Record] = []
    env = {**env, _RECORDS: records}
    state = StateInline(src, md, env, [])
    md.inline.tokenize(state)
    for rule in md.inline.ruler2.getRules(""):
        rule(state)

    marks: list[_Piece] = []
    breaks: list[tuple[int, int]] = []
    by_token: dict[int, _Piece] = {}  # id(token) -> its marker, for the pairs
    for r in records:
        if r.state is not state:  # an image's alt text is parsed with a state of its own
            continue
        types = {t.type for t in r.tokens}
        if "hardbreak" in types:
            breaks.append((r.start, r.end))
        elif r.rule == "newline":
            marks.append(_Piece(r.start, r.end, _DECODED, " "))
        elif r.rule in ("escape", "entity"):
            special = [t for t in r.tokens if t.type == "text_special"]
            if special and special[-1].content != special[-1].markup:
                marks.append(_Piece(r.start, r.end, _DECODED, special[-1].content))
        elif r.rule == "backticks":
            if "code_inline" in types:
                marks.append(_Piece(r.start, r.end, _CODE))
        elif r.rule in ("emphasis", "strikethrough"):
            width = 1 if r.rule == "emphasis" else 2
            lead = (r.end - r.start) - width * len(r.delimiters)
            for k, d in enumerate(r.delimiters):
                token = state.tokens[d.token]
                pos = r.start + lead + width * k
                if token.nesting == 0:
                    continue  # left as text (or the second half of a strong marker)
                start = pos - 1 if token.type == _STRONG[0] else pos
                end = pos + width + (1 if token.type == _STRONG[1] else 0)
                piece = _Piece(start, end, _OPEN if token.nesting > 0 else _CLOSE)
                marks.append(piece)
                by_token[id(token)] = piece
        elif r.rule == "link":
            opening = next(t for t in r.tokens if t.type == "link_open")
            closing = r.tokens[-1]
            if r.label_end < 0 or closing.type != "link_close":
                return None
            marks.append(_Piece(r.start, r.start + 1, _OPEN))
            marks.append(_Piece(r.label_end, r.end, _CLOSE))
            by_token[id(opening)], by_token[id(closing)] = marks[-2], marks[-1]
        else:  # image, autolink, html_inline, and any rule a later markdown-it may add
            marks.append(_Piece(r.start, r.end, _CODE))
    # Pairs: markdown-it nests its open/close tokens properly.
    stack: list[_Piece] = []
    for number, token in enumerate(state.tokens):
        marker = by_token.get(id(token))
        if marker is None:
            continue
        if marker.kind == _OPEN:
            stack.append(marker)
        elif stack:
            stack.pop().pair = marker.pair = number

    runs: list[list[_Piece]] = [[]]
    items = sorted([(s, e, None) for s, e in breaks] + [(m.start, m.end, m) for m in marks],
                   key=lambda item: item[0])
    pos = 0
    for start, end, mark in items:
        if start < pos:
            return None  # overlapping spans: not what this module expects of markdown-it
        if start > pos:
            runs[-1].append(_Piece(pos, start, _TEXT, src[pos:start]))
        if mark is None:
            runs.append([])
        else:
            runs[-1].append(mark)
        pos = end
    if pos < len(src):
        runs[-1].append(_Piece(pos, len(src), _TEXT, src[pos:]))
    return [run for run in runs if run]


_FRONT_MATTER = {"---": ("---", "..."), "+++": ("+++",)}


def _markdown_runs(text: str) -> list[list[_Piece]]:
    lines = _lines(text)
    norm = [text[s:e] for s, e in lines]  # markdown-it's view: LF line ends, same columns
    fence = norm[0].rstrip()
    if fence in _FRONT_MATTER:
        for i in range(1, len(norm)):
            if norm[i].rstrip() in _FRONT_MATTER[fence]:
                norm[: i + 1] = [""] * (i + 1)  # front matter: blank lines to the parser
                break
    md = _markdown()
    env: dict[str, Any] = {}
    tokens = md.parse("\n".join(norm), env)
    runs: list[list[_Piece]] = []
    cursor: dict[int, int] = {}  # table row line -> where its next cell is searched from
    for i, token in enumerate(tokens):
        if token.type != "inline" or not token.content or token.map is None or i == 0:
            continue
        spans = _locate(tokens[i - 1], token, norm, lines, cursor)
        if spans is None:
            continue  # a block this module cannot map back to the source: kept as written
        src = "\n".join(text[s:e] for s, e in spans)
        block_runs = _inline_pieces(src, env)
        if block_runs is None:
            continue
        to_text = _LineMap(spans)
        for run in block_runs:
            mapped = []
            for p in run:
                start, end = to_text(p.start), to_text(p.end)
                if p.kind == _TEXT and text[start:end] != p.text:
                    break
                mapped.append(_Piece(start, end, p.kind, p.text, p.pair))
            else:
                runs.append(mapped)
    return runs


class _LineMap:
    """Offsets in a block's inline source (its lines joined by LF) to offsets in the document;
    an LF maps to the end of its line, where the document's line break and the next line's
    container markers (``> ``, list indentation) begin."""

    def __init__(self, spans: list[tuple[int, int]]) -> None:
        self.spans = spans
        self.starts = []
        offset = 0
        for start, end in spans:
            self.starts.append(offset)
            offset += end - start + 1

    def __call__(self, pos: int) -> int:
        k = bisect_right(self.starts, pos) - 1
        start, end = self.spans[k]
        return min(start + pos - self.starts[k], end)


def _locate(parent: Token, token: Token, norm: list[str], lines: list[tuple[int, int]],
            cursor: dict[int, int]) -> list[tuple[int, int]] | None:
    """The source span of each line of an inline block's content, or None."""
    assert token.map is not None
    first = token.map[0]
    content_lines = token.content.split("\n")
    if first + len(content_lines) > len(norm):
        return None
    spans = []
    if parent.type == "paragraph_open" or (parent.type == "heading_open" and parent.markup in ("=", "-")):
        # Each line's content runs to the end of its line (the last one to its trailing
        # whitespace); markdown-it may have replaced a partly used tab by spaces in front.
        for k, content in enumerate(content_lines):
            line = norm[first + k]
            verbatim = content if k == 0 else content.lstrip(" \t")
            if not verbatim:
                return None
            if k < len(content_lines) - 1:
                if not line.endswith(verbatim):
                    return None
                column = len(line) - len(verbatim)
            else:
                column = line.rfind(verbatim)
                if column < 0 or line[column + len(verbatim):].strip():
                    return None
            start = lines[first + k][0] + column
            spans.append((start, start + len(verbatim)))
        return spans
    if len(content_lines) != 1:
        return None
    line = norm[first]
    if parent.type == "heading_open":  # ATX: the text after the # marker
        column = line.find(token.content, line.find(parent.markup) + len(parent.markup))
    elif parent.type in ("th_open", "td_open"):  # cells left to right; "\|" came out as "|"
        source = token.content.replace("|", "\\|")
        column = line.find(source, cursor.get(first, 0))
        if column >= 0:
            cursor[first] = column + len(source)
        return None if column < 0 else [(lines[first][0] + column, lines[first][0] + column + len(source))]
    else:
        return None
    if column < 0:
        return None
    start = lines[first][0] + column
    return [(start, start + len(token.content))]


# -- HTML

# html.unescape's own pattern, so each match decodes the way the whole text would.
_CHARREF_RE = re.compile(r"&(#[0-9]+;?|#[xX][0-9a-fA-F]+;?|[^\t\n\f <&#;]{1,32};?)")


class _Events(HTMLParser):
    """Records each parser event and where it starts; an event's source runs to the next one."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.positions: list[tuple[int, int]] = []  # (line from 1, column from 0)
        self.events: list[tuple[str, str, list[tuple[str, str | None]]]] = []

    def _event(self, kind: str, tag: str = "", attrs: list[tuple[str, str | None]] | None = None) -> None:
        self.positions.append(self.getpos())
        self.events.append((kind, tag, attrs or []))

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._event("start", tag, attrs)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._event("startend", tag, attrs)

    def handle_endtag(self, tag: str) -> None:
        self._event("end", tag)

    def handle_data(self, data: str) -> None:
        self._event("data")

    def handle_comment(self, data: str) -> None:
        self._event("other")

    def handle_decl(self, decl: str) -> None:
        self._event("other")

    def handle_pi(self, data: str) -> None:
        self._event("other")

    def unknown_decl(self, data: str) -> None:
        self._event("other")


@dataclass(slots=True)
class _Element:
    tag: str
    translate: bool
    forced: bool  # in a NO_TRANSLATE_TAGS element: translate="yes" below does not count


def _text_pieces(text: str, start: int, end: int) -> list[_Piece]:
    pieces = []
    pos = start
    for m in _CHARREF_RE.finditer(text, start, end):
        decoded = html.unescape(m.group())
        if decoded == m.group():
            continue
        if m.start() > pos:
            pieces.append(_Piece(pos, m.start(), _TEXT, text[pos:m.start()]))
        pieces.append(_Piece(m.start(), m.end(), _DECODED, decoded))
        pos = m.end()
    if end > pos:
        pieces.append(_Piece(pos, end, _TEXT, text[pos:end]))
    return pieces


_COMMENT_CLOSE_RE = re.compile(r"--!?\s*>")


def _html_events(text: str) -> tuple[list[int], list[tuple[str, str, list[tuple[str, str | None]]]]]:
    """html.parser's events for ``text``: (start offsets, (kind, tag, attributes)).

    What the parser is given is cut and patched so that the failures of html.parser before
    CPython's 2025 fixes to it (seen with 3.11.7) cannot happen: a "<![" not followed by a
    marked-section keyword raises AssertionError, and a construct left open (an unclosed
    comment, tag or quote) is rescanned to the end of the input once per "<" after it, which
    is quadratic (80 kB of "<a b='" takes half a minute). So:

    - "<![" is shown as "<!X": a bogus comment up to the next ">", which is what browsers make
      of CDATA in HTML content (the source text is unchanged: the parser only gives offsets);
    - a "<!--" with no comment end after it starts a comment that runs to the end of the
      document, as in browsers, and is not given to the parser;
    - the text after the last ">" cannot hold a complete tag: it is data, not parsed.
    """
    comment_end = 0
    for m in _COMMENT_CLOSE_RE.finditer(text):
        comment_end = m.end()
    unclosed = text.find("<!--", comment_end)
    comment_start = len(text) if unclosed < 0 else unclosed
    parse_end = text.rfind(">", 0, comment_start) + 1
    parser = _Events()
    parser.feed(text[:parse_end].replace("<![", "<!X"))
    parser.close()
    line_starts = [0] + [m.end() for m in re.finditer("\n", text[:parse_end])]
    offsets = [line_starts[line - 1] + column for line, column in parser.positions]
    events = parser.events
    if parse_end < comment_start:
        offsets.append(parse_end)
        events.append(("data", "", []))
    if comment_start < len(text):
        offsets.append(comment_start)
        events.append(("other", "", []))
    return offsets, events


def _html_runs(text: str) -> list[list[_Piece]]:
    offsets, events = _html_events(text)
    runs: list[list[_Piece]] = []
    run: list[_Piece] = []
    stack: list[_Element] = []  # the open elements, innermost last
    open_count: dict[str, int] = {}  # tag -> how many of them are open: a stray end tag scans nothing
    root = _Element("", True, False)

    def end_run() -> None:
        nonlocal run
        if run:
            runs.append(run)
            run = []

    for k, (kind, tag, attrs) in enumerate(events):
        start = offsets[k]
        end = offsets[k + 1] if k + 1 < len(offsets) else len(text)
        if end <= start:
            continue
        parent = stack[-1] if stack else root
        if kind == "data":
            if parent.translate:
                run.extend(_text_pieces(text, start, end))
            else:
                run.append(_Piece(start, end, _CODE))
        elif kind in ("start", "startend"):
            element = _child(parent, tag, attrs)
            if tag not in INLINE_TAGS:
                end_run()
            elif kind == "start" and tag not in _VOID_TAGS and element.translate:
                run.append(_Piece(start, end, _OPEN, tag))
            else:
                run.append(_Piece(start, end, _CODE))
            if kind == "start" and tag not in _VOID_TAGS:
                stack.append(element)
                open_count[tag] = open_count.get(tag, 0) + 1
        elif kind == "end":
            depth = -1
            if open_count.get(tag):
                depth = next(d for d in range(len(stack) - 1, -1, -1) if stack[d].tag == tag)
            if tag not in INLINE_TAGS:
                end_run()
            elif depth >= 0 and stack[depth].translate:
                run.append(_Piece(start, end, _CLOSE, tag))
            else:
                run.append(_Piece(start, end, _CODE))
            if depth >= 0:
                for element in stack[depth:]:
                    open_count[element.tag] -= 1
                del stack[depth:]
        else:  # comment, doctype, CDATA, processing instruction
            end_run()
    end_run()
    for r in runs:
        _pair_tags(r)
    return runs


def _child(parent: _Element, tag: str, attrs: list[tuple[str, str | None]]) -> _Element:
    if parent.forced or tag in NO_TRANSLATE_TAGS:
        return _Element(tag, False, True)
    value = next((v for name, v in attrs if name == "translate"), None)
    if value is not None:
        value = value.strip().lower()
        if value in ("", "yes"):
            return _Element(tag, True, False)
        if value == "no":
            return _Element(tag, False, False)
    return _Element(tag, parent.translate, False)


def _pair_tags(run: list[_Piece]) -> None:
    """Pair the run's open and close tags by name, innermost first; the rest stay single."""
    stack: list[_Piece] = []
    open_count: dict[str, int] = {}
    for number, piece in enumerate(run):
        if piece.kind == _OPEN:
            stack.append(piece)
            open_count[piece.text] = open_count.get(piece.text, 0) + 1
        elif piece.kind == _CLOSE and open_count.get(piece.text):
            depth = next(d for d in range(len(stack) - 1, -1, -1) if stack[d].text == piece.text)
            stack[depth].pair = piece.pair = number
            for opening in stack[depth:]:
                open_count[opening.text] -= 1
            del stack[depth:]
    for piece in run:  # the tag name was only needed for the pairing
        if piece.kind in (_OPEN, _CLOSE):
            piece.text = ""


_RUNS: dict[str, Callable[[str], list[list[_Piece]]]] = {
    "plain": _plain_runs, "markdown": _markdown_runs, "html": _html_runs}
