"""Translated files waiting for their download (``/translate_file`` -> ``/download_file/NAME``).

Each is stored as ``<32 hex digits>.<the uploaded name, made safe>``: the random part makes
the URL unguessable, the rest is the name the browser saves. Files older than ``FILE_TTL_S``
and beyond ``MAX_STORED_FILES`` are removed whenever one is added or asked for.
"""

from __future__ import annotations

import re
import shutil
import tempfile
import time
import uuid
from pathlib import Path

from .config import FILE_TTL_S, MAX_STORED_FILES

# Upload formats and how translate_document reads them.
FORMATS = {".txt": "plain", ".md": "markdown", ".markdown": "markdown", ".html": "html", ".htm": "html"}

_STORED = re.compile(r"[0-9a-f]{32}\.[A-Za-z0-9._-]{1,200}")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def safe_name(filename: str) -> str:
    """A name that is safe in a path and a URL, keeping the extension: "my file.txt" -> "my_file.txt"."""
    name = _UNSAFE.sub("_", Path(filename.replace("\\", "/")).name).lstrip("._")[-200:]
    return name or "file"


class FileStore:
    def __init__(self, directory: Path | None = None, ttl_s: float = FILE_TTL_S,
                 max_files: int = MAX_STORED_FILES) -> None:
        self._owned = directory is None
        self.directory = Path(directory) if directory is not None else Path(
            tempfile.mkdtemp(prefix="nmtserve-gateway-"))
        self.directory.mkdir(parents=True, exist_ok=True)
        self.ttl_s, self.max_files = ttl_s, max_files

    def put(self, filename: str, data: bytes) -> str:
        """Store ``data``; return the name to download it by."""
        name = f"{uuid.uuid4().hex}.{safe_name(filename)}"
        (self.directory / name).write_bytes(data)
        self.purge()
        return name

    def get(self, name: str) -> tuple[Path, str] | None:
        """(path, the name to save it as) of a stored file, None if there is none by that name."""
        self.purge()
        if not _STORED.fullmatch(name):
            return None
        path = self.directory / name
        return (path, name[33:]) if path.is_file() else None

    def purge(self) -> None:
        now = time.time()
        files = []
        for path in self.directory.iterdir():
            try:
                files.append((path.stat().st_mtime, path))
            except OSError:  # removed meanwhile
                continue
        files.sort()
        for i, (mtime, path) in enumerate(files):
            if now - mtime > self.ttl_s or i < len(files) - self.max_files:
                path.unlink(missing_ok=True)

    def close(self) -> None:
        if self._owned:
            shutil.rmtree(self.directory, ignore_errors=True)
