"""What Translator and AsyncTranslator share: arguments, URL rules, jobs, retry state."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Generic, TypeVar

from ..languages import Language, describe
from . import _constants as C
from ._batching import Chunk, Job
from ._protocol import (
    DocumentArgs,
    Options,
    TranslateArgs,
    Translation,
    decode_document_response,
    decode_response,
    encode_document_request,
    encode_request,
    options_from,
)
from ._replicas import DEFAULT_RESOLVE_INTERVAL, DnsName, parse_dns
from ._retry import Attempts, Deadline, RetryPolicy, map_exception
from ._transports import TLS
from .errors import ModelNotFoundError, ServerUnavailableError, TranslationError

PROTOCOLS = ("grpc", "http")
_SCHEMES = {"grpc": ("grpc://",), "http": ("http://",)}
# A URL with one of these schemes turns TLS on (with the system's certificate authorities
# unless ``tls`` says otherwise).
_TLS_SCHEMES = {"grpc": ("grpcs://",), "http": ("https://",)}
_HAS_PORT = re.compile(r":\d+$")


def normalize_url(url: str | None, protocol: str) -> str:
    """host:port as tritonclient wants it: no scheme; a missing port is the protocol's default."""
    if url is None:
        return f"{C.DEFAULT_HOST}:{C.DEFAULT_PORTS[protocol]}"
    url = url.strip().rstrip("/")
    lowered = url.lower()
    for scheme in _SCHEMES[protocol] + _TLS_SCHEMES[protocol]:
        if lowered.startswith(scheme):
            url = url[len(scheme) :]
            break
    else:
        if "://" in url:
            raise ValueError(
                f"URL {url!r} does not fit protocol {protocol!r}: give host:port, "
                f"{_SCHEMES[protocol][0]}host:port, {_TLS_SCHEMES[protocol][0]}host:port (TLS) or "
                f"dns:///name:port (every address of the name)"
            )
    if not url:
        raise ValueError("the server URL is empty")
    host_only = ("]" in url and not _HAS_PORT.search(url)) or ("]" not in url and ":" not in url)
    return f"{url}:{C.DEFAULT_PORTS[protocol]}" if host_only else url


def parse_targets(
    url: str | Sequence[str] | None, protocol: str
) -> tuple[list[str | DnsName], bool]:
    """The servers a client talks to, and whether a URL asked for TLS.

    ``url``: one address, several separated by commas, or a list; each is host:port (a scheme
    of the protocol accepted, ``grpcs://``/``https://`` meaning TLS) or ``dns:///name:port``.
    """
    items = [None] if url is None else url.split(",") if isinstance(url, str) else list(url)
    if not items or any(not isinstance(i, str) for i in items if i is not None):
        raise ValueError(f"url must be a string or a list of strings, got {url!r}")
    targets: list[str | DnsName] = []
    tls = False
    for item in items:
        if item is not None and not item.strip():
            raise ValueError(f"an empty server address in {url!r}")
        dns = parse_dns(item.strip(), C.DEFAULT_PORTS[protocol]) if item is not None else None
        if dns is not None:
            targets.append(dns)
            continue
        tls = tls or (item is not None and item.strip().lower().startswith(_TLS_SCHEMES[protocol]))
        target = normalize_url(item, protocol)
        if target not in targets:
            targets.append(target)
    return targets, tls


def _positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value


def _positive_seconds(name: str, value: float | None) -> float | None:
    if value is not None and not value > 0:
        raise ValueError(f"{name} must be a positive number of seconds or None, got {value!r}")
    return value


# What translate_batches returns: an Iterator (Translator) or an AsyncIterator (AsyncTranslator).
Batches = TypeVar("Batches")


def languages_of_pairs(pairs: Iterable[str]) -> list[Language]:
    """The languages of language pairs ("en-fr", "en-de": en into fr and de; fr; de), each with
    the targets it translates into."""
    sides = [p.split("-", 1) for p in pairs]
    codes = list(dict.fromkeys(code for pair in sides for code in pair))
    return [replace(lang, targets=tuple(t for s, t in sides if s == lang.code)) for lang in describe(codes)]


@dataclass(frozen=True)
class Call:
    """One request and its retry state: a shell runs ``send(timeout)`` until it returns (waiting
    ``attempts.failed(error)`` seconds after each failure; it raises when the failure is final or
    the retries are spent), then gives its result to ``decode``. The one place a shell blocks
    or awaits."""

    attempts: Attempts
    send: Callable[[float | None], Any]  # the transport's result, or an awaitable of it
    decode: Callable[[Any], Any]


# A request in flight: a Future (Translator) or an asyncio Task (AsyncTranslator).
Handle = TypeVar("Handle", bound=Any)


class Flight(Generic[Handle]):
    """A job's requests in flight: which chunk to start, when the call is done, what an answer
    completes. The shells start the requests (worker threads or tasks) and wait for them."""

    def __init__(self, job: Job, concurrency: int, deadline: Deadline) -> None:
        self.job, self.concurrency, self.deadline = job, concurrency, deadline
        self.handles: dict[Handle, Chunk] = {}

    def chunks_to_start(self) -> Iterator[Chunk]:
        """The next chunks, while fewer than ``concurrency`` requests are in flight."""
        while len(self.handles) < self.concurrency:
            chunk = self.job.next_chunk()
            if chunk is None:
                return
            yield chunk

    def start(self, handle: Handle, chunk: Chunk) -> None:
        self.handles[handle] = chunk

    @property
    def idle(self) -> bool:
        """Nothing in flight and nothing left to send."""
        return not self.handles and self.job.all_planned

    def settle(self, finished: Collection[Handle]) -> None:
        """Record what finished; nothing finished means the wait ran into the call's deadline."""
        if not finished:
            raise self.deadline.error(self.job.emitted, self.job.seen)
        for handle in finished:
            self.job.complete(self.handles.pop(handle), handle.result())


class BaseTranslator(Generic[Batches]):
    """Arguments and everything that is not I/O (see Translator for the parameters).

    The shells (``_sync.Translator``, ``_async.AsyncTranslator``) add the I/O: ``_open`` (the
    transport and the limit on requests in flight), ``_run`` (keeps a job's requests in flight),
    ``_perform`` (runs a Call) and the public methods, whose keyword arguments are
    ``TranslateArgs`` / ``DocumentArgs``.
    """

    _transport: Any
    _closed = False

    def __init__(
        self,
        url: str | Sequence[str] | None = None,
        protocol: str = C.DEFAULT_PROTOCOL,
        model: str = C.DEFAULT_MODEL,
        *,
        timeout: float | None = C.DEFAULT_TIMEOUT,
        deadline: float | None = None,
        max_retries: int = C.DEFAULT_MAX_RETRIES,
        batch_size: int = C.DEFAULT_BATCH_SIZE,
        max_batch_tokens: int | None = C.DEFAULT_MAX_BATCH_TOKENS,
        concurrency: int = C.DEFAULT_CONCURRENCY,
        headers: Mapping[str, str] | None = None,
        tls: TLS | bool | None = None,
        resolve_interval: float = DEFAULT_RESOLVE_INTERVAL,
    ) -> None:
        if protocol not in PROTOCOLS:
            raise ValueError(f"protocol must be one of {', '.join(PROTOCOLS)}, got {protocol!r}")
        if not model:
            raise ValueError("model must be a model name")
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
            raise ValueError(f"max_retries must be a non-negative integer, got {max_retries!r}")
        self.protocol = protocol
        self.targets, tls_scheme = parse_targets(url, protocol)
        # For messages and repr: "host:port", or every target separated by commas.
        self.url = ", ".join(str(t) for t in self.targets)
        if tls is True or (tls is None and tls_scheme):
            tls = TLS()
        if tls is not None and tls is not False and not isinstance(tls, TLS):
            raise ValueError(f"tls must be a TLS(...), True or None, got {tls!r}")
        self.tls: TLS | None = tls or None
        self.resolve_interval = (
            _positive_seconds("resolve_interval", resolve_interval) or DEFAULT_RESOLVE_INTERVAL
        )
        self.model = model
        self.timeout = _positive_seconds("timeout", timeout)
        self.deadline = _positive_seconds("deadline", deadline)
        self.batch_size = _positive_int("batch_size", batch_size)
        self.max_batch_tokens = (
            None
            if max_batch_tokens is None
            else _positive_int("max_batch_tokens", max_batch_tokens)
        )
        self.concurrency = _positive_int("concurrency", concurrency)
        self.retry_policy = RetryPolicy(max_retries=max_retries)
        if headers is not None and not all(
            isinstance(k, str) and isinstance(v, str) for k, v in headers.items()
        ):
            raise ValueError("headers must map header names to string values")
        # Sent with every request and health check (e.g. an auth token for a gateway in front).
        self.headers = dict(headers) if headers else None
        self._open()

    def _open(self) -> None:
        """Set up the transport and the concurrency limit (sync or asyncio); runs at the end of
        ``__init__``, once the arguments are checked."""
        raise NotImplementedError

    def _make_transport(self, transports: Mapping[str, type], replicas: type) -> object:
        """One server: its transport. Several, or a DNS name: a replica transport over them."""
        cls = transports[self.protocol]

        def one(address: str) -> object:
            return cls(address, self.timeout, self.concurrency, self.headers, self.tls)

        if len(self.targets) == 1 and isinstance(self.targets[0], str):
            return one(self.targets[0])
        extra = (
            {"per_request_timeout": cls.per_request_timeout}
            if hasattr(cls, "per_request_timeout")
            else {}
        )
        return replicas(self.targets, self.protocol, one, self.resolve_interval, **extra)

    @property
    def endpoint(self) -> str:
        """Where requests go, for messages: "localhost:8001 (grpc)"."""
        return f"{self.url} ({self.protocol})"

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(url={self.url!r}, protocol={self.protocol!r}, "
            f"model={self.model!r}, batch_size={self.batch_size}, "
            f"concurrency={self.concurrency})"
        )

    # -- the parts of a call

    def _start(
        self, texts: str | Iterable[str], options: Options, on_error: str = "raise"
    ) -> tuple[Job, Deadline]:
        if isinstance(texts, str):
            texts = (texts,)
        blank = Translation("", 0.0, [] if options.nbest else None, alignment=[] if options.alignment else None)
        job = Job(
            texts,
            batch_size=self.batch_size,
            max_batch_tokens=self.max_batch_tokens,
            blank=blank,
            on_error=on_error,
        )
        return job, Deadline(self.deadline)

    @staticmethod
    def _listed(config: Mapping[str, object], name: str) -> list[str]:
        """A comma-separated config parameter of the model, as a list ([] when absent)."""
        params = config.get("parameters") or {}
        entry = params.get(name) if isinstance(params, Mapping) else None
        value = entry.get("string_value", "") if isinstance(entry, Mapping) else ""
        return [p for p in str(value).split(",") if p]

    def _pairs_from(self, config: Mapping[str, object]) -> list[str]:
        """A repository of pairs' pairs, or the one model's pair ("unknown" for a side its
        checkpoint does not name); [] for a multilingual model (see languages())."""
        return self._listed(config, C.PAIRS_PARAMETER) or self._listed(config, C.PAIR_PARAMETER)

    def _languages_from(self, config: Mapping[str, object]) -> list[Language]:
        """A multilingual model's languages (each into every other), or those of a repository of
        language pairs (each into its pairs' targets); [] for one model without pairs."""
        codes = self._listed(config, C.LANGUAGES_PARAMETER)
        if codes:
            return [replace(lang, targets=tuple(c for c in codes if c != lang.code)) for lang in describe(codes)]
        return languages_of_pairs(self._listed(config, C.PAIRS_PARAMETER))

    @property
    def document_model(self) -> str:
        """The server's document model beside ``model``: "translate" -> "translate_document"."""
        return self.model + C.DOCUMENT_MODEL_SUFFIX

    def translate_batches(
        self, texts: str | Iterable[str], options: Options, on_error: str = "raise"
    ) -> Batches:
        """Like translate_iter, but a list each time the in-order prefix grows (a streaming writer
        flushes each at once, as ``nmtserve translate`` does); ``options`` is an
        ``nmtserve.client.Options`` (decoding options, checked when it is made). A Translator
        returns an iterator, an AsyncTranslator an async one."""
        self._check_open()
        job, deadline = self._start(texts, options, on_error)
        return self._run(job, options, deadline)

    def _run(self, job: Job, options: Options, deadline: Deadline) -> Batches:
        raise NotImplementedError

    def _batches(self, texts: str | Iterable[str], args: TranslateArgs) -> Batches:
        """translate_batches for translate / translate_iter's keyword arguments (one str input's
        ``terms`` are its own list of terms)."""
        if isinstance(texts, str) and args.get("terms") is not None:
            args = {**args, "terms": [args["terms"]]}  # type: ignore[typeddict-item]
        options = options_from("translate", args, TranslateArgs)
        return self.translate_batches(texts, options, args.get("on_error", "raise"))

    def _request_call(self, chunk: Chunk, options: Options, deadline: Deadline) -> Call:
        request = encode_request(chunk.texts, options, chunk.indices)
        transport, model = self._transport, self.model
        return Call(
            self._attempts(deadline, chunk, transport),
            lambda timeout: transport.infer(model, request, timeout),
            lambda result: decode_response(result, len(chunk), options, chunk.texts),
        )

    def _document_call(self, document: str | bytes, fmt: str, args: DocumentArgs) -> Call:
        self._check_open()
        request = encode_document_request(
            document, fmt, options_from("translate_document", args, DocumentArgs)
        )
        transport, model = self._transport, self.document_model
        return Call(
            self._attempts(Deadline(self.deadline), None, transport),
            lambda timeout: transport.infer(model, request, timeout),
            lambda result: decode_document_response(result, fmt)[0],
        )

    def _config_call(self, read: Callable[[Mapping[str, object]], Any]) -> Call:
        """The model's configuration, read by ``read``."""
        self._check_open()
        transport, model = self._transport, self.model
        return Call(
            self._attempts(Deadline(self.deadline), None, transport),
            lambda timeout: transport.config(model, timeout),
            read,
        )

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"{type(self).__name__} is closed")

    def _attempts(self, deadline: Deadline, chunk: Chunk | None, transport: object) -> Attempts:
        return Attempts(
            self.retry_policy,
            deadline,
            self.timeout,
            endpoint=self.endpoint,
            chunk=chunk,
            connection_errors=getattr(transport, "connection_errors", ()),
        )

    def _readiness(self, timeout: float, transport: object) -> ReadinessWait:
        return ReadinessWait(self, timeout, getattr(transport, "connection_errors", ()))


class ReadinessWait:
    """The state of one wait_until_ready(): the shells probe and sleep, this decides."""

    def __init__(
        self,
        translator: BaseTranslator,
        timeout: float,
        connection_errors: tuple[type[BaseException], ...],
    ) -> None:
        self._translator = translator
        self._timeout = timeout
        self._connection_errors = connection_errors
        self._started = time.monotonic()
        self._server_ready = False
        self._last_error: TranslationError | None = None

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self._started

    def probe_timeout(self) -> float:
        return max(0.1, min(self._timeout - self.elapsed, C.PROBE_TIMEOUT))

    def ready(self, probe: tuple[bool, bool]) -> bool:
        """Record a probe's (server ready, model ready); True when both are."""
        self._server_ready, model_ready = probe
        self._last_error = None
        return model_ready

    def failed(self, exc: BaseException) -> None:
        """Record a failed probe; raise at once when the failure is final (unknown model)."""
        t = self._translator
        error = map_exception(exc, endpoint=t.endpoint, connection_errors=self._connection_errors)
        if isinstance(error, ModelNotFoundError):
            raise error from exc
        self._server_ready, self._last_error = False, error

    def pause(self) -> float:
        """Seconds to sleep before the next probe; raises when the time is up."""
        remaining = self._timeout - self.elapsed
        if remaining <= 0:
            raise self._error()
        return min(C.READY_POLL_INTERVAL, remaining)

    def _error(self) -> TranslationError:
        t, waited = self._translator, self._timeout
        if self._server_ready:
            # Triton's model control mode "none" makes a server ready only once every model has
            # loaded: a model that is still not ready failed to load or is not this server's.
            return ModelNotFoundError(
                f"the server at {t.endpoint} is ready but model '{t.model}' did not become "
                f"ready within {waited:g} s"
            )
        if self._last_error is not None:
            return ServerUnavailableError(
                f"{self._last_error.message} (waited {waited:g} s for it to become ready)"
            )
        return ServerUnavailableError(
            f"the server at {t.endpoint} did not become ready within {waited:g} s"
        )
