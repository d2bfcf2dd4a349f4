"""What can go wrong in a gateway request, once for both APIs.

Each API answers these in its own shape (LibreTranslate ``{"error": ...}``, DeepL
``{"message": ...}``) with its own status code: the ``status`` tables beside its routes.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from nmtserve.client import errors as client_errors

LOGGER = logging.getLogger(__name__)
Handler = Callable[[Any], Awaitable[Any]]


class GatewayError(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    @property
    def message(self) -> str:
        return self._message

    @message.setter
    def message(self, value: str) -> None:
        # An answer must encode as UTF-8: a lone surrogate quoted from a request is escaped.
        self._message = str(value).encode("utf-8", "backslashreplace").decode("utf-8")


class BadRequest(GatewayError):
    """A missing or malformed field, an unsupported language, format or file."""


class TooLarge(BadRequest):
    """Over the character limit or the body size."""


class NotFound(BadRequest):
    """What the request names is not there (a glossary): DeepL's 404, LibreTranslate's 400."""


class Forbidden(GatewayError):
    """A key is required and the request has none, or an unknown one."""


class RateLimited(GatewayError):
    """The key's requests per minute are spent."""


class Unavailable(GatewayError):
    """Triton cannot be reached, is starting or is busy (a later attempt may succeed)."""


class TranslationFailed(GatewayError):
    """Triton failed, timed out, or answered outside the contract."""


def from_client(exc: client_errors.TranslationError) -> GatewayError:
    """The gateway's error for what the nmtserve client raised."""
    if isinstance(exc, client_errors.InvalidInputError):
        return BadRequest(exc.message)
    if isinstance(exc, client_errors.ServerUnavailableError):
        return Unavailable(f"the translation server is unavailable: {exc.message}")
    if isinstance(exc, client_errors.TimeoutError):
        return TranslationFailed(f"the translation server did not answer in time: {exc.message}")
    return TranslationFailed(f"translation failed: {exc.message}")


def endpoint(render: Callable[[GatewayError], Any]) -> Callable[[Handler], Handler]:
    """A route that answers every error in its API's shape (``render``), unexpected ones as
    TranslationFailed, logged."""

    def wrap(handler: Handler) -> Handler:
        @functools.wraps(handler)
        async def run(request: Any) -> Any:
            try:
                return await handler(request)
            except GatewayError as exc:
                return render(exc)
            except Exception:
                LOGGER.exception("%s %s failed", request.method, request.url.path)
                return render(TranslationFailed("internal error (see the gateway's log)"))

        return run

    return wrap
