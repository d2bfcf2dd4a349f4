"""Markdown (markdown-it-py: CommonMark, GFM tables, strikethrough): runs with inline markup as placeholders."""

from __future__ import annotations

import functools
import re
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from markdown_it import MarkdownIt
from markdown_it.rules_inline import StateInline
from markdown_it.token import Token

from ._core import _CLOSE, _CODE, _DECODED, _OPEN, _TEXT, _lines, _Piece

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
