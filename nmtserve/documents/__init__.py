"""Translate whole documents: cut plain text, Markdown, HTML or XML into sentences and put the
translations back into the original structure.

    from nmtserve.documents import segment, translate_document

    doc = segment(text, "markdown")            # doc.sentences: what to translate, in order
    out = doc.render(my_batch(doc.sentences))  # the same document, sentences replaced
    out = translate_document(text, "html", my_batch)   # the same, in one call

Pure Python; no Triton, torch or other nmtserve module. Sentences are found by ``sentencex``
(Wikimedia's rule-based segmenter, ~300 languages, ``language`` picks its rules), Markdown is
parsed by ``markdown-it-py`` (CommonMark, plus GFM tables and ``~~strikethrough~~``), HTML by
the standard library's ``html.parser`` and XML by its ``expat``. None of them rewrites the document: every piece of the
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
    or an element with ``translate="no"`` or the class ``notranslate`` is translated (its own
    ``translate`` attribute decides over its class; ``translate="yes"`` turns translation back
    on below either, not below the listed elements). Attribute values
    (``alt``, ``title``...) are not translated. The HTML need not be well formed: unclosed and
    stray tags are kept as written, an end tag closes the innermost open element of its name
    (no implied end tags: ``<p translate="no">a<p>b`` leaves "b" untranslated too), and an
    unclosed ``<!--`` comments out the rest of the document, as in browsers.
xml
    DeepL's ``tag_handling=xml`` (``_xml.XmlRules``: ``ignore_tags``, ``splitting_tags``,
    ``non_splitting_tags``, ``outline_detection``, whether a line break ends a run). The text is
    a whole document or a fragment (text and elements side by side, as DeepL's texts are); it
    must be well formed, and may not declare entities (``MarkupError``, naming the line and
    column: nothing is ever expanded or fetched). By default an element ends a run when its
    parent holds no text of its own (structure: ``<title>``, ``<par>``), and is inline markup
    when it does (``<b>`` in ``<par>Press <b>Go</b>.</par>``). An empty element (``<x/>``,
    ``<x id="7"></x>``) and an element of ``ignore_tags`` (content and all) is one atomic span;
    comments, processing instructions and CDATA sections end a run and are kept as written;
    attribute values are not translated. Entities: the five predefined and character
    references.
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
format, markup that cannot be read (``MarkupError``), more than ``max_chars`` characters, or a character typical of binary data (NUL and
the other C0 controls except tab, line feed, vertical tab, form feed and carriage return; DEL;
lone surrogates; U+FFFE/U+FFFF), with its offset, line and column. Translations that do not
fit their sentences (wrong count, not strings) raise ``TranslationMismatchError``.
"""


from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ._align import place, source_layout
from ._core import (
    DEFAULT_MAX_CHARS,
    DocumentError,
    MarkupError,
    TranslationMismatchError,
    _Piece,
    _Slot,
)
from ._html import _html_escape, _html_runs
from ._markdown import _markdown_escape, _markdown_runs
from ._plain import _plain_escape, _plain_runs
from ._sentences import _render_sentence, _sentence_cuts, _sentences_of_run
from ._xml import XmlRules, _xml_escape, _xml_runs

__all__ = [
    "DEFAULT_MAX_CHARS",
    "FORMATS",
    "INLINE_TAGS",
    "NO_TRANSLATE_TAGS",
    "DocumentError",
    "MarkupError",
    "Segmented",
    "TranslationMismatchError",
    "XmlRules",
    "plain_line_is_one_sentence",
    "segment",
    "translate_document",
]


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

    def without_markup(self) -> list[str]:
        """``sentences`` with their own placeholders taken out, as a reader sees them (the text
        between a pair's markers stays, the markers take no room; an atomic span is a space):
        what a model that does not carry placeholders is given. ``render`` of its translations
        drops the inline formatting and appends each atomic span (code, image) at the end of its
        sentence; ``render_aligned`` puts it back by word alignment. The text is the sentence's
        own translation either way."""
        return [" ".join(source_layout(slot)[0]) for slot in self._slots]

    def render_aligned(self, translations: Sequence[str], alignments: Sequence[Sequence[tuple[int, int]]]) -> str:
        """``render`` for translations of ``without_markup``'s sentences: each sentence's inline
        markup is put around the target words its word ``alignments`` (source word, target word
        pairs over the whitespace-separated words of the sentence without markup and of its
        translation, ``nmtserve.alignment``) map the marked source words to (``_align.place``).
        The text is each translation's own."""
        if len(alignments) != len(translations):
            raise TranslationMismatchError(f"got {len(alignments)} alignments for {len(translations)} translations")
        placed = [place(slot, t, a) if isinstance(t, str) and slot.codes else t
                  for slot, t, a in zip(self._slots, translations, alignments, strict=False)]
        return self.render(placed)

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
            max_chars: int = DEFAULT_MAX_CHARS, xml: XmlRules | None = None) -> Segmented:
    """Cut ``text`` (``fmt`` one of ``FORMATS``) into the sentences to translate.

    ``language`` is the source language code for the segmenter's rules (ISO 639, e.g. "en",
    "de", "ja"; unknown codes fall back to its generic rules). ``xml``: the rules of an "xml"
    document (default ``XmlRules()``). Raises ``DocumentError`` for a document that is not
    text, longer than ``max_chars`` characters, in an unknown format, or whose markup cannot be
    read (``MarkupError``), and ``ValueError`` for an empty ``language`` or ``xml`` rules given
    for another format.
    """
    _check_document(text, fmt, max_chars)
    if not isinstance(language, str) or not language.strip():
        raise ValueError(f"language must be a language code such as 'en', got {language!r}")
    if xml is not None and fmt != "xml":
        raise ValueError(f"xml rules are for the xml format, not {fmt}")
    runs = _xml_runs(text, xml) if xml is not None else _RUNS[fmt](text)
    slots: list[_Slot] = []
    for run in runs:
        slots.extend(_sentences_of_run(text, run, language))
    for before, after in zip(slots, slots[1:], strict=False):  # the invariant render's copying relies on
        if before.end > after.start:
            raise AssertionError(f"overlapping sentences at offset {after.start}")
    return Segmented([s.sentence for s in slots], fmt, text, tuple(slots))


def plain_line_is_one_sentence(text: str, language: str = "en") -> bool:
    """True when ``text`` is one line (no CR or LF) in which the segmenter finds no sentence
    break: ``segment(text, "plain", language=...)`` then has at most one sentence, ``text`` whole
    or nothing (whitespace, no letters). A cheap first look for the request path (``tokenize``
    cuts every TEXT element into its sentences): such a line is one plain run of one piece, the
    segmenter sees it as it is, so these are the cuts ``segment`` would make. False says nothing:
    ``segment`` decides."""
    if not isinstance(language, str) or not language.strip():
        return False  # segment refuses it
    return "\n" not in text and "\r" not in text and not _sentence_cuts(language, text)


def translate_document(text: str, fmt: str, translate: Callable[[list[str]], Sequence[str]], *,
                       language: str = "en", max_chars: int = DEFAULT_MAX_CHARS,
                       xml: XmlRules | None = None) -> str:
    """Translate a document: ``segment``, one call of ``translate`` for all sentences, render.

    ``translate`` gets the list of sentences and must return one translation per sentence, in
    order. It is not called when the document has no sentence (empty, whitespace, only code);
    the document then comes back unchanged.
    """
    doc = segment(text, fmt, language=language, max_chars=max_chars, xml=xml)
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



_ESCAPERS: dict[str, Callable[[str, bool], str]] = {
    "plain": _plain_escape, "markdown": _markdown_escape, "html": _html_escape, "xml": _xml_escape}


_RUNS: dict[str, Callable[[str], list[list[_Piece]]]] = {
    "plain": _plain_runs, "markdown": _markdown_runs, "html": _html_runs,
    "xml": lambda text: _xml_runs(text, XmlRules())}

# The formats this layer reads. The translate_document model takes those of the contract
# (contract.DOCUMENT_FORMATS), which are among them.
FORMATS: tuple[str, ...] = tuple(_RUNS)
