"""What every format shares: the errors, the tags, the pieces a run is made of, and lines."""

from __future__ import annotations

import re
from dataclasses import dataclass

from .. import defaults

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


class MarkupError(DocumentError):
    """The markup cannot be read: XML that is not well formed, or that declares an entity."""


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
