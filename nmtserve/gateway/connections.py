"""The gateway's connections: header and body timeouts, a header size cap and a connection cap
on top of uvicorn's HTTP/1.1 protocol (httptools).

What uvicorn does by itself (0.30 to 0.54 read): ``timeout_keep_alive`` closes a connection
idle *after* a response; nothing times out a connection that has sent nothing yet, or one that
sends its headers (or its body) a byte at a time: each byte received cancels the keep-alive
timer and no other is armed, so such sockets stay open for good. ``limit_concurrency`` answers
503 once that many connections are open, idle ones included, and closes none: a few hundred
silent sockets would turn every other client away. httptools keeps a header line however long
until its end comes. Hence ``guarded_protocol``, a subclass of uvicorn's ``HttpToolsProtocol``
given to ``uvicorn.Config(http=...)``:

* **header timeout** (``--header-timeout``, 10 s): from the opening of a connection, and on a
  kept-alive one from the first byte of the next request (a stray CRLF counts), the request
  line and headers must be complete within it; else the connection is closed, with a 408 when
  anything was received.
* **body timeout** (``--body-timeout``, 60 s): once the headers are in, the whole body (up to
  ``--max-body-bytes``) must arrive within it; else 408 and closed. The app sees the client
  go away (``params.GONE``: 400, sent nowhere).
* **idle timeout** (``--keep-alive-timeout``, 5 s): uvicorn's own, between requests.
* **header size** (``--max-header-bytes``, 64 KiB): the request line and headers; past it 431
  and closed.
* **connection cap** (``--max-connections``, 1000): a connection over the cap is answered 503
  at once and closed; the others go on. With the timeouts above a silent client holds a place
  for 10 s at most. uvicorn's ``limit_concurrency`` is left unset.

Errors written here, below the app, are JSON with both APIs' fields (``{"error": ...,
"message": ...}``: LibreTranslate's and DeepL's shapes at once). This relies on
``HttpToolsProtocol``'s parser callbacks (``on_message_begin``, ``on_headers_complete``,
``on_message_complete``, ``on_response_complete``), stable across uvicorn's releases;
tests/test_gateway_limits.py checks each behaviour against a running gateway.
"""

from __future__ import annotations

import asyncio
import json
import logging
import resource
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from .config import Limits

LOGGER = logging.getLogger(__name__)

# File descriptors the process needs besides its client connections (Triton's channels, files, logs).
SPARE_FDS = 128


def error_response(status: int, reason: str, message: str) -> bytes:
    """A whole HTTP/1.1 response that closes the connection, in both APIs' error shapes."""
    body = json.dumps({"error": message, "message": message}).encode("utf-8")
    return (f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n").encode("ascii") + body


def guarded_protocol(limits: Limits) -> type[asyncio.Protocol]:
    """uvicorn's httptools protocol with ``limits``' timeouts and caps (the module says which)."""
    header_timeout, body_timeout = limits.header_timeout_s, limits.body_timeout_s
    max_connections, max_header_bytes = limits.max_connections, limits.max_header_bytes

    class GuardedProtocol(HttpToolsProtocol):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._deadline: asyncio.TimerHandle | None = None
            self._phase = ""  # "headers", "body" or "" (neither: idle, or the app answering)
            self._header_bytes = 0
            self._refused = False

        # -- the connection

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            full = len(self.connections) >= max_connections
            super().connection_made(transport)
            if full:
                self._refused = True
                LOGGER.warning("refused a connection: %d are open (--max-connections)", max_connections)
                transport.write(error_response(
                    503, "Service Unavailable",
                    f"Service Unavailable: the gateway holds its limit of {max_connections} connections; "
                    "try again shortly"))
                transport.close()
                return
            self._start_headers(received=0)

        def connection_lost(self, exc: Exception | None) -> None:
            self._stop_clock()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if self._refused or self.transport.is_closing():
                return
            if not self._phase and self._between_requests():
                self._start_headers(received=0)  # a new request's first byte: its headers' clock starts
            if self._phase == "headers":
                self._header_bytes += len(data)
            try:
                super().data_received(data)
            except Exception:  # noqa: BLE001 - a request uvicorn cannot take must not hang its socket
                LOGGER.warning("closing a connection whose request could not be read", exc_info=True)
                self._close_with(400, "Bad Request", "Bad Request: the request could not be read",
                                 respond=self._may_respond())
                return
            if self._phase == "headers" and self._header_bytes > max_header_bytes:
                self._close_with(431, "Request Header Fields Too Large",
                                 f"Request Header Fields Too Large: the request line and headers exceed "
                                 f"{max_header_bytes} bytes", respond=self._may_respond())

        # -- httptools' callbacks, one request after another

        def on_message_begin(self) -> None:
            super().on_message_begin()
            if self._phase != "headers":
                self._start_headers(received=1)

        def on_headers_complete(self) -> None:
            self._phase = "body"
            self._arm(body_timeout, self._body_late)
            super().on_headers_complete()

        def on_message_complete(self) -> None:
            self._stop_clock()
            super().on_message_complete()

        # -- the clocks

        def _between_requests(self) -> bool:
            return (self.cycle is None or self.cycle.response_complete) and not self.pipeline

        def _may_respond(self) -> bool:
            """No response is being written (an error response would cut into it)."""
            cycle = self.cycle
            return cycle is None or not cycle.response_started or cycle.response_complete

        def _start_headers(self, received: int) -> None:
            self._phase, self._header_bytes = "headers", received
            self._arm(header_timeout, self._headers_late)

        def _arm(self, seconds: float, callback: Any) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
            self._deadline = self.loop.call_later(seconds, callback)

        def _stop_clock(self) -> None:
            self._phase = ""
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _headers_late(self) -> None:
            self._deadline = None
            if self._phase != "headers" or self.transport.is_closing():
                return
            # Told why when it sent something and no earlier response is still under way.
            self._close_with(408, "Request Timeout",
                             f"Request Timeout: the request's headers did not arrive within {header_timeout:g} s",
                             respond=bool(self._header_bytes) and self._may_respond())

        def _body_late(self) -> None:
            self._deadline = None
            if self._phase == "body" and not self.transport.is_closing():
                self._close_with(408, "Request Timeout",
                                 f"Request Timeout: the request's body did not arrive within {body_timeout:g} s",
                                 respond=self.cycle is None or not self.cycle.response_started)

        def _close_with(self, status: int, reason: str, message: str, respond: bool = True) -> None:
            """Close the connection, after an error response when ``respond`` (a response already
            under way cannot take another)."""
            self._stop_clock()
            if respond:
                self.transport.write(error_response(status, reason, message))
            self.transport.close()

    GuardedProtocol.__name__ = GuardedProtocol.__qualname__ = "GuardedProtocol"
    return GuardedProtocol


def ensure_descriptors(max_connections: int) -> None:
    """Raise the process's open-file limit to fit ``max_connections`` (up to the hard limit),
    warning when it cannot: past it, accepting a connection fails instead of answering 503."""
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (OSError, ValueError):
        return
    needed = max_connections + SPARE_FDS
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return
    target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (OSError, ValueError):
        target = soft
    if target < needed:
        LOGGER.warning("--max-connections %d needs about %d open files; the limit is %d (ulimit -n): "
                       "lower --max-connections or raise the limit", max_connections, needed, target)
