"""Plain text: blank lines separate runs; nothing is escaped."""

from __future__ import annotations

from ._core import _TEXT, _lines, _Piece

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


# -- escaping of translated text

def _plain_escape(text: str, at_start: bool) -> str:
    return text
