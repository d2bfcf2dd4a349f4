"""The I/O: one small adapter per (protocol, sync/async) over tritonclient's clients.

Each offers ``infer(model, request, timeout)`` and ``probe(model, timeout)`` and raises what its
library raises; mapping, retrying and batching happen in the shared core. tritonclient is
imported per protocol, so a gRPC user never imports gevent and an HTTP user never imports grpc.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from . import _constants as C
from ._protocol import Request, tritonclient_tensors

LOGGER = logging.getLogger("nmtserve.client")


def _server_timeout_us(timeout: float | None) -> int | None:
    # Triton's own request timeout (microseconds): a request still queued on the server when
    # the client has given up is dropped there instead of being computed for nobody. Only
    # schedulers with a queue honour it; others ignore it.
    return None if timeout is None else max(1, int(timeout * 1e6))


@dataclass(frozen=True)
class TLS:
    """TLS settings for gRPC and HTTP.

    ``ca``: PEM file of the certificate authorities to trust (None: the system's); ``cert`` and
    ``key``: PEM files of a client certificate and its key, for servers that require one
    (mutual TLS); ``server_name``: the name to check the server's certificate against when it
    differs from the address (replicas found through DNS are dialled by IP address).
    """

    ca: str | None = None
    cert: str | None = None
    key: str | None = None
    server_name: str | None = None

    def __post_init__(self) -> None:
        if (self.cert is None) != (self.key is None):
            raise ValueError("a TLS client certificate needs both cert and key")
        for name in ("ca", "cert", "key"):
            path = getattr(self, name)
            if path is not None:
                try:
                    with open(path, "rb"):
                        pass
                except OSError as exc:
                    raise ValueError(f"TLS {name} file {path!r} cannot be read: {exc.strerror}") from None

    def ssl_context(self) -> Any:
        """A client ssl.SSLContext (aiohttp)."""
        import ssl

        context = ssl.create_default_context(cafile=self.ca)
        if self.cert is not None:
            context.load_cert_chain(self.cert, self.key)
        return context

    def grpc_arguments(self) -> dict[str, Any]:
        """tritonclient.grpc's TLS arguments (it reads the files itself)."""
        return {"ssl": True, "root_certificates": self.ca, "private_key": self.key, "certificate_chain": self.cert}

    def geventhttp_arguments(self) -> dict[str, Any]:
        """tritonclient.http's (geventhttpclient) TLS arguments."""
        import gevent.ssl

        options: dict[str, Any] = {}
        if self.ca is not None:
            options["ca_certs"] = self.ca
        if self.cert is not None:
            options["certfile"], options["keyfile"] = self.cert, self.key
        if self.server_name is not None:
            options["server_hostname"] = self.server_name
        return {"ssl": True, "ssl_options": options, "ssl_context_factory": gevent.ssl.create_default_context}


def _grpc_channel_args(tls: TLS | None = None) -> list[tuple[str, Any]]:
    """tritonclient's default channel options plus a reconnect schedule that keeps up with
    our retries (passing channel_args replaces all of tritonclient's defaults)."""
    from tritonclient.grpc import MAX_GRPC_MESSAGE_SIZE, KeepAliveOptions

    keepalive = KeepAliveOptions()
    backoff = C.GRPC_RECONNECT_BACKOFF_MS
    return [
        ("grpc.max_send_message_length", MAX_GRPC_MESSAGE_SIZE),
        ("grpc.max_receive_message_length", MAX_GRPC_MESSAGE_SIZE),
        ("grpc.keepalive_time_ms", keepalive.keepalive_time_ms),
        ("grpc.keepalive_timeout_ms", keepalive.keepalive_timeout_ms),
        ("grpc.keepalive_permit_without_calls", keepalive.keepalive_permit_without_calls),
        ("grpc.http2.max_pings_without_data", keepalive.http2_max_pings_without_data),
        ("grpc.initial_reconnect_backoff_ms", backoff["initial"]),
        ("grpc.min_reconnect_backoff_ms", backoff["min"]),
        ("grpc.max_reconnect_backoff_ms", backoff["max"]),
    ] + ([("grpc.ssl_target_name_override", tls.server_name)] if tls is not None and tls.server_name else [])


def _parameters(request: Request) -> dict[str, str] | None:
    """The request's parameters: the outputs it reads, so that the server computes those alone
    (the contract's ``outputs`` parameter; a server older than it ignores it)."""
    return {C.OUTPUTS_PARAMETER: ",".join(request.outputs)} if request.name_outputs else None


def _grpc_infer_args(module: Any, request: Request, timeout: float | None, headers: Any) -> dict[str, Any]:
    """``InferenceServerClient.infer``'s keyword arguments, the same in grpc and grpc.aio."""
    inputs, outputs = tritonclient_tensors(module, request)
    timeouts = {"client_timeout": timeout, "timeout": _server_timeout_us(timeout)}
    return {"inputs": inputs, "outputs": outputs, "headers": headers, "parameters": _parameters(request), **timeouts}


def _http_infer_args(module: Any, request: Request, timeout: float | None, headers: Any) -> dict[str, Any]:
    """``InferenceServerClient.infer``'s keyword arguments, the same in http and http.aio."""
    inputs, outputs = tritonclient_tensors(module, request)
    return {"inputs": inputs, "outputs": outputs, "timeout": _server_timeout_us(timeout), "headers": headers,
            "parameters": _parameters(request)}


def _grpc_client(module: Any, url: str, tls: TLS | None) -> Any:
    return module.InferenceServerClient(
        url, channel_args=_grpc_channel_args(tls), **(tls.grpc_arguments() if tls is not None else {})
    )


# Triton's answer to a request for an output the model does not have.
_UNEXPECTED_OUTPUT = re.compile(r"unexpected inference output '([^']+)'")


class _Transport:
    """What every transport keeps: where the server is, the time limit, the concurrency, the
    headers sent with every call and the TLS settings."""

    def __init__(
        self,
        url: str,
        timeout: float | None,
        concurrency: int,
        headers: dict[str, str] | None = None,
        tls: TLS | None = None,
    ) -> None:
        self._url = url
        self._timeout = timeout
        self._concurrency = concurrency
        self._headers = dict(headers) if headers else None
        self._tls = tls
        self._lacking: set[str] = set()  # optional outputs this server does not have

    def _shaped(self, request: Request) -> Request:
        """``request`` with the optional outputs the server has not turned down."""
        extra = tuple(o for o in request.optional_outputs if o not in self._lacking)
        return dataclasses.replace(request, outputs=request.outputs + extra, optional_outputs=())

    def _lacks(self, error: BaseException, request: Request) -> bool:
        """Whether ``error`` turns down one of ``request``'s optional outputs (then it is not
        asked for again: the caller sends the request once more)."""
        found = _UNEXPECTED_OUTPUT.search(str(error))
        if found is None or found.group(1) not in request.optional_outputs:
            return False
        self._lacking.add(found.group(1))  # requests in flight meanwhile find it there too
        return True

    def _infer_asking(self, request: Request, infer: Callable[[Request], Any]) -> Any:
        """``infer(request with its optional outputs)``, once more without one the server turns down."""
        try:
            return infer(self._shaped(request))
        except Exception as exc:
            if not self._lacks(exc, request):
                raise
        return infer(self._shaped(request))

    async def _infer_asking_async(self, request: Request, infer: Callable[[Request], Awaitable[Any]]) -> Any:
        """``_infer_asking`` for a coroutine ``infer``."""
        try:
            return await infer(self._shaped(request))
        except Exception as exc:
            if not self._lacks(exc, request):
                raise
        return await infer(self._shaped(request))


# --------------------------------------------------------------------------------------------
# Blocking


class GrpcTransport(_Transport):
    """tritonclient.grpc: one client (one channel) shared by all threads; it is thread-safe."""

    connection_errors: tuple[type[BaseException], ...] = ()
    # Each call takes its own time limit (so a call's deadline reaches into the request).
    per_request_timeout = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        import tritonclient.grpc as module

        self._module = module
        self._client = _grpc_client(module, self._url, self._tls)

    def infer(self, model: str, request: Request, timeout: float | None) -> Any:
        return self._infer_asking(request, lambda shaped: self._client.infer(
            model, **_grpc_infer_args(self._module, shaped, timeout, self._headers)))

    def probe(self, model: str, timeout: float | None) -> tuple[bool, bool]:
        client = self._client
        if not client.is_server_ready(headers=self._headers, client_timeout=timeout):
            return False, False
        if client.is_model_ready(model, headers=self._headers, client_timeout=timeout):
            return True, True
        client.get_model_metadata(model, headers=self._headers, client_timeout=timeout)  # raises for an unknown model
        return True, False

    def config(self, model: str, timeout: float | None) -> dict[str, Any]:
        answer = self._client.get_model_config(model, headers=self._headers, as_json=True, client_timeout=timeout)
        return dict(answer.get("config", answer))

    def close(self) -> None:
        self._client.close()


class HttpTransport(_Transport):
    """tritonclient.http: geventhttpclient, whose clients must not be shared between threads,
    so each thread gets its own (a keep-alive connection each). Its time limit is the socket
    timeout set when the client is made, so the per-request ``timeout`` is fixed here and a
    shorter remaining deadline is enforced by the caller's wait instead."""

    per_request_timeout = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        import tritonclient.http as module
        from geventhttpclient.response import HTTPParseError

        self._module = module
        # A keep-alive connection the server closed (a restart) surfaces as a parse error.
        self.connection_errors: tuple[type[BaseException], ...] = (HTTPParseError,)
        self._local = threading.local()
        self._clients: list[Any] = []
        self._lock = threading.Lock()

    def _client(self) -> Any:
        client = getattr(self._local, "client", None)
        if client is None:
            connect = (
                C.CONNECT_TIMEOUT
                if self._timeout is None
                else min(C.CONNECT_TIMEOUT, self._timeout)
            )
            client = self._module.InferenceServerClient(
                self._url,
                connection_timeout=connect,
                network_timeout=self._timeout,
                **(self._tls.geventhttp_arguments() if self._tls is not None else {}),
            )
            self._local.client = client
            with self._lock:
                self._clients.append(client)
        return client

    def infer(self, model: str, request: Request, timeout: float | None) -> Any:
        return self._infer_asking(request, lambda shaped: self._client().infer(
            model, **_http_infer_args(self._module, shaped, timeout, self._headers)))

    def probe(self, model: str, timeout: float | None) -> tuple[bool, bool]:
        client = self._client()
        if not client.is_server_ready(headers=self._headers):
            return False, False
        if client.is_model_ready(model, headers=self._headers):
            return True, True
        client.get_model_metadata(model, headers=self._headers)  # raises for an unknown model
        return True, False

    def config(self, model: str, timeout: float | None) -> dict[str, Any]:
        return dict(self._client().get_model_config(model, headers=self._headers))

    def close(self) -> None:
        with self._lock:
            clients, self._clients = self._clients, []
        for client in clients:
            try:
                client.close()
            except Exception as exc:  # a client made by another thread may refuse; it is idle
                LOGGER.debug("closing an HTTP client failed: %s", exc)
        self._local = threading.local()


# --------------------------------------------------------------------------------------------
# asyncio


class AsyncGrpcTransport(_Transport):
    """tritonclient.grpc.aio; the channel is made on first use, inside the running loop."""

    connection_errors: tuple[type[BaseException], ...] = ()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        import tritonclient.grpc as module
        import tritonclient.grpc.aio as aio

        self._module = module
        self._aio = aio
        self._client: Any = None

    def _get(self) -> Any:
        if self._client is None:
            self._client = _grpc_client(self._aio, self._url, self._tls)
        return self._client

    async def infer(self, model: str, request: Request, timeout: float | None) -> Any:
        return await self._infer_asking_async(request, lambda shaped: self._get().infer(
            model, **_grpc_infer_args(self._module, shaped, timeout, self._headers)))

    async def probe(self, model: str, timeout: float | None) -> tuple[bool, bool]:
        client = self._get()
        if not await client.is_server_ready(headers=self._headers, client_timeout=timeout):
            return False, False
        if await client.is_model_ready(model, headers=self._headers, client_timeout=timeout):
            return True, True
        await client.get_model_metadata(model, headers=self._headers, client_timeout=timeout)
        return True, False

    async def config(self, model: str, timeout: float | None) -> dict[str, Any]:
        answer = await self._get().get_model_config(model, headers=self._headers, as_json=True, client_timeout=timeout)
        return dict(answer.get("config", answer))

    async def close(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            await client.close()


class AsyncHttpTransport(_Transport):
    """tritonclient.http.aio (aiohttp); the session is made on first use, inside the loop.
    Time limits are asyncio's, so each request gets its own (deadline-aware) limit."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self._tls is not None and self._tls.server_name is not None:
            raise ValueError("TLS server_name is not supported by the asyncio HTTP client; use gRPC or Translator")
        import aiohttp
        import tritonclient.http as module
        import tritonclient.http.aio as aio

        self._module = module
        self._aio = aio
        # ServerDisconnectedError, ClientOSError (refused, reset) and a body cut short.
        self.connection_errors: tuple[type[BaseException], ...] = (
            aiohttp.ClientConnectionError,
            aiohttp.ClientPayloadError,
        )
        self._client: Any = None

    def _get(self) -> Any:
        if self._client is None:
            tls = {} if self._tls is None else {"ssl": True, "ssl_context": self._tls.ssl_context()}
            self._client = self._aio.InferenceServerClient(
                self._url, conn_limit=self._concurrency, conn_timeout=self._timeout, **tls
            )
        return self._client

    async def infer(self, model: str, request: Request, timeout: float | None) -> Any:
        return await self._infer_asking_async(request, lambda shaped: asyncio.wait_for(self._get().infer(
            model, **_http_infer_args(self._module, shaped, timeout, self._headers)), timeout))

    async def probe(self, model: str, timeout: float | None) -> tuple[bool, bool]:
        client = self._get()
        if not await asyncio.wait_for(client.is_server_ready(headers=self._headers), timeout):
            return False, False
        if await asyncio.wait_for(client.is_model_ready(model, headers=self._headers), timeout):
            return True, True
        await asyncio.wait_for(client.get_model_metadata(model, headers=self._headers), timeout)
        return True, False

    async def config(self, model: str, timeout: float | None) -> dict[str, Any]:
        return dict(await asyncio.wait_for(self._get().get_model_config(model, headers=self._headers), timeout))

    async def close(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            await client.close()


SYNC_TRANSPORTS = {"grpc": GrpcTransport, "http": HttpTransport}
ASYNC_TRANSPORTS = {"grpc": AsyncGrpcTransport, "http": AsyncHttpTransport}
