"""HTML (the standard library's parser): runs of phrasing content, tags as placeholders."""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from html.parser import HTMLParser

from ._core import (
    _CLOSE,
    _CODE,
    _DECODED,
    _OPEN,
    _TEXT,
    _VOID_TAGS,
    INLINE_TAGS,
    NO_TRANSLATE_TAGS,
    _Piece,
)

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
    # class="notranslate": Google's and DeepL's convention, for pages that cannot say translate="no"
    classes = next((v for name, v in attrs if name == "class"), None) or ""
    if "notranslate" in classes.lower().split():
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


def _html_escape(text: str, at_start: bool) -> str:
    return html.escape(text, quote=False)
