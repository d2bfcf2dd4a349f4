"""The client's exceptions: one base class, one subclass per thing a caller handles differently.

==========================  ===========================================  =========  ========
exception                   raised when                                  retried    CLI exit
==========================  ===========================================  =========  ========
InvalidInputError           the server rejected the input or options     no         2
                            (gRPC INVALID_ARGUMENT / HTTP 400), or the
                            client did before sending (bad option,
                            text that is not valid Unicode)
ModelNotFoundError          the server has no such model                 no         2
ServerUnavailableError      nothing listens, connection refused/reset,   yes        3
                            gRPC UNAVAILABLE, HTTP 502/503/429, model
                            loading or unloading
ProtocolMismatchError       (a ServerUnavailableError) the port speaks   no         3
                            the other protocol: a gRPC client on an
                            HTTP port or the reverse
TimeoutError                a request ran past ``timeout`` (gRPC         no         1
                            DEADLINE_EXCEEDED) or the call past
                            ``deadline``
ServerError                 the server failed (INTERNAL, HTTP 500, ...)  no         1
                            or answered outside the contract
TranslationError            anything else (the base class)               no         1
==========================  ===========================================  =========  ========

Each carries the server's message verbatim (``message``), the protocol status it came with
(``status``: ``"StatusCode.INVALID_ARGUMENT"``, ``"400"``, or None), and, when it concerns
sentences, which ones: ``indices`` (positions in the caller's input of every sentence of the
failed request) and ``index`` (the one sentence the server named, e.g. "TEXT[3] is empty"
names the request's fourth sentence, whose input position the client knows).
"""

from __future__ import annotations

import builtins
import re
from collections.abc import Iterable

from .. import contract

__all__ = [
    "InvalidInputError",
    "ModelNotFoundError",
    "ProtocolMismatchError",
    "ServerError",
    "ServerUnavailableError",
    "TimeoutError",
    "TranslationError",
]


class TranslationError(Exception):
    """Base class of every error the client raises."""

    #: Whether another attempt may succeed (the retry policy reads this).
    retryable = False

    def __init__(
        self,
        message: str,
        *,
        status: str | None = None,
        indices: Iterable[int] | None = None,
        index: int | None = None,
        attempts: int = 1,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.indices: tuple[int, ...] | None = (
            tuple(sorted(indices)) if indices is not None else None
        )
        self.index = index
        self.attempts = attempts

    def __str__(self) -> str:
        text = self.message
        if self.index is not None:
            # One index, the input's: "TEXT[3]" is the sentence's place in a request the client cut
            # and sorted, and Triton's "in ensemble 'translate', " says nothing to a caller.
            text = f"input {self.index}: {local_message(text, 'the sentence')}"
        elif self.indices:
            count = len(self.indices)
            text += f" (input{'s' if count > 1 else ''} {describe_indices(self.indices)})"
        if self.attempts > 1:
            text += f" [gave up after {self.attempts} attempts]"
        return text


class InvalidInputError(TranslationError, ValueError):
    """The input or the decoding options were rejected; sending them again will not help."""


class ModelNotFoundError(TranslationError):
    """The server does not serve the requested model."""


class ServerUnavailableError(TranslationError):
    """The server could not be reached or is not ready; a later attempt may succeed."""

    retryable = True


class ProtocolMismatchError(ServerUnavailableError):
    """The address answers, but in the other protocol (gRPC client, HTTP port, or the reverse)."""

    retryable = False


class TimeoutError(TranslationError, builtins.TimeoutError):
    """A request or the whole call took too long (also a builtins.TimeoutError)."""


class ServerError(TranslationError):
    """The server failed to translate, or answered outside the contract."""


def describe_indices(indices: Iterable[int], limit: int = 6) -> str:
    """Compact ranges for an error message: ``0-31, 40, 57-60``; long lists are cut short."""
    ordered = sorted(set(indices))
    runs: list[tuple[int, int]] = []
    for i in ordered:
        if runs and i == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], i)
        else:
            runs.append((i, i))
    parts = [f"{a}" if a == b else f"{a}-{b}" for a, b in runs[:limit]]
    if len(runs) > limit:
        parts.append(f"... ({len(ordered)} in all)")
    return ", ".join(parts)


_ENSEMBLE_PREFIX = re.compile(r"^in ensemble '[^']*', ")


def local_message(message: str, name: str) -> str:
    """A server message about one sentence without its place in the request (``TEXT[3]`` becomes
    ``name``) and without Triton's ``in ensemble '...'`` prefix."""
    return contract.SENTENCE_IN_MESSAGE.sub(name, _ENSEMBLE_PREFIX.sub("", message))
