"""Subtitles: SubRip (.srt, read and written by the ``srt`` library) and WebVTT (.vtt, read here):
every cue's text a part.

The file is UTF-8 (a byte-order mark is kept); other bytes are refused. Line endings (LF or
CRLF) are kept.

SubRip: ``srt.parse`` reads the cues (a file it cannot parse is refused) and ``srt.compose``
writes them with their own indices and timings (``reindex=False``) and any text after the
timings; it writes times in the canonical ``00:00:01,000`` form.

WebVTT is read by a parser of its own, not webvtt-py: webvtt-py 0.6 rewrites what it does not
translate (it puts REGION blocks before STYLE blocks, moves a NOTE's first line to a line of its
own, splits a REGION's settings over lines, writes ``00:05.000`` as ``00:00:05.000``). Here the
file is cut into blocks at blank lines; a block whose first or second line has ``-->`` is a cue
(a bad timing line is refused, naming its line), and only a cue's text lines are ever
rewritten: the header, NOTE, STYLE and REGION blocks, cue identifiers, timings and cue settings
(``line:0 position:10%``) are copied as they are. Entities (``&amp;``, ``&lt;``, ``&nbsp;``...)
reach the translator decoded and ``& < >`` are escaped again.

Styling stays where the translation puts its words: ``<i>``, ``<b>``, ``<u>``, ``<font
color=..>``, ``<c.class>``, ``<ruby>``, ``<lang en>`` with their end tags are pairs; a tag
without its end (WebVTT's ``<v Speaker>``, whose end is optional), a timestamp tag and SubRip's
``{\\an8}``-style override codes are atomic.

Lines: a cue's lines are one run of text (a sentence may go on over the line break). When its
translation differs, the cue's text is written on at most as many lines as it had: on one line
when it fits in 42 characters (the line length of Netflix's and the BBC's subtitle guidelines,
which keep a subtitle on one line when it fits), else cut at spaces into
``ceil(length / 42)`` lines, at most the original count, of about equal length
(``_xliff.wrap_lines``); a long translation of a one-line cue stays on one line. A dialogue cue,
every line starting with ``-``, keeps one line per speaker: each line is a run of its own.
"""

from __future__ import annotations

import re

from ._core import DocumentError
from ._files import Extracted, Part
from ._inline import Token, inline_part, inline_tokens, markup_tokens, wrap_lines

LINE_WIDTH = 42
_OVERRIDE = re.compile(r"\{\\[^{}]*\}")  # SubRip's ASS override codes: {\an8}, {\i1}
_VTT_TIMING_RE = re.compile(r"^[ \t]*(?:[0-9]+:)?[0-9]{2}:[0-9]{2}\.[0-9]{3}[ \t]+-->[ \t]+"
                            r"(?:[0-9]+:)?[0-9]{2}:[0-9]{2}\.[0-9]{3}(?:[ \t].*)?$")
_VTT_ENTITIES = {"amp": "&", "lt": "<", "gt": ">", "nbsp": "\u00a0", "lrm": "\u200e", "rlm": "\u200f"}
_VTT_ENTITY_RE = re.compile(r"&(amp|lt|gt|nbsp|lrm|rlm|#[0-9]+|#x[0-9a-fA-F]+);")


def _vtt_decode(text: str) -> str:
    def one(m: re.Match) -> str:
        ref = m.group(1)
        if ref[0] == "#":
            return chr(int(ref[2:], 16) if ref[1] in "xX" else int(ref[1:]))
        return _VTT_ENTITIES[ref]
    return _VTT_ENTITY_RE.sub(one, text)


def _vtt_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


class _Cue:
    """One cue's text (lines joined by LF): its part, and its text again from the rendered part."""

    def __init__(self, text: str, vtt: bool):
        self.source = text
        self.lines = text.count("\n") + 1
        self.dialogue = self.lines > 1 and all(line.lstrip().startswith("-") for line in text.split("\n"))
        if vtt:
            self.tokens, self.markup = markup_tokens(text, decode=_vtt_decode, escape=_vtt_escape)
        else:
            self.tokens, self.markup = markup_tokens(text, _OVERRIDE)
        self.part: Part = inline_part(self.tokens, split_on_newlines=self.dialogue)

    def text(self, rendered: str) -> str:
        if rendered == self.part.text:
            return self.source
        tokens: list[Token] = inline_tokens(rendered, self.tokens)
        if not self.dialogue:
            tokens = wrap_lines(tokens, self.lines, LINE_WIDTH)
        return self.markup.text(tokens).replace("-->", "->")


def _decode(data: bytes, fmt: str) -> tuple[str, bool, str]:
    """The text (LF line breaks), whether it had a byte-order mark, its line ending."""
    if not data.strip():
        raise DocumentError(f"the {fmt} file is empty")
    bom = data.startswith(b"\xef\xbb\xbf")
    try:
        text = data[3 if bom else 0:].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DocumentError(f"the {fmt} file is not UTF-8 text ({exc})") from None
    if "\x00" in text:
        raise DocumentError(f"the {fmt} file holds NUL characters: binary data, not subtitles")
    eol = "\r\n" if "\r\n" in text else "\n"
    return text.replace("\r\n", "\n").replace("\r", "\n"), bom, eol


def _encode(text: str, bom: bool, eol: str) -> bytes:
    return (b"\xef\xbb\xbf" if bom else b"") + text.replace("\n", eol).encode("utf-8")


def _read_srt(data: bytes) -> Extracted:
    try:
        import srt
    except ImportError as exc:
        raise DocumentError(f"this server cannot read srt files: it lacks the Python package srt ({exc})") from None
    text, bom, eol = _decode(data, "srt")
    try:
        subtitles = list(srt.parse(text))
    except (srt.SRTParseError, ValueError) as exc:
        raise DocumentError(f"the srt file is not SubRip subtitles ({exc})") from None
    if not subtitles:
        raise DocumentError("the srt file holds no subtitles")
    cues = {i: _Cue(s.content, vtt=False) for i, s in enumerate(subtitles) if s.content.strip()}

    def write(texts: list[str]) -> bytes:
        out = [srt.Subtitle(s.index, s.start, s.end, s.content, s.proprietary) for s in subtitles]
        for (i, cue), rendered in zip(cues.items(), texts, strict=True):
            out[i].content = cue.text(rendered)
        return _encode(srt.compose(out, reindex=False), bom, eol)

    return Extracted([cue.part for cue in cues.values()], write)


def _read_vtt(data: bytes) -> Extracted:
    text, bom, eol = _decode(data, "vtt")
    lines = text.split("\n")
    if not re.match(r"WEBVTT(?:[ \t]|$)", lines[0]):
        raise DocumentError("the vtt file is not WebVTT: its first line is not 'WEBVTT'")
    cues: dict[tuple[int, int], _Cue] = {}  # (first, end) line of a cue's text -> the cue
    i = 0
    while i < len(lines):
        if not lines[i].strip():
            i += 1
            continue
        start = i
        while i < len(lines) and lines[i].strip():
            i += 1
        block = lines[start:i]
        if start == 0 or block[0].startswith(("NOTE", "STYLE", "REGION")) and "-->" not in block[0]:
            continue  # the header, a comment, a style sheet or a region: kept as written
        timing = 0 if "-->" in block[0] else 1
        if timing >= len(block) or "-->" not in block[timing]:
            raise DocumentError(f"the vtt file's block at line {start + 1} is neither a cue nor a NOTE, "
                                f"STYLE or REGION block")
        if not _VTT_TIMING_RE.match(block[timing]):
            raise DocumentError(f"the vtt file's line {start + timing + 1} is not a cue timing: "
                                f"{block[timing][:80]!r}")
        body = block[timing + 1:]
        if "\n".join(body).strip():
            cues[(start + timing + 1, i)] = _Cue("\n".join(body), vtt=True)

    def write(texts: list[str]) -> bytes:
        out = list(lines)
        for ((first, end), cue), rendered in reversed(list(zip(cues.items(), texts, strict=True))):
            out[first:end] = cue.text(rendered).split("\n")
        return _encode("\n".join(out), bom, eol)

    return Extracted([cue.part for cue in cues.values()], write)


def read(data: bytes, fmt: str) -> Extracted:
    return _read_srt(data) if fmt == "srt" else _read_vtt(data)

