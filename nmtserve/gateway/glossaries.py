"""Glossaries: a key's own term lists (source term -> target term), kept on disk, and the
terms each text holds.

A glossary (DeepL's v2 glossary) has an id (a UUID), a name, a source and a target language
(the language alone, lower case: "en", "fr"), its entries in order, and a creation time; it is
immutable (DeepL's too: a new version is a new glossary). Each is one JSON file, written
atomically (a temporary file renamed over), in a folder per owner under ``--glossaries-dir``:
the owner is the SHA-256 of the API key (the key itself is never written down), or ``shared``
when the gateway has no keys. So a key sees only its own glossaries, and they survive a restart
of the gateway (and are shared by gateways that share the folder).

Limits (``config.Limits``): entries per glossary (``--max-glossary-entries``), bytes of its
entries as TSV (``--max-glossary-bytes``), glossaries per key (``--max-glossaries``); each
source or target term, and the name, at most ``TERM_BYTES`` UTF-8 bytes (DeepL's 1024).

Applying a glossary (``Glossary.terms``): its source terms are found in a sentence without
regard to case, on word boundaries (a term neither starts nor ends inside a word: "car" is not
found in "cards"), longest first, none overlapping another (with "red car" and "car", "the red
car" holds "red car" only). Each found term asks for its target term (the server's ``TERMS``:
the translation must contain it, ``docs/contract.md#terminology``); a term found twice is asked
for once, and at most ``contract.TERMS_LIMIT`` per sentence (the longest) are asked for.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import os
import re
import tempfile
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from .. import contract
from ..glossary import (
    FORBIDDEN,
    TERM_BYTES,
    EntriesFormatError,
    TermFinder,
    csv_rows,
    entries_of,
    tsv_rows,
)
from .config import Limits
from .errors import BadRequest, NotFound, TooLarge

LOGGER = logging.getLogger(__name__)

FORMATS = ("tsv", "csv")
SHARED = "shared"  # the owner of every glossary when the gateway has no API keys
INVALID_ENTRIES = "Invalid glossary entries provided"  # DeepL's message; the detail says where
NOT_FOUND = "Glossary not found"
_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


class EntriesError(BadRequest):
    """Entries that cannot be read: DeepL's "Invalid glossary entries provided", with a detail
    naming the entry."""

    def __init__(self, detail: str) -> None:
        super().__init__(f"{INVALID_ENTRIES}: {detail}")
        self.detail = detail


def default_directory() -> Path:
    """Where glossaries are kept without ``--glossaries-dir``: $NMTSERVE_STATE_DIR/glossaries,
    else $XDG_STATE_HOME/nmtserve/glossaries, else ~/.local/state/nmtserve/glossaries."""
    own = os.environ.get("NMTSERVE_STATE_DIR")
    if own:
        return Path(own).expanduser() / "glossaries"
    xdg = os.environ.get("XDG_STATE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".local" / "state") / "nmtserve" / "glossaries"





@dataclass(frozen=True)
class Glossary:
    glossary_id: str
    name: str
    source_lang: str  # the language alone, lower case: "en"
    target_lang: str
    entries: Mapping[str, str]  # source term -> target term, in the order given
    creation_time: str = ""  # ISO 8601, UTC: "2026-12-04T18:00:07.123Z"
    _finder: TermFinder = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_finder", TermFinder(self.entries))

    @property
    def entry_count(self) -> int:
        return len(self.entries)

    def info(self) -> dict[str, object]:
        """DeepL's GlossaryInfo."""
        return {"glossary_id": self.glossary_id, "name": self.name, "ready": True,
                "source_lang": self.source_lang, "target_lang": self.target_lang,
                "creation_time": self.creation_time, "entry_count": self.entry_count}

    def tsv(self) -> str:
        return "".join(f"{s}\t{t}\n" for s, t in self.entries.items())

    def find(self, text: str) -> list[tuple[int, int, str]]:
        """The source terms found in ``text``: (start, end, the entry's source term), in order."""
        return self._finder.find(text)

    def terms(self, text: str) -> list[str]:
        """The target terms ``text`` asks for: one per distinct term found, in the order found;
        of more than ``contract.TERMS_LIMIT``, the longest found."""
        found = self.find(text)
        targets = list(dict.fromkeys(self.entries[source] for _, _, source in found))
        if len(targets) > contract.TERMS_LIMIT:
            length: dict[str, int] = {}
            for start, end, source in found:
                target = self.entries[source]
                length[target] = max(length.get(target, 0), end - start)
            kept = set(sorted(targets, key=lambda t: -length[t])[:contract.TERMS_LIMIT])
            targets = [t for t in targets if t in kept]
        return targets


# -- reading entries


def parse_entries(text: object, fmt: object, source_lang: str = "", target_lang: str = "") -> dict[str, str]:
    """DeepL's ``entries`` in ``entries_format`` ("tsv": a tab between source and target, "csv":
    RFC 4180, two columns, or four with the languages), as {source: target}; EntriesError
    naming the entry (by its index from 0 and where it starts, as DeepL's detail does) for a
    line without its two terms, an empty term, a forbidden character, a term over
    ``TERM_BYTES``, or a source given twice."""
    if fmt not in FORMATS:
        raise BadRequest("Value for 'entries_format' not supported." if fmt else
                         "Parameter 'entries_format' not specified.")
    if not isinstance(text, str) or not text.strip():
        raise BadRequest("Parameter 'entries' not specified." if not text else
                         f"{INVALID_ENTRIES}: no entry given")
    try:
        entries = entries_of(tsv_rows(text) if fmt == "tsv" else csv_rows(text, source_lang, target_lang))
    except EntriesFormatError as exc:
        raise EntriesError(str(exc)) from None
    if not entries:
        raise BadRequest(f"{INVALID_ENTRIES}: no entry given")
    return entries


def tsv_bytes(entries: Mapping[str, str]) -> int:
    return sum(len(s.encode("utf-8")) + len(t.encode("utf-8")) + 2 for s, t in entries.items())


def check_size(entries: Mapping[str, str], limits: Limits) -> None:
    """TooLarge naming the limit when ``entries`` are over one of a glossary's."""
    if limits.max_glossary_entries != -1 and len(entries) > limits.max_glossary_entries:
        raise TooLarge(f"Invalid glossary: {len(entries)} entries, over the limit of {limits.max_glossary_entries} "
                       "entries per glossary (--max-glossary-entries).")
    size = tsv_bytes(entries)
    if limits.max_glossary_bytes != -1 and size > limits.max_glossary_bytes:
        raise TooLarge(f"Invalid glossary: its entries hold {size} bytes, over the limit of "
                       f"{limits.max_glossary_bytes} bytes per glossary (--max-glossary-bytes).")


# -- the store


class GlossaryStore:
    """Each owner's glossaries, one JSON file each under ``directory/OWNER/``; the folder is made
    at the first glossary. Glossaries are immutable, so one read from disk is kept (by id) while
    its file is there."""

    def __init__(self, directory: Path | None, limits: Limits | None = None) -> None:
        self.directory = Path(directory) if directory is not None else default_directory()
        self.limits = limits if limits is not None else Limits()
        self._cache: dict[str, Glossary] = {}

    @staticmethod
    def owner(key: str | None) -> str:
        """The folder of ``key``'s glossaries (None: no keys, one shared space)."""
        return SHARED if key is None else hashlib.sha256(key.encode("utf-8")).hexdigest()[:32]

    def _folder(self, key: str | None) -> Path:
        return self.directory / self.owner(key)

    def create(self, key: str | None, name: object, source_lang: str, target_lang: str,
               entries: Mapping[str, str]) -> Glossary:
        if not isinstance(name, str) or not name.strip():
            raise BadRequest("Parameter 'name' not specified.")
        if len(name.encode("utf-8")) > TERM_BYTES or FORBIDDEN.search(name):
            raise BadRequest(f"Value for 'name' not supported: at most {TERM_BYTES} UTF-8 bytes, no control "
                             "characters.")
        check_size(entries, self.limits)
        folder = self._folder(key)
        count = len(self._files(folder))
        if self.limits.max_glossaries != -1 and count >= self.limits.max_glossaries:
            raise TooLarge(f"Too many glossaries: this key has {count}, the limit (--max-glossaries); delete one "
                           "first.")
        now = dt.datetime.now(dt.timezone.utc)
        glossary = Glossary(str(uuid.uuid4()), name, source_lang, target_lang, dict(entries),
                            now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond // 1000:03d}Z")
        folder.mkdir(parents=True, exist_ok=True)
        _write_atomically(folder / f"{glossary.glossary_id}.json", json.dumps({
            "glossary_id": glossary.glossary_id, "name": name, "source_lang": source_lang,
            "target_lang": target_lang, "creation_time": glossary.creation_time,
            "entries": [[s, t] for s, t in glossary.entries.items()],  # a list: the order kept
        }, ensure_ascii=False))
        self._cache[glossary.glossary_id] = glossary
        return glossary

    def get(self, key: str | None, glossary_id: object) -> Glossary:
        """``key``'s glossary by its id; NotFound ("Glossary not found") otherwise, whoever owns it."""
        if not isinstance(glossary_id, str) or not _ID.fullmatch(glossary_id):
            raise NotFound(NOT_FOUND)
        path = self._folder(key) / f"{glossary_id}.json"
        if not path.is_file():
            self._cache.pop(glossary_id, None)
            raise NotFound(NOT_FOUND)
        found = self._cache.get(glossary_id)
        if found is None:
            found = self._cache[glossary_id] = _read(path)
        return found

    def list(self, key: str | None) -> list[Glossary]:
        """``key``'s glossaries, oldest first."""
        out = []
        for path in self._files(self._folder(key)):
            try:
                out.append(self.get(key, path.stem))
            except (NotFound, OSError, ValueError) as exc:  # removed meanwhile, or not ours to read
                LOGGER.warning("skipping glossary %s: %s", path, exc)
        return sorted(out, key=lambda g: (g.creation_time, g.glossary_id))

    def delete(self, key: str | None, glossary_id: object) -> None:
        self.get(key, glossary_id)  # NotFound when it is not this key's
        (self._folder(key) / f"{glossary_id}.json").unlink(missing_ok=True)
        self._cache.pop(str(glossary_id), None)

    @staticmethod
    def _files(folder: Path) -> list[Path]:
        if not folder.is_dir():
            return []
        return [p for p in folder.iterdir() if p.suffix == ".json" and _ID.fullmatch(p.stem)]


def _read(path: Path) -> Glossary:
    data = json.loads(path.read_text(encoding="utf-8"))
    return Glossary(data["glossary_id"], data["name"], data["source_lang"], data["target_lang"],
                    {s: t for s, t in data["entries"]}, data["creation_time"])


def _write_atomically(path: Path, text: str) -> None:
    """``text`` in ``path``, whole or not at all: written beside it, flushed, renamed over it."""
    fd, temporary = tempfile.mkstemp(prefix=".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
