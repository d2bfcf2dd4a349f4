"""Inline markup put back by word alignment, for models that do not carry placeholders.

The sentence went to the model without its placeholders (``Segmented.without_markup``); its
translation came back with a word alignment (``nmtserve.alignment``: pairs of source word, target
word over the whitespace-separated words of the two). ``place`` writes the placeholders into the
translation: each pair ``<gN>...</gN>`` around the target words aligned to the source words it
wrapped (from the first to the last of them), each atomic ``<xN/>`` after the target word aligned
to the source word before it. ``_render_sentence`` then turns them into the source markup as for
a model that carried them. The text is the translation's, word for word.

Nesting stays valid: pairs are placed outermost first; a pair nested in another in the source is
kept inside that one's target words (cut to them), and a pair whose target words would cross or
share those of a pair beside it in the source is dropped (its text stays, its formatting goes),
as is a pair none of whose source words has an aligned target word. A closing tag goes before
the punctuation that ends a target word when the source's last wrapped word ended without it
("<b>rouges</b>."), an opening tag after the punctuation a word starts with.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ._core import _CLOSE, _CODE, _OPEN, _Code, _Slot

_EDGE_PUNCTUATION = "\"'.,;:!?)]}»«([{¿¡…“”‘’"
_TRAILING = re.compile(rf"[{re.escape(_EDGE_PUNCTUATION)}]+$")
_LEADING = re.compile(rf"^[{re.escape(_EDGE_PUNCTUATION)}]+")
_ELISION = re.compile(r"^[^\W\d_]{1,3}['\u2019](?=\w)")  # "L'oiseau", "d'eau", "qu'il"


def _marker(kind: int, number: int) -> str:
    return {_CODE: f"<x{number}/>", _OPEN: f"<g{number}>"}.get(kind, f"</g{number}>")


def source_layout(slot: _Slot) -> tuple[list[str], dict[int, tuple[int, int, bool, bool]], list[tuple[int, int]]]:
    """The sentence as a reader sees it without placeholders: its words (a pair's markers take
    no room, "<g1>red</g1>." is "red."; an atomic code is a space), each pair's words [start, end)
    by number with whether its text starts and ends without edge punctuation, and each atomic
    code's (number, words before it). ``without_markup`` is the words
    joined by single spaces."""
    markers = {_marker(c.kind, c.number): c for c in slot.codes}
    if not markers:
        return slot.sentence.split(), {}, []
    pattern = re.compile("|".join(re.escape(m) for m in sorted(markers, key=len, reverse=True)))
    plain: list[str] = []
    length = 0
    at: list[tuple[_Code, int]] = []  # each marker's offset in the plain text
    pos = 0
    seen: set[str] = set()
    for m in pattern.finditer(slot.sentence):
        if m.group() in seen:  # a repeated marker is text
            continue
        seen.add(m.group())
        text = slot.sentence[pos:m.start()]
        plain.append(text)
        length += len(text)
        code = markers[m.group()]
        at.append((code, length))
        if code.kind == _CODE:
            plain.append(" ")
            length += 1
        pos = m.end()
    plain.append(slot.sentence[pos:])
    text = "".join(plain)
    spans = [(w.start(), w.end()) for w in re.finditer(r"\S+", text)]
    words = [text[s:e] for s, e in spans]

    def before(offset: int) -> int:  # words that start before ``offset``
        return sum(1 for s, _ in spans if s < offset)

    opened: dict[int, tuple[int, int]] = {}
    pairs: dict[int, tuple[int, int, bool, bool]] = {}
    atomic: list[tuple[int, int]] = []
    for code, offset in at:
        if code.kind == _OPEN:
            opened[code.number] = (sum(1 for _, e in spans if e <= offset), offset)  # the first word ending after it
        elif code.kind == _CLOSE and code.number in opened:
            first, start = opened.pop(code.number)
            inside = text[start:offset].strip()
            pairs[code.number] = (first, before(offset), inside[:1] not in _EDGE_PUNCTUATION,
                                  inside[-1:] not in _EDGE_PUNCTUATION)
        elif code.kind == _CODE:
            atomic.append((code.number, before(offset)))
    return words, pairs, atomic


def place(slot: _Slot, translation: str, alignment: Sequence[tuple[int, int]]) -> str:
    """``translation`` (of ``slot``'s sentence without placeholders) with the slot's placeholders
    written around the words ``alignment`` (source word, target word) maps them to."""
    target = translation.split()
    _, pairs, atomic = source_layout(slot)
    if not target or not (pairs or atomic):
        return " ".join(target)
    to_target: dict[int, list[int]] = {}
    to_source: dict[int, set[int]] = {}
    for s, t in alignment:
        if 0 <= t < len(target):
            to_target.setdefault(s, []).append(t)
            to_source.setdefault(t, set()).add(s)
    elided: set[int] = set()  # target words whose elided article stays outside the tag opened on them
    # Markers before / after each target word, each with whether it goes inside the word's own
    # edge punctuation (the source word at that edge had none).
    before: list[list[tuple[str, bool]]] = [[] for _ in target]
    after: list[list[tuple[str, bool]]] = [[] for _ in target]
    placed: list[tuple[int, int, int, int]] = []  # (source start, source end, target lo, target hi)
    # Outermost first: by source start, then the wider first.
    for number, (a, b, starts_bare, ends_bare) in sorted(pairs.items(), key=lambda kv: (kv[1][0], kv[1][0] - kv[1][1])):
        hits = [t for s in range(a, b) for t in to_target.get(s, ())]
        if not hits:
            continue
        lo, hi = min(hits), max(hits)
        ok = True
        for sa, sb, tlo, thi in placed:
            if sa <= a and b <= sb:  # nested in the source: nested in the target
                lo, hi = max(lo, tlo), min(hi, thi)
                if lo > hi:
                    ok = False
            elif not (hi < tlo or thi < lo):  # beside it in the source, sharing words in the target
                ok = False
        if not ok:
            continue
        placed.append((a, b, lo, hi))
        if _ELISION.match(target[lo]) and any(s < a for s in to_source.get(lo, ())):
            elided.add(lo)  # "L'" renders "The", before the span: "L'<b>oiseau</b>"
        before[lo].append((_marker(_OPEN, number), starts_bare))
        after[hi].insert(0, (_marker(_CLOSE, number), ends_bare))  # an inner pair closes first
    leading: list[tuple[str, bool]] = []  # placeholders before every aligned word: at the start, in order
    for number, anchor in atomic:
        hits = [t for s in range(anchor) for t in to_target.get(s, ())]
        if hits:
            after[max(hits)].append((" " + _marker(_CODE, number), False))
        else:
            leading.append((_marker(_CODE, number) + " ", False))
    if leading:
        before[0][0:0] = leading
    out = []
    for i, word in enumerate(target):
        lead = _ELISION.match(word) if i in elided else _LEADING.search(word)
        trail = _TRAILING.search(word)
        head = lead.group() if lead and lead.end() < len(word) else ""
        tail = trail.group() if trail and trail.start() > len(head) else ""
        core = word[len(head): len(word) - len(tail)]
        # A marker goes inside the word's edge punctuation only when its source edge had none.
        outer_opens = "".join(m for m, bare in before[i] if not (bare and head))
        inner_opens = "".join(m for m, bare in before[i] if bare and head)
        inner_closes = "".join(m for m, bare in after[i] if bare and tail)
        outer_closes = "".join(m for m, bare in after[i] if not (bare and tail))
        text = outer_opens + head + inner_opens + core + inner_closes + tail + outer_closes
        out.append(text)
    return " ".join(out)
