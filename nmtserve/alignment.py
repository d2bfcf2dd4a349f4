"""Word alignments from the decoder's attention, in the Pharaoh format.

The decoder's ``attention`` output (the last layer's cross-attention averaged over its heads,
``nmtserve.model.transformer.alignment_layer``) gives, at each step, the source position each
hypothesis attended to most; the beam search carries it with the hypotheses, so every final
translation has one source position per generated token (``Hypothesis.alignment``). This module
turns those token positions into word pairs: the words are the whitespace-separated words of the
source sentence and of its translation, a sentencepiece piece starting with "▁" starts a word,
and each target word is aligned to the source word its first piece attended to most (measured
on the demo model: 98.1% of tagged units placed exactly, ``nmtserve.demo.tagged``).

    pairs = word_alignment(source_pieces, target_pieces, positions)   # [(0, 0), (2, 1), ...]
    format_pharaoh(pairs)                                              # "0-0 2-1"

Dependency-free (the client parses ALIGNMENT with ``parse_pharaoh``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

WORD_START = "\u2581"  # sentencepiece's "▁": the piece starts a new word
APOSTROPHES = "'\u2019"  # a piece ending with one is an elision ("l'", "d'", "qu'")
_PAIR = re.compile(r"(\d+)-(\d+)")


def piece_words(pieces: Sequence[str | None]) -> list[int]:
    """Per piece, the index of the word it belongs to; -1 for a special token (``None``: EOS, a
    language code, padding). A piece starting with "▁" starts a word (a bare "▁" starts the word
    its next piece continues); any other piece continues the current one."""
    out, word = [], -1
    for piece in pieces:
        if piece is None:
            out.append(-1)
            continue
        if piece.startswith(WORD_START) or word < 0:
            word += 1
        out.append(word)
    return out


def word_alignment(source_words: Sequence[int], target_pieces: Sequence[str | None],
                   positions: Sequence[int]) -> list[tuple[int, int]]:
    """(source word, target word) pairs, sorted by target word: ``source_words`` are
    ``piece_words`` of the source ids, ``target_pieces`` the generated ids' pieces (None for the
    specials), ``positions`` each generated token's most attended source position.

    Each target word is aligned by its first piece that holds a letter or digit (a bare "▁"
    piece attends where the next word's space is); an elided word ("L'oiseau") also by the piece
    after its apostrophe, so it aligns to both "The" and "bird"; then ``fill_gaps``."""
    def source_word(position: int) -> int:
        return source_words[position] if 0 <= position < len(source_words) else -1

    target_words = piece_words(target_pieces)
    pairs: list[tuple[int, int]] = []
    elided: list[tuple[int, int]] = []
    seen: set[int] = set()
    after_apostrophe = False
    for t_word, piece, position in zip(target_words, target_pieces, positions, strict=False):
        if t_word < 0 or piece is None:
            continue
        if t_word not in seen:
            if piece.strip(WORD_START):  # the word's first piece with content
                seen.add(t_word)
                if source_word(position) >= 0:
                    pairs.append((source_word(position), t_word))
        elif after_apostrophe and source_word(position) >= 0:  # "L'|oiseau": the word after an elision
            elided.append((source_word(position), t_word))
        after_apostrophe = piece[-1:] in APOSTROPHES
    pairs = fill_gaps(pairs, max(source_words, default=-1) + 1)
    return sorted({*pairs, *elided}, key=lambda p: (p[1], p[0]))


def fill_gaps(pairs: Sequence[tuple[int, int]], source_words: int) -> list[tuple[int, int]]:
    """Give a source word that no target word attended to the target word right after the
    previous source words' targets, when that word opens a run of two or more aligned to one
    later source word: the decoder writes a function word while attending to what it introduces
    ("at 7:45" -> "à 7 h 45": "à" attends to "7:45", "at" gets nothing; "three hundred yellow
    birds" -> "trois cents oiseaux jaunes": "cents" attends to "birds"). Nothing else moves.
    Measured on the demo's tagged sentences (bench/tags.py): times 0/66 -> 66/66 exact."""
    by_target = dict((t, s) for s, t in pairs)
    for gap in range(1, source_words):
        if gap in by_target.values():
            continue
        before = [t for t, s in by_target.items() if s < gap]
        if not before:
            continue
        first = max(before) + 1
        later = by_target.get(first, -1)
        run = sorted(t for t, s in by_target.items() if s == later)
        if later > gap and len(run) >= 2 and run[0] == first:
            by_target[first] = gap
    return sorted(((s, t) for t, s in by_target.items()), key=lambda p: p[1])


def format_pharaoh(pairs: Sequence[tuple[int, int]]) -> str:
    """"0-0 1-2 2-1": source word - target word, each from 0."""
    return " ".join(f"{s}-{t}" for s, t in pairs)


def parse_pharaoh(text: str) -> list[tuple[int, int]]:
    """The pairs of a Pharaoh-format string; ValueError names a malformed pair."""
    pairs = []
    for item in text.split():
        match = _PAIR.fullmatch(item)
        if match is None:
            raise ValueError(f"not a Pharaoh alignment pair (source-target): {item!r}")
        pairs.append((int(match.group(1)), int(match.group(2))))
    return pairs


def shift(pairs: Sequence[tuple[int, int]], source: int, target: int) -> list[tuple[int, int]]:
    """``pairs`` with ``source`` / ``target`` words before them (a sentence inside a longer text)."""
    return [(s + source, t + target) for s, t in pairs]
