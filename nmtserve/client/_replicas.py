"""Several servers behind one client: spread requests, fail over, take a replica back.

A Kubernetes Service balances gRPC per connection, so one long-lived channel pins one replica.
The client instead holds one transport per replica and picks, for every request, the replica
with the fewest requests in flight (round-robin among ties). Replicas come from a list of
addresses or from a DNS name (``dns:///nmtserve-headless:8001``, a headless Service) resolved to
all its addresses and re-resolved every ``resolve_interval`` seconds.

A request that fails because its replica is unreachable or unavailable (refused, reset,
UNAVAILABLE, a server draining) takes that replica out and goes at once to another one:
translation is idempotent, so re-sending in-flight work is safe. A replica that is out is
probed (server and model ready) after a back-off (0.5 s, doubling to 10 s) and put back when it
answers. Only when every replica is out does the failure reach the retry policy, which waits
and tries again. The pool's bookkeeping (``ReplicaPool``) and every operation (failover,
probing, configuration, closing: each a *plan*, a generator of the transport calls it needs)
are written once; ``ReplicaTransport`` runs the plans' calls blocking and
``AsyncReplicaTransport`` awaits them, over the per-replica transports of ``_transports``.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

from . import _constants as C
from ._protocol import Request
from ._retry import map_exception
from .errors import ProtocolMismatchError, ServerUnavailableError, TranslationError

LOGGER = logging.getLogger("nmtserve.client")

DNS_SCHEME = "dns://"


@dataclass(frozen=True)
class DnsName:
    """``dns:///host:port``: every address the name resolves to is a replica."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"{DNS_SCHEME}/{self.host}:{self.port}"


def parse_dns(url: str, default_port: int) -> DnsName | None:
    """``dns:///name:port`` (gRPC's form) or ``dns://name:port`` -> DnsName; anything else None."""
    if not url.lower().startswith(DNS_SCHEME):
        return None
    rest = url[len(DNS_SCHEME) :].lstrip("/")
    host, sep, port = rest.rpartition(":")
    if not sep or not port.isdigit() or "]" in port:
        host, port = rest, str(default_port)
    host = host.strip("[]")
    if not host:
        raise ValueError(f"no host name in {url!r}: give dns:///NAME:PORT")
    return DnsName(host, int(port))


def resolve(name: DnsName) -> list[str]:
    """Every address of ``name`` as host:port (IPv6 in brackets), sorted, without duplicates."""
    infos = socket.getaddrinfo(name.host, name.port, type=socket.SOCK_STREAM)
    return _addresses(infos, name.port)


async def resolve_async(name: DnsName) -> list[str]:
    infos = await asyncio.get_running_loop().getaddrinfo(name.host, name.port, type=socket.SOCK_STREAM)
    return _addresses(infos, name.port)


def _addresses(infos: Sequence[Any], port: int) -> list[str]:
    hosts = {info[4][0] for info in infos}
    return sorted(f"[{h}]:{port}" if ":" in h else f"{h}:{port}" for h in hosts)


# Back-off of a replica that failed: the first probe after 0.5 s, then 1, 2, ... up to 10 s (a
# probe is one health check, so a replica that is back waits at most 10 s for work).
FIRST_PROBE_DELAY = 0.5
MAX_PROBE_DELAY = 10.0
DEFAULT_RESOLVE_INTERVAL = 30.0


@dataclass(eq=False)
class Replica:
    address: str
    transport: Any
    protocol: str
    inflight: int = 0
    failures: int = 0  # consecutive; 0 means the replica is in
    down_until: float = 0.0
    probing: bool = False
    requests: int = 0  # answered, for stats and tests
    retired: bool = False  # gone from DNS: no new requests, closed with the pool

    @property
    def up(self) -> bool:
        return self.failures == 0

    @property
    def endpoint(self) -> str:
        return f"{self.address} ({self.protocol})"


@dataclass
class ReplicaPool:
    """The replicas and their state; every method is quick and called under ``lock``."""

    protocol: str
    make_transport: Callable[[str], Any]
    replicas: list[Replica] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    _turn: int = 0

    def set_addresses(self, addresses: Sequence[str]) -> list[Replica]:
        """Make the live replicas exactly ``addresses``; returns the ones retired."""
        if not addresses:
            return []  # a failed or empty resolution keeps what we had
        current = {r.address: r for r in self.replicas}
        kept = []
        for address in addresses:
            replica = current.pop(address, None)
            if replica is None:
                replica = Replica(address, self.make_transport(address), self.protocol)
                LOGGER.info("replica %s added", replica.endpoint)
            kept.append(replica)
        for gone in current.values():
            gone.retired = True
            LOGGER.info("replica %s is no longer in DNS: retired", gone.endpoint)
        self.replicas = kept
        return list(current.values())

    def pick(self, exclude: set[Replica], now: float) -> tuple[Replica | None, bool]:
        """The replica for the next request and whether to probe it first.

        An out replica whose back-off is over first (probe it: this is how it comes back); then
        the in replicas (fewest in flight, round-robin among ties); when every replica is out and
        none is due, the one due first (the retry policy spaces these attempts)."""
        candidates = [r for r in self.replicas if r not in exclude]
        if not candidates:
            return None, False
        due = [r for r in candidates if not r.up and not r.probing and r.down_until <= now]
        if due:
            # An out replica whose back-off is over gets the next request, after a health check
            # (if that fails, the request goes on to an in replica and the back-off doubles).
            replica = min(due, key=lambda r: r.down_until)
            replica.probing = True
            return replica, True
        up = [r for r in candidates if r.up]
        if up:
            self._turn += 1
            least = min(r.inflight for r in up)
            tied = [r for r in up if r.inflight == least]
            return tied[self._turn % len(tied)], False
        if exclude:
            return None, False  # failing over: a replica known to be out is no better
        return min(candidates, key=lambda r: r.down_until), False

    def mark_down(self, replica: Replica, error: TranslationError, now: float) -> None:
        replica.probing = False
        replica.failures += 1
        delay = min(MAX_PROBE_DELAY, FIRST_PROBE_DELAY * 2 ** (replica.failures - 1))
        replica.down_until = now + delay
        if replica.failures == 1:
            LOGGER.warning("replica %s taken out: %s", replica.endpoint, error.message)

    def mark_up(self, replica: Replica) -> None:
        replica.probing = False
        if replica.failures:
            LOGGER.info("replica %s is back", replica.endpoint)
        replica.failures = 0
        replica.down_until = 0.0

    def describe(self) -> str:
        return ", ".join(r.address for r in self.replicas)


def failover_error(
    exc: BaseException, replica: Replica, connection_errors: tuple[type[BaseException], ...]
) -> TranslationError | None:
    """The error if ``exc`` means the replica is out (another replica may answer), else None."""
    error = map_exception(exc, endpoint=replica.endpoint, connection_errors=connection_errors)
    if isinstance(error, ServerUnavailableError) and not isinstance(error, ProtocolMismatchError):
        return error
    return None


# A plan is one transport operation written once for both shells: a generator that yields each
# call it needs (a callable of no arguments) and is sent the call's result, or has the call's
# exception thrown into it. ``run_plan`` makes the calls blocking, ``run_plan_async`` awaits them.
Step = Callable[[], Any]
T = TypeVar("T")
Plan = Generator[Step, Any, T]


def _advance(plan: Plan[T], value: Any, error: BaseException | None) -> tuple[bool, Any]:
    """Give a plan a step's outcome: (True, the plan's result) when it returns, else (False,
    its next step)."""
    try:
        return False, plan.throw(error) if error is not None else plan.send(value)
    except StopIteration as stop:
        return True, stop.value


def run_plan(plan: Plan[T]) -> T:
    done, item = _advance(plan, None, None)
    while not done:
        try:
            value, error = item(), None
        except BaseException as exc:  # thrown into the plan, which re-raises what it does not handle
            value, error = None, exc
        done, item = _advance(plan, value, error)
    return item


async def run_plan_async(plan: Plan[T]) -> T:
    done, item = _advance(plan, None, None)
    while not done:
        outcome: tuple[Any, BaseException | None]
        try:
            outcome = (await item(), None)
        except BaseException as exc:  # cancellation included: the plan releases its replica
            outcome = (None, exc)
        done, item = _advance(plan, *outcome)
    return item


class _Common:
    """What the blocking and asyncio transports share: targets, pool, resolution, accounting."""

    def __init__(
        self,
        targets: Sequence[str | DnsName],
        protocol: str,
        make_transport: Callable[[str], Any],
        resolve_interval: float = DEFAULT_RESOLVE_INTERVAL,
        per_request_timeout: bool = True,
    ) -> None:
        if not targets:
            raise ValueError("no server address given")
        self._static = [t for t in targets if isinstance(t, str)]
        self._dns = [t for t in targets if isinstance(t, DnsName)]
        self._pool = ReplicaPool(protocol, make_transport)
        self._resolve_interval = resolve_interval
        self._resolved_at: float | None = None
        self._retired: list[Replica] = []
        if not self._dns:
            self._pool.set_addresses(self._static)
            self._resolved_at = float("inf")
        self.name = ", ".join(str(t) for t in targets)
        # Whether each call takes its own time limit: the per-replica transports' rule.
        self.per_request_timeout = per_request_timeout
        # One resolution at a time: the blocking shell's lock, the asyncio shell's pending one.
        self._resolve_lock = threading.Lock()
        self._resolving: asyncio.Future[None] | None = None

    @property
    def connection_errors(self) -> tuple[type[BaseException], ...]:
        """The per-replica transports' network exception types (one library, the same for all)."""
        with self._pool.lock:
            first = next(iter(self._pool.replicas + self._retired), None)
        return getattr(first.transport, "connection_errors", ()) if first is not None else ()

    @property
    def replicas(self) -> list[Replica]:
        """The live replicas (a copy), for stats and tests."""
        with self._pool.lock:
            return list(self._pool.replicas)

    def _resolve_due(self, now: float) -> bool:
        return self._resolved_at is None or now - self._resolved_at >= self._resolve_interval

    def _apply(self, addresses: list[str], now: float) -> None:
        with self._pool.lock:
            self._resolved_at = now
            self._retired += self._pool.set_addresses(sorted({*self._static, *addresses}))
            if not self._pool.replicas:
                raise ServerUnavailableError(f"no replica: {self.name} resolved to no address")

    def _resolution_failed(self, exc: BaseException, now: float) -> None:
        with self._pool.lock:
            self._resolved_at = now
            empty = not self._pool.replicas
        if empty:
            error = ServerUnavailableError(f"cannot resolve {self.name}: {exc}")
            error.retryable = not isinstance(exc, socket.gaierror)
            raise error from exc
        LOGGER.warning("re-resolving %s failed (%s); keeping the replicas known", self.name, exc)

    def _choose(self, tried: set[Replica]) -> tuple[Replica | None, bool]:
        with self._pool.lock:
            replica, probe = self._pool.pick(tried, time.monotonic())
            if replica is not None:
                replica.inflight += 1
            return replica, probe

    def _release(self, replica: Replica) -> None:
        """A request chosen for ``replica`` that was never answered (a failed probe, a cancel)."""
        with self._pool.lock:
            replica.inflight -= 1

    def _by_health(self) -> list[Replica]:
        """The live replicas, those in service first (for calls that take the first answer)."""
        return sorted(self.replicas, key=lambda r: not r.up)

    def _finished(self, replica: Replica, error: TranslationError | None) -> None:
        with self._pool.lock:
            replica.inflight -= 1
            if error is None:
                replica.requests += 1
                self._pool.mark_up(replica)
            else:
                self._pool.mark_down(replica, error, time.monotonic())

    def _probe_done(self, replica: Replica, ok: bool, error: TranslationError | None) -> None:
        with self._pool.lock:
            if ok:
                self._pool.mark_up(replica)
            else:
                self._pool.mark_down(
                    replica, error or ServerUnavailableError(f"{replica.endpoint} is not ready"), time.monotonic()
                )


    # -- the operations, as plans (see run_plan); the shells' _execute runs them

    def _execute(self, plan: Plan[Any], refresh: bool = True) -> Any:
        """Run a plan (blocking, or as a coroutine), re-resolving DNS names first when due."""
        raise NotImplementedError

    def infer(self, model: str, request: Request, timeout: float | None) -> Any:
        """The request on the replica with the fewest in flight; on one that is out, on another."""
        return self._execute(self._infer_plan(model, request, timeout))

    def probe(self, model: str, timeout: float | None) -> Any:
        """Probe every replica (putting back those that answer); ready when any one is."""
        return self._execute(self._probe_plan(model, timeout))

    def config(self, model: str, timeout: float | None) -> Any:
        """The model's configuration from the first replica that answers (in replicas first)."""
        return self._execute(self._config_plan(model, timeout))

    def close(self) -> Any:
        return self._execute(self._close_plan(), refresh=False)

    def _infer_plan(self, model: str, request: Request, timeout: float | None) -> Plan[Any]:
        tried: set[Replica] = set()
        last: TranslationError | None = None
        while True:
            replica, probe = self._choose(tried)
            if replica is None:
                assert last is not None
                raise last
            tried.add(replica)
            if probe and not (yield from self._health_plan(replica, model)):
                self._release(replica)
                last = ServerUnavailableError(f"the server at {replica.endpoint} is not ready")
                continue
            try:
                result = yield partial(replica.transport.infer, model, request, timeout)
            except Exception as exc:
                error = failover_error(exc, replica, self.connection_errors)
                self._finished(replica, error)
                if error is None:
                    raise
                last = error
                continue
            except BaseException:  # cancelled or interrupted: never answered
                self._release(replica)
                raise
            self._finished(replica, None)
            return result

    def _health_plan(self, replica: Replica, model: str) -> Plan[bool]:
        """One replica's health check before it gets a request again."""
        try:
            ok = (yield partial(replica.transport.probe, model, C.PROBE_TIMEOUT)) == (True, True)
            error = None
        except Exception as exc:
            ok, error = False, map_exception(exc, endpoint=replica.endpoint, connection_errors=self.connection_errors)
        self._probe_done(replica, ok, error)
        return ok

    def _probe_plan(self, model: str, timeout: float | None) -> Plan[tuple[bool, bool]]:
        server_ready = False
        first_error: BaseException | None = None
        for replica in self.replicas:
            try:
                server, ready = yield partial(replica.transport.probe, model, timeout)
            except Exception as exc:
                first_error = first_error or exc
                self._probe_done(replica, False, None)
                continue
            self._probe_done(replica, ready, None)
            if ready:
                return True, True
            server_ready = server_ready or server
        if not server_ready and first_error is not None:
            raise first_error
        return server_ready, False

    def _config_plan(self, model: str, timeout: float | None) -> Plan[dict[str, Any]]:
        error: BaseException | None = None
        for replica in self._by_health():
            try:
                return dict((yield partial(replica.transport.config, model, timeout)))
            except Exception as exc:
                error = error or exc
        assert error is not None
        raise error

    def _close_plan(self) -> Plan[None]:
        with self._pool.lock:
            replicas, self._pool.replicas = self._pool.replicas + self._retired, []
            self._retired = []
        for replica in replicas:
            yield replica.transport.close


class ReplicaTransport(_Common):
    """The blocking transport over several replicas (same interface as GrpcTransport)."""

    def _refresh(self) -> None:
        now = time.monotonic()
        if not self._resolve_due(now) or not self._resolve_lock.acquire(blocking=self._resolved_at is None):
            return
        try:
            if not self._resolve_due(now):
                return
            try:
                addresses = [a for name in self._dns for a in resolve(name)]
            except OSError as exc:
                self._resolution_failed(exc, now)
                return
            self._apply(addresses, now)
        finally:
            self._resolve_lock.release()

    def _execute(self, plan: Plan[Any], refresh: bool = True) -> Any:
        if refresh:
            self._refresh()
        return run_plan(plan)


class AsyncReplicaTransport(_Common):
    """The asyncio transport over several replicas (same interface as AsyncGrpcTransport)."""

    async def _refresh(self) -> None:
        now = time.monotonic()
        if not self._resolve_due(now):
            return
        if self._resolving is not None:
            if self._resolved_at is None:  # the first resolution: everyone waits for it
                await asyncio.shield(self._resolving)
            return
        self._resolving = asyncio.get_running_loop().create_future()
        try:
            try:
                addresses = [a for name in self._dns for a in await resolve_async(name)]
            except OSError as exc:
                self._resolution_failed(exc, now)
                return
            self._apply(addresses, now)
        finally:
            done, self._resolving = self._resolving, None
            done.set_result(None)

    async def _execute(self, plan: Plan[Any], refresh: bool = True) -> Any:
        if refresh:
            await self._refresh()
        return await run_plan_async(plan)
