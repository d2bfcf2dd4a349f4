"""API keys and the limits of a request: which key a request carries, whether it may go on.

Both APIs share two checks. ``Access.check`` (on every route that takes a key): with
``--api-keys`` a known key is required (``Forbidden`` otherwise) and each key gets its
requests-per-minute limit over a moving 60-second window (``RateLimited``), as LibreTranslate's
limiter counts. ``Access.check_request`` (on every route that takes texts: /translate, /detect,
/translate_file, /v2/translate), once the texts are read: the texts per request, the characters
of all of them together (the key's own limit, else ``--char-limit``, and ``--max-request-chars``
whatever the key; ``--max-file-chars`` for a file), and what the key may still send this minute
(``TooLarge`` or ``RateLimited``). The limits and their defaults are ``config.Limits``.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence

from .config import ApiKey, Limits
from .errors import Forbidden, RateLimited, TooLarge

WINDOW_S = 60.0
LIBRETRANSLATE, DEEPL = "libretranslate", "deepl"


class Access:
    def __init__(self, keys: Mapping[str, ApiKey] | None, limits: Limits | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.keys = dict(keys) if keys is not None else None
        self.limits = limits if limits is not None else Limits()
        self._clock = clock
        self._recent: dict[str, deque[float]] = {}
        # Per key: (time, characters) of the last minute's requests, and their sum.
        self._spent: dict[str, deque[tuple[float, int]]] = {}
        self._spent_sum: dict[str, int] = {}

    @property
    def required(self) -> bool:
        return self.keys is not None

    def check(self, key: object) -> ApiKey | None:
        """The key's entry (None when keys are off); raises Forbidden or RateLimited."""
        if self.keys is None:
            return None
        entry = self.keys.get(key) if isinstance(key, str) else None
        if entry is None:
            raise Forbidden("Invalid API key" if key else "Missing API key")
        if entry.requests_per_minute:
            now = self._clock()
            recent = self._recent.setdefault(entry.key, deque())
            while recent and recent[0] <= now - WINDOW_S:
                recent.popleft()
            if len(recent) >= entry.requests_per_minute:
                raise RateLimited(f"{entry.requests_per_minute} per 1 minute")
            recent.append(now)
        return entry

    def char_limit(self, entry: ApiKey | None, default: int) -> int:
        """Characters allowed per request: the key's own limit, else ``default`` (-1: none)."""
        return entry.char_limit if entry is not None and entry.char_limit is not None else default

    def request_char_limit(self, entry: ApiKey | None = None, *, file: bool = False) -> int:
        """Characters one request of ``entry`` may hold, all texts together (-1: no limit): the
        key's limit or ``--char-limit``, within ``--max-request-chars`` (``--max-file-chars``
        for an uploaded file)."""
        return self.limits.request_chars(entry.char_limit if entry is not None else None, file=file)

    def chars_per_minute(self, entry: ApiKey | None) -> int:
        """What ``entry`` may send per minute (0: unlimited; no key: unlimited)."""
        if entry is None:
            return 0
        own = entry.chars_per_minute
        return own if own is not None else self.limits.key_chars_per_minute

    def check_request(self, entry: ApiKey | None, texts: Sequence[str], *, api: str = LIBRETRANSLATE,
                      file: bool = False, chars: int | None = None) -> int:
        """Refuse a request over a limit, at once and naming it: more texts than
        ``--batch-limit``, more characters (all ``texts`` together) than
        ``request_char_limit`` (TooLarge: 400 in LibreTranslate's API, 413 in DeepL's), more
        than the key may still send this minute (RateLimited: 429; TooLarge when the request
        alone is over the key's minute). Counts the characters against the key's minute and
        returns them. ``api`` words the message as that API does; ``file``: an uploaded file;
        ``chars``: the size to count against the key's minute instead of ``texts``: a binary
        file's bytes, whose text only the server reads (and bounds: its document limit), so the
        per-request character limit does not apply to it."""
        limits, deepl = self.limits, api == DEEPL
        if not file and limits.batch_limit != -1 and len(texts) > limits.batch_limit:
            raise TooLarge(
                f"Request Entity Too Large: {len(texts)} texts exceed the limit of {limits.batch_limit} texts per "
                f"request." if deepl else
                f"Invalid request: request ({len(texts)} texts) exceeds the batch limit ({limits.batch_limit} texts)")
        binary = chars
        chars = sum(len(t) for t in texts) if binary is None else binary
        limit = self.request_char_limit(entry, file=file) if binary is None else -1
        if limit != -1 and chars > limit:
            what = "the file" if file else "the request's texts"
            raise TooLarge(
                f"Request Entity Too Large: {what} hold {chars} characters, over the limit of {limit} per "
                f"request." if deepl else f"Invalid request: request ({chars}) exceeds text limit ({limit})")
        self._spend(entry, chars, deepl)
        return chars

    def usage(self, entry: ApiKey | None) -> tuple[int, int]:
        """(characters ``entry`` sent in the last minute, its characters per minute; 0: no limit):
        what DeepL's ``/v2/usage`` reports, over this gateway's one-minute window."""
        budget = self.chars_per_minute(entry)
        if entry is None or entry.key not in self._spent:
            return 0, budget
        now, spent = self._clock(), self._spent[entry.key]
        return sum(chars for at, chars in spent if at > now - WINDOW_S), budget

    def _spend(self, entry: ApiKey | None, chars: int, deepl: bool) -> None:
        budget = self.chars_per_minute(entry)
        if not budget or entry is None:
            return
        if chars > budget:
            raise TooLarge(
                f"Request Entity Too Large: {chars} characters exceed the key's limit of {budget} characters per "
                f"minute." if deepl else
                f"Invalid request: request ({chars}) exceeds the key's limit of {budget} characters per minute")
        now = self._clock()
        spent = self._spent.setdefault(entry.key, deque())
        total = self._spent_sum.get(entry.key, 0)
        while spent and spent[0][0] <= now - WINDOW_S:
            total -= spent.popleft()[1]
        if total + chars > budget:
            self._spent_sum[entry.key] = total
            raise RateLimited(f"Too many requests: the key's {budget} characters per minute are spent." if deepl
                              else f"{budget} characters per 1 minute")
        if chars:
            spent.append((now, chars))
        self._spent_sum[entry.key] = total + chars
