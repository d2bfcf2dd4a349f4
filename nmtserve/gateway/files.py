"""Translated files waiting for their download (``/translate_file`` -> ``/download_file/NAME``).

Each is stored as ``<32 hex digits>.<the uploaded name, made safe>``: the random part makes
the URL unguessable, the rest is the name the browser saves. A file is kept ``file_ttl_s``
(30 minutes, as LibreTranslate); a timer (``run_purges``, every ``purge_interval_s``) removes
expired ones, and so does every file added or asked for. The folder holds at most
``max_stored_files`` files and ``max_stored_bytes`` bytes: past either, the oldest files are
removed to make room (a file larger than ``max_stored_bytes`` alone is refused, 400/413).

Why evict rather than refuse when the folder is full: a file is fetched right after it is
translated (the page and LibreTranslate's clients follow ``translatedFileUrl`` at once), so the
oldest files are the ones most likely fetched already; refusing new files instead would let one
client who fills the folder stop file translation for everyone until its files expire.

Only names of that form are ever served or removed: a ``--files-dir`` shared with other files
keeps them. Every download goes out as an attachment (``Content-Disposition: attachment``),
with ``X-Content-Type-Options: nosniff`` and a sandboxing Content-Security-Policy (app.py), so
a translated .html is saved, never run on the gateway's origin.
"""

from __future__ import annotations

import asyncio
import logging
import re
import shutil
import tempfile
import time
import uuid
from pathlib import Path

from .. import contract
from .config import FILE_TTL_S, MAX_STORED_FILES, Limits
from .errors import TooLarge

LOGGER = logging.getLogger(__name__)

# Upload formats (file name extension -> translate_document's format): text, and the files the
# server reads (contract.FILE_FORMATS: sent and answered as bytes).
FORMATS = {".txt": "plain", ".md": "markdown", ".markdown": "markdown", ".html": "html", ".htm": "html",
           **{ext: fmt for fmt, (extensions, _, _) in contract.FILE_FORMATS.items() for ext in extensions}}

_STORED = re.compile(r"[0-9a-f]{32}\.[A-Za-z0-9._-]{1,200}")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def safe_name(filename: str) -> str:
    """A name that is safe in a path and a URL, keeping the extension: "my file.txt" -> "my_file.txt"."""
    name = _UNSAFE.sub("_", Path(filename.replace("\\", "/")).name).lstrip("._")[-200:]
    return name or "file"


class FileStore:
    def __init__(self, directory: Path | None = None, ttl_s: float = FILE_TTL_S,
                 max_files: int = MAX_STORED_FILES, max_bytes: int | None = None, *,
                 limits: Limits | None = None) -> None:
        """``limits`` (when given) sets the TTL and both caps; else ``ttl_s``, ``max_files`` and
        ``max_bytes`` (None: Limits' default)."""
        self._owned = directory is None
        self.directory = Path(directory) if directory is not None else Path(
            tempfile.mkdtemp(prefix="nmtserve-gateway-"))
        self.directory.mkdir(parents=True, exist_ok=True)
        if limits is not None:
            ttl_s, max_files, max_bytes = limits.file_ttl_s, limits.max_stored_files, limits.max_stored_bytes
        self.ttl_s, self.max_files = ttl_s, max_files
        self.max_bytes = max_bytes if max_bytes is not None else Limits().max_stored_bytes

    def put(self, filename: str, data: bytes) -> str:
        """Store ``data``; return the name to download it by. TooLarge when ``data`` alone is
        over ``max_bytes``; older files make room for it otherwise."""
        if len(data) > self.max_bytes:
            raise TooLarge(f"Invalid request: the translated file ({len(data)} bytes) exceeds the download "
                           f"folder's limit ({self.max_bytes} bytes)")
        self.purge(room=len(data))  # expired ones, and the oldest while the folder is full
        name = f"{uuid.uuid4().hex}.{safe_name(filename)}"
        (self.directory / name).write_bytes(data)
        return name

    def get(self, name: str) -> tuple[Path, str] | None:
        """(path, the name to save it as) of a stored file, None if there is none by that name."""
        self.purge()
        if not _STORED.fullmatch(name):
            return None
        path = self.directory / name
        return (path, name[33:]) if path.is_file() else None

    def purge(self, room: int | None = None) -> int:
        """Remove the expired files, then the oldest while more than ``max_files`` files or
        ``max_bytes`` bytes are kept, or would be with a new file of ``room`` bytes; returns
        the number removed."""
        now = time.time()
        files = []
        for path in self.directory.iterdir():
            if not _STORED.fullmatch(path.name):
                continue
            try:
                stat = path.stat()
            except OSError:  # removed meanwhile
                continue
            files.append((stat.st_mtime, stat.st_size, path))
        files.sort()
        count, total = len(files), sum(size for _, size, _ in files)
        max_files, room_bytes = (self.max_files, 0) if room is None else (self.max_files - 1, room)
        removed = 0
        for mtime, size, path in files:
            if now - mtime > self.ttl_s or count > max_files or total + room_bytes > self.max_bytes:
                path.unlink(missing_ok=True)
                count, total, removed = count - 1, total - size, removed + 1
        return removed

    async def run_purges(self, interval_s: float) -> None:
        """Purge every ``interval_s`` seconds until cancelled (the app's lifespan runs it), so an
        expired file goes even when no other file comes or goes."""
        while True:
            await asyncio.sleep(interval_s)
            try:
                await asyncio.to_thread(self.purge)
            except OSError as exc:  # the folder went away or cannot be read: said, and tried again
                LOGGER.warning("could not purge %s: %s", self.directory, exc)

    def close(self) -> None:
        if self._owned:
            shutil.rmtree(self.directory, ignore_errors=True)
