"""Failures: mapping what tritonclient and the network raise to the client's errors, the
retry policy, and the time limits (per-request timeout, per-call deadline).

How tritonclient reports a failed call (2.x, read from its source):

- gRPC (``tritonclient.grpc`` and ``.grpc.aio``): every ``grpc.RpcError`` becomes an
  ``InferenceServerException`` whose ``status()`` is ``str(grpc.StatusCode.X)``, e.g.
  ``"StatusCode.INVALID_ARGUMENT"``, and whose ``message()`` is the server's text; ``str()``
  of it is ``"[StatusCode.X] message"``. A refused connection is ``UNAVAILABLE`` and the
  client's ``client_timeout`` running out is ``DEADLINE_EXCEEDED``.
- HTTP (``tritonclient.http``, geventhttpclient; ``.http.aio``, aiohttp): an error *response*
  becomes an ``InferenceServerException`` with ``status()`` the HTTP status code as a string
  (``"400"``) and the JSON body's "error" as the message. Network failures are not wrapped:
  ``ConnectionRefusedError`` and friends, geventhttpclient's ``HTTPConnectionClosed``,
  aiohttp's ``ClientConnectionError`` family, socket and asyncio timeouts.

Triton sends a Python backend's ``TritonError(msg, INVALID_ARG)`` as gRPC INVALID_ARGUMENT /
HTTP 400, and an unknown model as "Request for unknown model: 'x' is not found" (gRPC NOT_FOUND
or UNAVAILABLE depending on the version, HTTP 400 or 404), hence the message rules below.
"""

from __future__ import annotations

import asyncio
import builtins
import logging
import random
import re
import socket
import time
from dataclasses import dataclass

from . import _constants as C
from ._batching import Chunk
from .errors import (
    InvalidInputError,
    ModelNotFoundError,
    ProtocolMismatchError,
    ServerError,
    ServerUnavailableError,
    TimeoutError,
    TranslationError,
)

LOGGER = logging.getLogger("nmtserve.client")

# Status (gRPC code name without "StatusCode.", or HTTP code) -> error class.
STATUS_ERRORS: dict[str, type[TranslationError]] = {
    "INVALID_ARGUMENT": InvalidInputError,
    "OUT_OF_RANGE": InvalidInputError,
    "NOT_FOUND": ModelNotFoundError,
    "UNAVAILABLE": ServerUnavailableError,
    "DEADLINE_EXCEEDED": TimeoutError,
    "INTERNAL": ServerError,
    "UNKNOWN": ServerError,
    "UNIMPLEMENTED": ServerError,
    "RESOURCE_EXHAUSTED": ServerError,
    "DATA_LOSS": ServerError,
    "400": InvalidInputError,
    "404": ModelNotFoundError,
    "408": TimeoutError,
    "429": ServerUnavailableError,
    "500": ServerError,
    "502": ServerUnavailableError,
    "503": ServerUnavailableError,
    "504": TimeoutError,
}
# Triton's own words, which decide before the status (see the module docstring).
MESSAGE_ERRORS: tuple[tuple[re.Pattern[str], type[TranslationError]], ...] = (
    (re.compile(r"unknown model: '[^']*' is not found"), ModelNotFoundError),
    # The model exists but is loading or unloading (a server starting or stopping).
    (
        re.compile(r"unknown model: .*(has no available versions|is not at ready state)"),
        ServerUnavailableError,
    ),
    (re.compile(r"[Rr]equest timeout expired"), TimeoutError),
)
_STATUS_IN_TEXT = re.compile(r"^\[(StatusCode\.\w+|\d{3})\]\s*")
# The contract names a bad sentence by its position in the request: "TEXT[3] is empty".
_SENTENCE_IN_MESSAGE = C.SENTENCE_IN_MESSAGE


def map_exception(
    exc: BaseException,
    *,
    endpoint: str,
    chunk: Chunk | None = None,
    connection_errors: tuple[type[BaseException], ...] = (),
    timeout: float | None = None,
) -> TranslationError:
    """The TranslationError for exc (not raised; exc should become its ``__cause__``).

    endpoint ("localhost:8001 (grpc)") goes into messages about reaching the server; chunk,
    when the failure concerns a request, gives the sentences' input positions;
    connection_errors are the transport library's own network exception types; timeout is
    the time limit the failed request had, for the message of a timeout.
    """
    waited = "" if timeout is None else f" within {timeout:g} s"
    if isinstance(exc, TranslationError):
        return exc
    indices = chunk.indices if chunk is not None else None
    # Imported here: the core must not import a protocol's client library up front.
    from tritonclient.utils import InferenceServerException

    if isinstance(exc, InferenceServerException):
        message = exc.message() or str(exc)
        status = exc.status()
        if status is None:
            found = _STATUS_IN_TEXT.match(message)
            if found:
                status, message = found.group(1), message[found.end() :]
        code = status.strip("[]").removeprefix("StatusCode.") if status else None
        cls = next((c for rule, c in MESSAGE_ERRORS if rule.search(message)), None)
        if cls is None:
            cls = STATUS_ERRORS.get(code or "")
        if cls is None:
            http_5xx = code is not None and code.isdigit() and int(code) >= 500
            cls = ServerError if http_5xx else TranslationError
        if cls is ServerUnavailableError:
            mismatch = protocol_mismatch(endpoint, message)
            if mismatch is not None:
                return mismatch
            message = f"the server at {endpoint} is unavailable: {message}"
        elif cls is TimeoutError:
            message = f"no answer from {endpoint}{waited}: {message}"
        return cls(message, status=status, indices=indices, index=_named_index(message, chunk))
    # asyncio.TimeoutError and socket.timeout are builtins.TimeoutError from Python 3.11 on.
    if isinstance(exc, (builtins.TimeoutError, asyncio.TimeoutError, socket.timeout)):
        return TimeoutError(f"no answer from {endpoint}{waited}", indices=indices)
    if isinstance(exc, (OSError, *connection_errors)):
        detail = str(exc) or type(exc).__name__
        mismatch = protocol_mismatch(endpoint, detail)
        if mismatch is not None:
            return mismatch
        error = ServerUnavailableError(
            f"cannot reach the server at {endpoint}: {detail}", indices=indices
        )
        # A name that does not resolve will not resolve on a retry either.
        error.retryable = not isinstance(exc, socket.gaierror)
        return error
    return TranslationError(f"{type(exc).__name__}: {exc}", indices=indices)


_DEFAULT_PORTS = {"grpc": 8001, "http": 8000}


def protocol_mismatch(endpoint: str, detail: str) -> ProtocolMismatchError | None:
    """The error for a client that meets the other protocol's port, or None.

    An HTTP client reading a gRPC (HTTP/2) answer fails to parse it ("Expected HTTP/"); a gRPC
    client on an HTTP/1.1 port sees the socket closed, so that port is asked, once, whether it
    answers HTTP."""
    found = re.match(r"^(?P<address>.+):(?P<port>\d+) \((?P<protocol>grpc|http)\)$", endpoint)
    if found is None:
        return None
    address, port, protocol = found["address"], int(found["port"]), found["protocol"]
    other = "http" if protocol == "grpc" else "grpc"
    if protocol == "http":
        mismatched = "Expected HTTP/" in detail
    else:
        mismatched = ("Socket closed" in detail or "Connection reset" in detail) and _answers_http(address, port)
    if not mismatched:
        return None
    return ProtocolMismatchError(
        f"{address}:{port} answers {other.upper()}, not {protocol.upper()}: use the {protocol.upper()} port "
        f"({_DEFAULT_PORTS[protocol]} by default) or protocol={other!r} (CLI: --protocol {other})"
    )


def _answers_http(address: str, port: int) -> bool:
    try:
        with socket.create_connection((address.strip("[]"), port), timeout=1.0) as sock:
            sock.sendall(b"GET /v2/health/live HTTP/1.0\r\nHost: x\r\n\r\n")
            return sock.recv(5) == b"HTTP/"
    except OSError:
        return False


def _named_index(message: str, chunk: Chunk | None) -> int | None:
    if chunk is None:
        return None
    found = _SENTENCE_IN_MESSAGE.search(message)
    if found is None:
        return None
    position = int(found.group(1))
    return chunk.indices[position] if position < len(chunk) else None


# --------------------------------------------------------------------------------------------
# Time limits and retries


class Deadline:
    """The overall time limit of one translate() call (None: no limit)."""

    def __init__(self, seconds: float | None) -> None:
        self.seconds = seconds
        self._end = None if seconds is None else time.monotonic() + seconds

    def remaining(self) -> float | None:
        return None if self._end is None else max(0.0, self._end - time.monotonic())

    def expired(self) -> bool:
        return self._end is not None and time.monotonic() >= self._end

    def error(self, done: int, seen: int) -> TimeoutError:
        return TimeoutError(
            f"the translation did not finish within its deadline of {self.seconds:g} s "
            f"({done} of {seen} sentences read had been handed back)"
        )


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with jitter, for errors whose class says they are retryable."""

    max_retries: int = C.DEFAULT_MAX_RETRIES
    initial_delay: float = C.INITIAL_RETRY_DELAY
    max_delay: float = C.MAX_RETRY_DELAY
    jitter: float = C.RETRY_JITTER

    def delay(self, retry: int) -> float:
        """Seconds to wait before retry number ``retry`` (1 for the first)."""
        base = min(self.max_delay, self.initial_delay * 2 ** (retry - 1))
        return base * (1.0 - self.jitter * random.random())


class Attempts:
    """The retry state of one request: how long the next attempt may take, and what to do
    after a failure. Shared by the sync and async shells, which only sleep differently."""

    def __init__(
        self,
        policy: RetryPolicy,
        deadline: Deadline,
        timeout: float | None,
        *,
        endpoint: str,
        chunk: Chunk | None = None,
        connection_errors: tuple[type[BaseException], ...] = (),
    ) -> None:
        self._policy = policy
        self._deadline = deadline
        self._timeout = timeout
        self._endpoint = endpoint
        self._chunk = chunk
        self._connection_errors = connection_errors
        self._last_timeout: float | None = None
        self.count = 0  # attempts started

    def timeout(self) -> float | None:
        """The time limit of the attempt about to start; raises TimeoutError if the call's
        deadline has already passed."""
        self.count += 1
        remaining = self._deadline.remaining()
        if remaining is not None and remaining <= 0.0:
            raise self._deadline_error()
        if remaining is None or (self._timeout is not None and self._timeout <= remaining):
            self._last_timeout = self._timeout
        else:
            self._last_timeout = remaining
        return self._last_timeout

    def failed(self, exc: BaseException) -> float:
        """Seconds to wait before the next attempt; raises the mapped error when there should
        be none (not retryable, retries used up, or the deadline would pass first)."""
        error = map_exception(
            exc,
            endpoint=self._endpoint,
            chunk=self._chunk,
            connection_errors=self._connection_errors,
            timeout=self._last_timeout,
        )
        if error is not exc:
            error.__cause__ = exc
        error.attempts = self.count
        if not error.retryable or self.count > self._policy.max_retries:
            raise error
        delay = self._policy.delay(self.count)
        remaining = self._deadline.remaining()
        if remaining is not None and delay >= remaining:
            raise error
        LOGGER.info(
            "%s; retrying in %.1f s (attempt %d of %d)",
            error.message,
            delay,
            self.count + 1,
            self._policy.max_retries + 1,
        )
        return delay

    def _deadline_error(self) -> TimeoutError:
        error = TimeoutError(
            f"the deadline of {self._deadline.seconds:g} s passed before a request to "
            f"{self._endpoint} could complete",
            indices=self._chunk.indices if self._chunk is not None else None,
        )
        error.attempts = self.count - 1
        return error
