"""API keys and their limits: which key a request carries, whether it may go on.

Both APIs share one check (``Access.check``): with ``--api-keys`` a known key is required
(``Forbidden`` otherwise) and each key gets its requests-per-minute limit over a moving
60-second window (``RateLimited``), as LibreTranslate's limiter counts.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Mapping

from .config import ApiKey
from .errors import Forbidden, RateLimited

WINDOW_S = 60.0


class Access:
    def __init__(self, keys: Mapping[str, ApiKey] | None, clock: Callable[[], float] = time.monotonic):
        self.keys = dict(keys) if keys is not None else None
        self._clock = clock
        self._recent: dict[str, deque[float]] = {}

    @property
    def required(self) -> bool:
        return self.keys is not None

    def check(self, key: str | None) -> ApiKey | None:
        """The key's entry (None when keys are off); raises Forbidden or RateLimited."""
        if self.keys is None:
            return None
        entry = self.keys.get(key or "")
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
        """Characters allowed per text: the key's own limit, else the gateway's (-1: none)."""
        return entry.char_limit if entry is not None and entry.char_limit is not None else default
