"""The gateway's settings and defaults, in one place (the CLI, the app and the tests read them)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from .. import contract, defaults

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


def _limit(default: Any, flag: str, help: str, *, kind: type = int, metavar: str = "N") -> Any:
    """A field of ``Limits``: its default, the ``nmtserve gateway`` option that sets it, and what
    it means (the option's help)."""
    return field(default=default, metadata={"flag": flag, "help": help, "type": kind, "metavar": metavar})


@dataclass(frozen=True)
class Limits:
    """Every limit and timeout of the gateway, its default and its meaning: the one place they are
    defined (``nmtserve gateway --help`` lists each option; README's gateway section, each default).

    -1 means "no limit" for the counts that LibreTranslate lets be unlimited; 0 for the per-key
    budgets (as in the ``--api-keys`` file). A request over a limit is refused at once, before
    anything reaches Triton: 400 (LibreTranslate) or 413 (DeepL) naming the limit; a key whose
    budget for the minute is spent gets 429.
    """

    # -- what one request may hold (both APIs; /detect and files too)
    batch_limit: int = _limit(
        50, "--batch-limit",
        "texts per request (q as a list, DeepL's repeated text): DeepL's own limit; -1: none, "
        "as LibreTranslate's --batch-limit unless set")
    char_limit: int = _limit(
        DEFAULT_CHAR_LIMIT, "--char-limit",
        "characters per request, all its texts together, as LibreTranslate counts them; a key of "
        "--api-keys may have its own; the page shows it (-1: no limit)")
    max_request_chars: int = _limit(
        128 * 1024, "--max-request-chars",
        "characters per request, all texts together, whatever the key: a bound on the work one "
        "request makes (DeepL's 128 KiB per request); -1: none")
    max_file_chars: int = _limit(
        defaults.MAX_DOCUMENT_CHARS, "--max-file-chars",
        "characters of an uploaded file (/translate_file): the document model's own limit; -1: none")
    max_body_bytes: int = _limit(
        MAX_BODY_BYTES, "--max-body-bytes",
        "bytes of a request body (JSON, form or uploaded file), refused before it is read whole",
        metavar="BYTES")
    alternatives_limit: int = _limit(
        DEFAULT_ALTERNATIVES_LIMIT, "--alternatives-limit", "most alternatives a request may ask for (-1: none)")
    # -- what a key may spend (keys of --api-keys; a key's own line in the file wins)
    key_chars_per_minute: int = _limit(
        0, "--key-chars-per-minute",
        "characters a key may send per minute over a moving 60-second window, unless its line in "
        "--api-keys says (0: unlimited); requests per minute are set per key in that file")
    # -- connections (the gateway's HTTP server)
    header_timeout_s: float = _limit(
        10.0, "--header-timeout",
        "seconds a connection has to send a request's line and headers, counted from its first "
        "byte (or from the connection's opening); then it is closed (408)", kind=float, metavar="S")
    body_timeout_s: float = _limit(
        60.0, "--body-timeout",
        "seconds a request's body has to arrive whole once its headers are in; then the connection "
        "is closed (408)", kind=float, metavar="S")
    keep_alive_s: float = _limit(
        5.0, "--keep-alive-timeout",
        "seconds an idle kept-alive connection stays open between requests (as uvicorn)",
        kind=float, metavar="S")
    max_connections: int = _limit(
        1000, "--max-connections",
        "open connections at once; one more is answered 503 and closed (keep it under the "
        "process's open-file limit, `ulimit -n`)")
    max_header_bytes: int = _limit(
        64 * 1024, "--max-header-bytes",
        "bytes of a request's line and headers; more is answered 431 and the connection closed",
        metavar="BYTES")
    # -- translated files waiting for download
    file_ttl_s: float = _limit(
        float(FILE_TTL_S), "--file-ttl", "seconds a translated file waits for its download (LibreTranslate's "
        "30 minutes); a timer removes expired ones every --purge-interval", kind=float, metavar="S")
    max_stored_files: int = _limit(
        MAX_STORED_FILES, "--max-stored-files", "translated files kept at once; past it the oldest are removed")
    max_stored_bytes: int = _limit(
        256 * 1024 * 1024, "--max-stored-bytes",
        "bytes of translated files kept at once; past it the oldest are removed (a file larger "
        "than this alone is refused)", metavar="BYTES")
    purge_interval_s: float = _limit(
        60.0, "--purge-interval", "seconds between two sweeps of expired files", kind=float, metavar="S")
    # -- glossaries (DeepL's /v2/glossaries; each key its own)
    max_glossary_entries: int = _limit(
        10_000, "--max-glossary-entries", "entries (source term -> target term) per glossary; -1: none")
    max_glossary_bytes: int = _limit(
        1024 * 1024, "--max-glossary-bytes",
        "bytes of a glossary's entries as TSV (DeepL allows 10 MiB; each term is searched for in "
        "every text translated with it); -1: none", metavar="BYTES")
    max_glossaries: int = _limit(
        1000, "--max-glossaries", "glossaries per API key (without keys: all together), DeepL's per "
        "account; -1: none")

    def request_chars(self, key_limit: int | None = None, *, file: bool = False) -> int:
        """Characters one request may hold, all its texts together (-1: no limit): the key's
        limit (``key_limit``, None: ``char_limit``) within ``max_request_chars``, or within
        ``max_file_chars`` for an uploaded file."""
        own = self.char_limit if key_limit is None else key_limit
        return _tighter(own, self.max_file_chars if file else self.max_request_chars)

    def validate(self) -> Limits:
        """Itself, or ValueError naming the option of a value that makes no sense."""
        for f in fields(self):
            value, flag = getattr(self, f.name), f.metadata["flag"]
            if f.metadata["type"] is float:
                if not (value > 0 and value != float("inf")):
                    raise ValueError(f"{flag} must be a positive number of seconds, got {value}")
            elif f.name in _AT_LEAST_ONE:
                if value < 1:
                    raise ValueError(f"{flag} must be at least 1, got {value}")
            elif value < (0 if f.name in _ZERO_IS_UNLIMITED else -1):
                raise ValueError(f"{flag} cannot be {value}")
        return self


# How Limits.validate reads each count: these must be at least 1, these take 0 as "unlimited";
# the other counts take -1 as "no limit".
_AT_LEAST_ONE = frozenset({"max_body_bytes", "max_connections", "max_header_bytes", "max_stored_files",
                           "max_stored_bytes"})
_ZERO_IS_UNLIMITED = frozenset({"key_chars_per_minute"})


def _tighter(a: int, b: int) -> int:
    """The smaller of two limits where -1 means none."""
    return b if a == -1 else a if b == -1 else min(a, b)


def add_limit_arguments(parser: Any) -> None:
    """``nmtserve gateway``'s option for each field of ``Limits`` (an option the parser already
    has, such as ``--char-limit``, is left as it is: its ``dest`` is the field's name)."""
    import argparse

    for f in fields(Limits):
        meta = f.metadata
        try:
            parser.add_argument(meta["flag"], dest=f.name, type=meta["type"], default=f.default,
                                metavar=meta["metavar"], help=meta["help"])
        except argparse.ArgumentError:  # defined by the caller already
            continue
    # Not a limit, but where the gateway keeps what outlives it: the one gateway option not in
    # nmtserve/cli.py's list, added with the limits that the command line takes from here.
    try:
        parser.add_argument("--glossaries-dir", metavar="DIR", default=None,
                            help="where glossaries are kept across restarts, a folder per API key (default: "
                                 "$NMTSERVE_STATE_DIR/glossaries, else $XDG_STATE_HOME/nmtserve/glossaries, "
                                 "else ~/.local/state/nmtserve/glossaries)")
    except argparse.ArgumentError:
        pass


def limits_from_args(args: Any) -> Limits:
    """The ``Limits`` that ``args`` sets (an option the parser lacks keeps its default);
    ValueError names an option whose value makes no sense."""
    return Limits(**{f.name: getattr(args, f.name, f.default) for f in fields(Limits)}).validate()


@dataclass(frozen=True)
class ApiKey:
    """One key of ``--api-keys``: requests per minute (0: unlimited), its own character limit
    per request (None: the gateway's ``--char-limit``; -1: none, within ``--max-request-chars``)
    and characters per minute (0: unlimited; None: the gateway's ``--key-chars-per-minute``)."""

    key: str
    requests_per_minute: int = 0
    char_limit: int | None = None
    chars_per_minute: int | None = None


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
    # Every limit and timeout (see Limits).
    limits: Limits = Limits()
    frontend_timeout_ms: int = DEFAULT_FRONTEND_TIMEOUT_MS
    # Where translated files wait for their download (None: a new temporary directory).
    files_dir: Path | None = None
    # Where glossaries are kept, across restarts (None: glossaries.default_directory()).
    glossaries_dir: Path | None = None
    catalog_ttl_s: float = CATALOG_TTL_S

    @property
    def char_limit(self) -> int:
        """LibreTranslate's --char-limit (``limits.char_limit``)."""
        return self.limits.char_limit

    @property
    def alternatives_limit(self) -> int:
        return self.limits.alternatives_limit


class ApiKeysFileError(ValueError):
    """The ``--api-keys`` file cannot be read; the message names the line."""


KEY_LINE = "KEY [REQUESTS_PER_MINUTE [CHAR_LIMIT [CHARS_PER_MINUTE]]]"


def read_api_keys(path: Path) -> dict[str, ApiKey]:
    """Keys, one a line: ``KEY [REQUESTS_PER_MINUTE [CHAR_LIMIT [CHARS_PER_MINUTE]]]``; ``#``
    starts a comment.

    0 means unlimited (characters per request stay within ``--max-request-chars``); a limit
    left out, or ``-``, means the gateway's: no limit for requests per minute, ``--char-limit``
    for characters per request, ``--key-chars-per-minute`` for characters per minute.
    """
    keys: dict[str, ApiKey] = {}
    for number, raw in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        fields_ = line.split()
        where = f"{path}:{number}"
        if len(fields_) > 4:
            raise ApiKeysFileError(f"{where}: expected {KEY_LINE}, got {raw!r}")
        try:
            numbers = [None if f == "-" else int(f) for f in fields_[1:]]
        except ValueError:
            raise ApiKeysFileError(f"{where}: expected {KEY_LINE}, the limits whole numbers (or -), "
                                   f"got {raw!r}") from None
        if any(n is not None and n < 0 for n in numbers):
            raise ApiKeysFileError(f"{where}: limits cannot be negative, got {raw!r}")
        if fields_[0] in keys:
            raise ApiKeysFileError(f"{where}: key {fields_[0][:4]}... is listed twice")
        requests, chars, per_minute = [*numbers, None, None, None][:3]
        keys[fields_[0]] = ApiKey(fields_[0], requests or 0, -1 if chars == 0 else chars, per_minute)
    if not keys:
        raise ApiKeysFileError(f"{path} lists no key")
    return keys
