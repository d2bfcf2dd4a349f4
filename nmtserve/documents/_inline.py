"""Inline codes of message-like formats (XLIFF, gettext, subtitles) as an XML fragment part.

A text is a list of tokens: text, and numbered codes (the opening and closing markers of a
pair, or an atomic code) that stand for what the format holds there (an XLIFF ``<g>``, a
printf ``%s``, a subtitle's ``<i>``). ``inline_part`` shows them to the translator as an XML
fragment (``<pN>``...``</pN>``, ``<aN/>``), ``inline_tokens`` reads a rendered fragment back,
repairing what the translation did (pairs re-nested, a stray or crossing marker dropped, each
atomic code exactly once: a repeat dropped, a lost one appended), ``markup_tokens`` reads
HTML-like tags into tokens, and ``wrap_lines`` is the subtitles' line rule.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

from ._files import Part
from ._xml import XmlRules

TEXT, OPEN, CLOSE, ATOM = range(4)
Token = tuple[int, "str | int"]  # (TEXT, text) or (OPEN/CLOSE/ATOM, the code's number)

_CODE_TAG_RE = re.compile(r"<(/?)([pa])([0-9]+)\s*(/?)>")
_REFERENCE_RE = re.compile(r"&(#[0-9]+|#x[0-9a-fA-F]+|amp|lt|gt|quot|apos);")
_PREDEFINED = {"amp": "&", "lt": "<", "gt": ">", "quot": '"', "apos": "'"}


def _xml_text(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _unescape(text: str) -> str:
    def one(m: re.Match) -> str:
        ref = m.group(1)
        if ref[0] != "#":
            return _PREDEFINED[ref]
        return chr(int(ref[2:], 16) if ref[1] == "x" else int(ref[1:]))
    return _REFERENCE_RE.sub(one, text)


def inline_part(tokens: list[Token], *, split_on_newlines: bool = False) -> Part:
    """The part for a text with inline codes: an XML fragment whose ``<pN>``...``</pN>`` stand for
    pair N and ``<aN/>`` for atomic code N (nothing inside is shown to the translator)."""
    out: list[str] = []
    names: set[str] = set()
    for kind, value in tokens:
        if kind == TEXT:
            out.append(_xml_text(str(value)))
        elif kind == OPEN:
            out.append(f"<p{value}>")
            names.add(f"p{value}")
        elif kind == CLOSE:
            out.append(f"</p{value}>")
        else:
            out.append(f"<a{value}/>")
            names.add(f"a{value}")
    return Part("".join(out), "xml", XmlRules(non_splitting_tags=frozenset(names), outline_detection=False,
                                              split_on_newlines=split_on_newlines))


def inline_tokens(rendered: str, source: list[Token]) -> list[Token]:
    """A rendered fragment of ``inline_part(source)`` back as tokens, repaired: pairs properly
    nested (a stray or crossing end marker closes what it must or is dropped, a repeated pair
    keeps only its first markers), each atomic code exactly once (a repeat dropped, a lost one
    appended at the end), codes the source does not have read as text."""
    pairs = {value for kind, value in source if kind == OPEN}
    atoms = [value for kind, value in source if kind == ATOM]
    out: list[Token] = []
    stack: list[tuple[int, bool]] = []  # (pair, kept?)
    used: set[int] = set()

    def text(s: str) -> None:
        if not s:
            return
        if out and out[-1][0] == TEXT:
            out[-1] = (TEXT, str(out[-1][1]) + s)
        else:
            out.append((TEXT, s))

    pos = 0
    for m in _CODE_TAG_RE.finditer(rendered):
        text(_unescape(rendered[pos:m.start()]))
        pos = m.end()
        closing, letter, number, empty = m.group(1), m.group(2), int(m.group(3)), m.group(4)
        if letter == "a" and not closing and number in atoms:
            if number not in used:
                used.add(number)
                out.append((ATOM, number))
        elif letter == "p" and number in pairs and not (closing and empty):
            if not closing:
                keep = number not in used
                used.add(number)
                if keep:
                    out.append((OPEN, number))
                stack.append((number, keep))
                if empty:  # <pN/>: an empty pair
                    stack.pop()
                    if keep:
                        out.append((CLOSE, number))
            else:
                at = next((i for i in range(len(stack) - 1, -1, -1) if stack[i][0] == number), None)
                if at is None:
                    continue
                if not stack[at][1]:  # the end of a repeat: only it goes
                    del stack[at]
                    continue
                while len(stack) > at:
                    pair, keep = stack.pop()
                    if keep:
                        out.append((CLOSE, pair))
        else:
            text(m.group())
    text(_unescape(rendered[pos:]))
    while stack:
        pair, keep = stack.pop()
        if keep:
            out.append((CLOSE, pair))
    out.extend((ATOM, number) for number in atoms if number not in used)
    return out


def token_text(tokens: list[Token]) -> str:
    """The text of ``tokens``, codes left out."""
    return "".join(str(value) for kind, value in tokens if kind == TEXT)


def wrap_lines(tokens: list[Token], lines: int, width: int) -> list[Token]:
    """``tokens`` with their text on at most ``lines`` lines: every line break and the spaces
    around it become one space, then, when the text is longer than ``width`` characters and
    ``lines`` > 1, it is broken at spaces into ``min(lines, ceil(length / width))`` lines of
    about equal length (each break at the space nearest to its share of the text)."""
    joined: list[Token] = [(TEXT, re.sub(r"[ \t]*\n[ \t]*", " ", str(v))) if k == TEXT else (k, v)
                           for k, v in tokens]
    text = token_text(joined)
    count = min(lines, math.ceil(len(text) / width)) if width > 0 else 1
    if count <= 1:
        return joined
    spaces = [i for i, c in enumerate(text) if c == " " and 0 < i < len(text) - 1]
    breaks: list[int] = []
    for n in range(1, count):
        target = len(text) * n / count
        later = [i for i in spaces if not breaks or i > breaks[-1]]
        if later:
            breaks.append(min(later, key=lambda i: abs(i - target)))
    chosen = set(breaks)
    out: list[Token] = []
    at = 0
    for kind, value in joined:
        if kind == TEXT:
            s = str(value)
            out.append((TEXT, "".join("\n" if at + i in chosen else c for i, c in enumerate(s))))
            at += len(s)
        else:
            out.append((kind, value))
    return out


_TAG_RE = (r"(?P<tag><(?P<close>/?)(?P<name>[A-Za-z][A-Za-z0-9-]*)(?:\.[^\s<>./]+)*(?:[ \t][^<>]*?)?(?P<empty>/?)>)"
           r"|<[0-9]{2,}:[0-9:.]+>")  # a WebVTT timestamp: atomic
_VOID = frozenset("area br col embed hr img input link meta source track wbr".split())


class Markup:
    """The codes of a text read by ``markup_tokens``: ``text(tokens)`` writes tokens back as text."""

    def __init__(self, codes: list[str | tuple[str, str]], escape: Callable[[str], str]):
        self.codes, self.escape = codes, escape

    def text(self, tokens: list[Token]) -> str:
        out = []
        for kind, value in tokens:
            if kind == TEXT:
                out.append(self.escape(str(value)))
            else:
                code = self.codes[int(value)]
                out.append(code if isinstance(code, str) else code[0] if kind == OPEN else code[1])
        return "".join(out)


def markup_tokens(text: str, atoms: re.Pattern | None = None, *, decode: Callable[[str], str] = str,
                  escape: Callable[[str], str] = str) -> tuple[list[Token], Markup]:
    """A text with HTML-like tags as tokens: a start tag and the next end tag of its name that
    keeps the tags nested are a pair, every other tag (a void or empty element, one whose end is
    missing, a stray end) is atomic, as is every match of ``atoms``. ``decode`` gives the
    translator's view of the text between (entities), ``escape`` writes it back."""
    pattern = re.compile((f"(?P<atom>{atoms.pattern})|" if atoms is not None else "") + _TAG_RE)
    found = list(pattern.finditer(text))
    partner: dict[int, int] = {}  # start tag's match -> end tag's match
    stack: list[tuple[str, int]] = []
    for i, m in enumerate(found):
        if not m.group("tag") or m.group("empty") or m.group("name").lower() in _VOID:
            continue
        name = m.group("name").lower()
        if not m.group("close"):
            stack.append((name, i))
            continue
        at = next((k for k in range(len(stack) - 1, -1, -1) if stack[k][0] == name), None)
        if at is not None:
            partner[stack[at][1]] = i
            del stack[at:]
    tokens: list[Token] = []
    codes: list[str | tuple[str, str]] = []
    key_of: dict[int, int] = {}
    pos = 0
    for i, m in enumerate(found):
        if m.start() > pos:
            tokens.append((TEXT, decode(text[pos:m.start()])))
        pos = m.end()
        if i in partner:
            key_of[partner[i]] = len(codes)
            tokens.append((OPEN, len(codes)))
            codes.append((m.group(), found[partner[i]].group()))
        elif i in key_of:
            tokens.append((CLOSE, key_of[i]))
        else:
            tokens.append((ATOM, len(codes)))
            codes.append(m.group())
    if pos < len(text):
        tokens.append((TEXT, decode(text[pos:])))
    return tokens, Markup(codes, escape)
