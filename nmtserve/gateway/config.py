"""The gateway's settings and defaults, in one place (the CLI, the app and the tests read them)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .. import contract

DEFAULT_HOST = "127.0.0.1"  # loopback, as `nmtserve serve`: exposing it is a choice
DEFAULT_PORT = 5000  # LibreTranslate's port: tools configured for it need only the host
# A repository exported without --pair serves one model whose languages Triton does not know;
# the gateway calls it this pair unless --languages says otherwise (the shipped demo's pair).
DEFAULT_UNNAMED_PAIRS = ("en-fr",)
# Requests the gateway keeps in flight to Triton across all its clients (the client's
# ``concurrency``): above the number of users a gateway serves at once, so none waits here.
DEFAULT_CONCURRENCY = 256
DEFAULT_TIMEOUT = 60.0  # seconds per request to Triton (the client's default)
# How long a language list read from the server is used before it is read again; a failed
# refresh keeps the last list (Triton restarting does not empty the page's menus).
CATALOG_TTL_S = 30.0
# LibreTranslate's own defaults: no character limit, 3 alternatives at most, a 500 ms pause
# in typing before the page translates.
DEFAULT_CHAR_LIMIT = -1
DEFAULT_ALTERNATIVES_LIMIT = 3
DEFAULT_FRONTEND_TIMEOUT_MS = 500
# A request body (JSON, form or file) over this is refused before it is read whole. Triton's
# document model takes up to 1,000,000 characters; UTF-8 needs at most 4 bytes for each.
MAX_BODY_BYTES = 4 * 1024 * 1024
# Translated files wait this long for their download (LibreTranslate keeps them 30 minutes),
# and at most this many are kept (the oldest go first).
FILE_TTL_S = 30 * 60
MAX_STORED_FILES = 1000


@dataclass(frozen=True)
class ApiKey:
    """One key of ``--api-keys``: requests per minute (0: unlimited) and its own character
    limit per text (None: the gateway's ``--char-limit``)."""

    key: str
    requests_per_minute: int = 0
    char_limit: int | None = None


@dataclass(frozen=True)
class GatewayConfig:
    """Where Triton is and what the gateway accepts (see ``nmtserve gateway --help``)."""

    url: str | Sequence[str] = "localhost:8001"
    protocol: str = "grpc"
    model: str = contract.DEFAULT_MODEL
    timeout: float = DEFAULT_TIMEOUT
    concurrency: int = DEFAULT_CONCURRENCY
    # Sent with every request to Triton (an auth header of a proxy in front of it).
    headers: Mapping[str, str] | None = None
    # nmtserve.client.TLS, True (system CAs) or None (plain, unless the URL says grpcs/https).
    tls: object = None
    # SRC-TGT pairs naming a repository exported without --pair (None: DEFAULT_UNNAMED_PAIRS).
    languages: Sequence[str] | None = None
    # The source languages detection chooses among (None: every served source; see detect.py).
    detect_languages: Sequence[str] | None = None
    # None: no key needed; else a key is required on the translating routes.
    api_keys: Mapping[str, ApiKey] | None = None
    char_limit: int = DEFAULT_CHAR_LIMIT
    alternatives_limit: int = DEFAULT_ALTERNATIVES_LIMIT
    frontend_timeout_ms: int = DEFAULT_FRONTEND_TIMEOUT_MS
    # Where translated files wait for their download (None: a new temporary directory).
    files_dir: Path | None = None
    catalog_ttl_s: float = CATALOG_TTL_S


class ApiKeysFileError(ValueError):
    """The ``--api-keys`` file cannot be read; the message names the line."""


def read_api_keys(path: Path) -> dict[str, ApiKey]:
    """Keys, one a line: ``KEY [REQUESTS_PER_MINUTE [CHAR_LIMIT]]``; ``#`` starts a comment.

    Requests per minute 0 (or left out) means no limit; a character limit left out means the
    gateway's ``--char-limit``.
    """
    keys: dict[str, ApiKey] = {}
    for number, raw in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        fields = line.split()
        where = f"{path}:{number}"
        if len(fields) > 3:
            raise ApiKeysFileError(f"{where}: expected KEY [REQUESTS_PER_MINUTE [CHAR_LIMIT]], got {raw!r}")
        try:
            numbers = [int(f) for f in fields[1:]]
        except ValueError:
            raise ApiKeysFileError(f"{where}: limits must be whole numbers, got {raw!r}") from None
        if any(n < 0 for n in numbers):
            raise ApiKeysFileError(f"{where}: limits cannot be negative, got {raw!r}")
        if fields[0] in keys:
            raise ApiKeysFileError(f"{where}: key {fields[0][:4]}... is listed twice")
        keys[fields[0]] = ApiKey(fields[0], *numbers)
    if not keys:
        raise ApiKeysFileError(f"{path} lists no key")
    return keys
