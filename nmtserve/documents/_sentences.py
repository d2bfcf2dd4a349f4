"""Runs of pieces to sentences (sentencex), and a translated sentence back into its markup."""

from __future__ import annotations

import re
from collections.abc import Callable

import sentencex  # type: ignore[import-untyped]  # ships no type information

from ._core import _CLOSE, _CODE, _CODE_FOR_SEGMENTER, _DECODED, _OPEN, _TEXT, _Code, _Piece, _Slot

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
