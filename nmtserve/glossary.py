"""Glossaries: source terms found in a text, and the entry files people keep (TSV, CSV).

Shared by the server (``tokenize`` gives each sentence of a text the terms whose source words
it holds), the client (``glossary=``, the CLI's ``--glossary FILE``) and the gateway's glossary
store. Standard library only.

A source term is found case-insensitively, on word boundaries, whitespace between its words
ignored, longest match first (then leftmost), none overlapping another: with entries "car" and
"car park", "The Car  Park is full" finds "car park" once.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from . import contract

TERM_BYTES = 1024  # DeepL's limit on a term and on a glossary's name
# What a term may not hold (DeepL's rule, as its Python client checks it): C0 and C1 control
# characters and Unicode's line and paragraph separators.
FORBIDDEN = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
# A word, or one character that is neither a word character nor a space: what terms and texts
# are compared by.
_TOKEN = re.compile(r"\w+|[^\w\s]")


class EntriesFormatError(ValueError):
    """Entries that cannot be read; the message names the entry (index from 0, where it starts)."""


def term_key(text: str) -> str:
    """How terms compare: case folded, whitespace between tokens ignored."""
    return " ".join(_TOKEN.findall(text.casefold()))


class TermFinder:
    """Every source term indexed by its first token; a text is read token by token, each place
    tried against the terms that start with its token."""

    def __init__(self, sources: Iterable[str]) -> None:
        self._by_first: dict[str, list[tuple[int, str, str]]] = {}
        for source in sources:
            tokens = _TOKEN.findall(source.casefold())
            if tokens:
                self._by_first.setdefault(tokens[0], []).append((len(tokens), term_key(source), source))

    def find(self, text: str) -> list[tuple[int, int, str]]:
        """The source terms in ``text``: (start, end, the term as given), in text order."""
        if not self._by_first:
            return []
        spans = [(m.start(), m.end()) for m in _TOKEN.finditer(text)]
        words = [text[a:b].casefold() for a, b in spans]
        found: list[tuple[int, int, str]] = []
        for i, word in enumerate(words):
            for count, key, source in self._by_first.get(word, ()):
                if i + count <= len(words) and " ".join(words[i:i + count]) == key:
                    start, end = spans[i][0], spans[i + count - 1][1]
                    if _whole_words(text, start, end):
                        found.append((start, end, source))
        # Longest first (then leftmost), none overlapping one taken before it.
        found.sort(key=lambda f: (f[0] - f[1], f[0]))
        taken: list[tuple[int, int, str]] = []
        for start, end, source in found:
            if all(end <= a or start >= b for a, b, _ in taken):
                taken.append((start, end, source))
        return sorted(taken)


def _whole_words(text: str, start: int, end: int) -> bool:
    """Whether ``text[start:end]`` neither starts nor ends inside a word (a casefolded token can
    split a word the text's tokens do not: "ß" -> "ss")."""
    before = start > 0 and text[start - 1].isalnum() and text[start].isalnum()
    after = end < len(text) and text[end].isalnum() and text[end - 1].isalnum()
    return not (before or after)


def glossary_terms(text: str, entries: Mapping[str, str], finder: TermFinder | None = None) -> list[dict[str, str]]:
    """The TERMS items of ``text`` under ``entries`` ({source term: target term}): one
    ``{"source": words as the text has them, "target": target term}`` per distinct target term
    found, in text order; of more than ``contract.TERMS_LIMIT``, those of the longest sources."""
    found = (finder or TermFinder(entries)).find(text)
    first: dict[str, tuple[int, int, str]] = {}
    for start, end, source in found:
        target = entries[source]
        if target not in first or end - start > first[target][1] - first[target][0]:
            first[target] = (start, end, source)
    chosen = sorted(first.items(), key=lambda item: (item[1][0] - item[1][1], item[1][0]))[:contract.TERMS_LIMIT]
    chosen.sort(key=lambda item: item[1][0])
    return [{"source": text[start:end], "target": target} for target, (start, end, _) in chosen]


# -- entry files


def tsv_rows(text: str) -> list[tuple[int, str, str]]:
    """(where the line starts, source, target) of each non-blank line: exactly one tab each."""
    rows, position = [], 0
    for line in text.splitlines(keepends=True):
        start, body = position, line.rstrip("\r\n")
        position += len(line)
        if not body.strip():
            continue
        if body.count("\t") != 1:
            raise EntriesFormatError(f"Entry with the index {len(rows)} (starting at position {start}) "
                                     + ("holds no tab between its source and target term" if "\t" not in body
                                        else "holds more than one tab"))
        source, target = body.split("\t")
        rows.append((start, source.strip(), target.strip()))
    return rows


def csv_rows(text: str, source_lang: str = "", target_lang: str = "") -> list[tuple[int, str, str]]:
    """RFC 4180 rows of two columns (source, target) or four (and the languages, which must be
    ``source_lang``-``target_lang`` when those are given)."""
    rows = []
    lines = text.splitlines(keepends=True)
    starts = [sum(len(x) for x in lines[:i]) for i in range(len(lines))]
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    try:
        for row in reader:
            start = starts[min(reader.line_num - 1, len(starts) - 1)] if starts else 0
            if not any(cell.strip() for cell in row):
                continue
            where = f"Entry with the index {len(rows)} (starting at position {start})"
            if len(row) == 4:
                langs = (row[2].strip().lower(), row[3].strip().lower())
                if (source_lang or target_lang) and langs != (source_lang, target_lang):
                    raise EntriesFormatError(f"{where} is for {langs[0]}-{langs[1]}, not the glossary's "
                                             f"{source_lang}-{target_lang}")
            elif len(row) != 2:
                raise EntriesFormatError(f"{where} has {len(row)} columns (2: source,target; or 4: "
                                         "source,target,source_lang,target_lang)")
            rows.append((start, row[0].strip(), row[1].strip()))
    except csv.Error as exc:
        raise EntriesFormatError(f"the CSV cannot be read at line {reader.line_num}: {exc}") from None
    return rows


def entries_of(rows: Sequence[tuple[int, str, str]]) -> dict[str, str]:
    """{source: target} of rows, naming the entry with an empty term, a forbidden character, a
    term over ``TERM_BYTES`` or a source given twice."""
    entries: dict[str, str] = {}
    first: dict[str, int] = {}
    for index, (position, source, target) in enumerate(rows):
        where = f"Entry with the index {index} (starting at position {position})"
        for side, term in (("source", source), ("target", target)):
            if not term:
                raise EntriesFormatError(f"{where} has an empty {side} term")
            if FORBIDDEN.search(term):
                raise EntriesFormatError(f"{where} has a {side} term with a control character or line separator")
            if len(term.encode("utf-8")) > TERM_BYTES:
                raise EntriesFormatError(f"{where} has a {side} term over {TERM_BYTES} UTF-8 bytes")
        if source in entries:
            raise EntriesFormatError(f"Key with the index {index} (starting at position {position}) duplicates key "
                                     f"with the index {first[source]}")
        entries[source], first[source] = target, index
    return entries


def read_glossary(path: str | Path) -> dict[str, str]:
    """A glossary file's entries: .csv is CSV, anything else TSV (source TAB target per line).
    ValueError naming the file and the entry when it cannot be read or holds no entry."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read the glossary {path}: {exc}") from None
    try:
        entries = entries_of(csv_rows(text) if path.suffix.lower() == ".csv" else tsv_rows(text))
    except EntriesFormatError as exc:
        raise ValueError(f"the glossary {path}: {exc}") from None
    if not entries:
        raise ValueError(f"the glossary {path} holds no entry (one 'source<TAB>target' per line)")
    return entries
