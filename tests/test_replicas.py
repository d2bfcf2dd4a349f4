"""The client across replicas: spreading, failover of in-flight work, taking a replica back, DNS, TLS.

The server tests start a second (and, for TLS, a third) real tritonserver on loopback next to
the session's demo server and check every answer against the PyTorch reference decode.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import threading
import time

import pytest

from nmtserve.client import TLS, Translator
from nmtserve.client._base import parse_targets
from nmtserve.client._replicas import (
    AsyncReplicaTransport,
    DnsName,
    ReplicaPool,
    ReplicaTransport,
    parse_dns,
    resolve,
)
from nmtserve.client.errors import ServerUnavailableError

# -- addresses


def test_targets_from_commas_lists_dns_and_tls_schemes():
    assert parse_targets("a:1,b:2, a:1", "grpc") == (["a:1", "b:2"], False)
    assert parse_targets(["grpcs://a:1", "b"], "grpc") == (["a:1", "b:8001"], True)
    assert parse_targets(["https://a"], "http") == (["a:8000"], True)
    assert parse_targets("dns:///svc.ns:9001,c:3", "grpc") == ([DnsName("svc.ns", 9001), "c:3"], False)
    assert parse_dns("dns://svc", 8001) == DnsName("svc", 8001)
    assert parse_targets(None, "http") == (["localhost:8000"], False)
    for bad in ("a:1,,b:2", "https://a:1", "dns:///:5"):
        with pytest.raises(ValueError):
            parse_targets(bad, "grpc")


def test_dns_names_resolve_to_every_address():
    addresses = resolve(DnsName("localhost", 7))
    assert addresses and all(a.endswith(":7") for a in addresses)
    assert "127.0.0.1:7" in addresses


def test_tls_files_must_exist_and_pair(tmp_path):
    with pytest.raises(ValueError, match="cannot be read"):
        TLS(ca=str(tmp_path / "missing.pem"))
    (tmp_path / "c.pem").write_text("x")
    with pytest.raises(ValueError, match="both cert and key"):
        TLS(cert=str(tmp_path / "c.pem"))


# -- the pool's rules (pure bookkeeping, no I/O)


def _pool(*addresses: str) -> ReplicaPool:
    pool = ReplicaPool("grpc", lambda address: object())
    pool.set_addresses(addresses)
    return pool


def test_requests_go_to_the_replica_with_fewest_in_flight_round_robin_among_ties():
    pool = _pool("a:1", "b:1", "c:1")
    chosen = []
    for _ in range(6):
        replica, probe = pool.pick(set(), now=0.0)
        assert replica is not None and not probe
        replica.inflight += 1
        chosen.append(replica.address)
    assert sorted(chosen) == ["a:1", "a:1", "b:1", "b:1", "c:1", "c:1"]


def test_a_failed_replica_is_out_probed_after_its_back_off_and_put_back():
    pool = _pool("a:1", "b:1")
    a, b = pool.replicas
    pool.mark_down(a, ServerUnavailableError("refused"), now=10.0)
    assert all(pool.pick(set(), now=10.1)[0] is b for _ in range(5))
    # Failing over from b while a is still backing off: nothing else to try.
    assert pool.pick({b}, now=10.1) == (None, False)
    # After the back-off, the next request probes a first; one probe at a time.
    replica, probe = pool.pick(set(), now=10.6)
    assert replica is a and probe and a.probing
    assert pool.pick(set(), now=10.6) == (b, False)
    pool.mark_down(a, ServerUnavailableError("refused"), now=10.6)
    assert a.down_until == pytest.approx(11.6)  # the back-off doubles
    pool.mark_up(a)
    assert a.up and a.down_until == 0.0


def test_with_every_replica_out_the_one_due_first_is_tried():
    pool = _pool("a:1", "b:1")
    a, b = pool.replicas
    pool.mark_down(a, ServerUnavailableError("x"), now=0.0)
    pool.mark_down(b, ServerUnavailableError("x"), now=0.0)
    pool.mark_down(b, ServerUnavailableError("x"), now=0.0)
    assert pool.pick(set(), now=0.1) == (a, False)


def test_dns_changes_add_and_retire_replicas():
    pool = _pool("a:1", "b:1")
    retired = pool.set_addresses(["b:1", "c:1"])
    assert [r.address for r in retired] == ["a:1"] and retired[0].retired
    assert [r.address for r in pool.replicas] == ["b:1", "c:1"]
    assert pool.set_addresses([]) == [] and len(pool.replicas) == 2  # a failed lookup keeps them


# -- the operations (plans) over scripted per-replica transports, in both shells


class _Scripted:
    """A per-replica transport whose answers the test sets: ``fail`` raises, ``hang`` never answers."""

    connection_errors = (ConnectionRefusedError,)

    def __init__(self, address: str) -> None:
        self.address, self.fail, self.hang, self.calls, self.closed = address, None, False, 0, False

    def _answer(self) -> str:
        self.calls += 1
        if self.fail is not None:
            raise self.fail
        return f"answer of {self.address}"

    def infer(self, model, request, timeout):
        return self._answer()

    def probe(self, model, timeout):
        return (self.fail is None, self.fail is None)

    def close(self):
        self.closed = True


class _AsyncScripted(_Scripted):
    async def infer(self, model, request, timeout):
        while self.hang:
            await asyncio.sleep(0.01)
        return self._answer()

    async def probe(self, model, timeout):
        return super().probe(model, timeout)

    async def close(self):
        self.closed = True


def _scripted(transport_class, replica_class):
    made: dict[str, _Scripted] = {}

    def make(address: str) -> _Scripted:
        made[address] = transport_class(address)
        return made[address]

    return replica_class(["a:1", "b:1"], "grpc", make), made


def test_a_refused_request_fails_over_at_once_and_its_replica_is_out_blocking():
    transport, made = _scripted(_Scripted, ReplicaTransport)
    made["a:1"].fail = ConnectionRefusedError("refused")
    answers = {transport.infer("m", None, 1.0) for _ in range(4)}
    assert answers == {"answer of b:1"}
    a, b = transport.replicas
    assert not a.up and b.up and a.inflight == b.inflight == 0
    assert made["a:1"].calls == 1  # out after one refusal: later requests skip it
    made["b:1"].fail = ValueError("a bug, not an outage")
    with pytest.raises(ValueError):
        transport.infer("m", None, 1.0)  # not a replica failure: no failover, raised as it is
    transport.close()
    assert made["a:1"].closed and made["b:1"].closed


def test_a_refused_request_fails_over_and_a_cancelled_one_frees_its_replica_asyncio():
    async def run() -> None:
        transport, made = _scripted(_AsyncScripted, AsyncReplicaTransport)
        made["a:1"].fail = ConnectionRefusedError("refused")
        assert {await transport.infer("m", None, 1.0) for _ in range(3)} == {"answer of b:1"}
        assert await transport.probe("m", 1.0) == (True, True)
        made["b:1"].hang = True
        task = asyncio.create_task(transport.infer("m", None, 1.0))
        await asyncio.sleep(0.05)
        assert sum(r.inflight for r in transport.replicas) == 1
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert sum(r.inflight for r in transport.replicas) == 0
        await transport.close()
        assert made["a:1"].closed and made["b:1"].closed

    asyncio.run(run())


# -- real servers


@pytest.fixture(scope="module")
def references(demo_checkpoint, demo_sentences):
    from nmtserve.decoding.search import SearchOptions
    from nmtserve.model.reference import translate as reference_translate

    options = SearchOptions(beam_size=4, length_penalty=1.0, max_length=128, max_length_a=2.0, max_length_b=10)
    texts = demo_sentences[:1000]
    out = reference_translate(demo_checkpoint.model, demo_checkpoint.tokenizer, texts, options, batch_size=64)
    return texts, [n[0][0] for n in out]


def _server(repository, grpc_port=None, extra_args=()):
    from nmtserve.server.launcher import ServerConfig, TritonServer

    ports = {"grpc_port": grpc_port} if grpc_port else {}
    return TritonServer(ServerConfig.on_free_ports(repository, extra_args=tuple(extra_args), **ports))


@pytest.fixture(scope="module")
def second_server(demo_repository):
    server = _server(demo_repository)
    server.start()
    try:
        server.wait_until_ready(120)
        yield server
    finally:
        if server.is_running():
            server.stop()


@pytest.mark.server
def test_two_replicas_share_the_work_survive_a_kill_and_take_it_back(demo_server, second_server, references,
                                                                     demo_repository):
    texts, want = references
    a, b = demo_server.urls.grpc_address, second_server.urls.grpc_address
    with Translator([a, b], concurrency=8, batch_size=8, max_retries=6) as client:
        started = time.perf_counter()
        assert [t.text for t in client.translate(texts)] == want
        both = time.perf_counter() - started
        counts = {r.address: r.requests for r in client._transport.replicas}
        assert all(n >= 25 for n in counts.values()), counts  # 125 requests, spread

        # Kill b (SIGKILL, no drain) while requests are in flight on it.
        got: list[str] = []
        killed_at: list[float] = []

        def kill_when_busy() -> None:
            while len(got) < 200:
                time.sleep(0.01)
            killed_at.append(time.perf_counter())
            second_server.kill()

        killer = threading.Thread(target=kill_when_busy)
        killer.start()
        started = time.perf_counter()
        for t in client.translate_iter(texts):
            got.append(t.text)
        with_kill = time.perf_counter() - started
        killer.join()
        assert got == want  # every sentence, its own translation, in order
        replica_b = next(r for r in client._transport.replicas if r.address == b)
        assert not replica_b.up

        # b comes back on the same port: it is probed and gets work again.
        port = int(b.rsplit(":", 1)[1])
        revived = _server(demo_repository, grpc_port=port)
        revived.start()
        try:
            revived.wait_until_ready(120)
            back = time.perf_counter()
            before = replica_b.requests
            deadline = time.monotonic() + 60
            while replica_b.requests == before and time.monotonic() < deadline:
                assert [t.text for t in client.translate(texts[:64])] == want[:64]
            assert replica_b.requests > before and replica_b.up
            print(f"two replicas: {len(texts) / both:.1f} sent/s; with one killed after 200: "
                  f"{len(texts) / with_kill:.1f} sent/s; back in service {time.perf_counter() - back:.2f} s "
                  f"after it was ready")
        finally:
            revived.stop()


@pytest.mark.server
def test_a_dns_name_uses_every_address(demo_server, references):
    # localhost resolves to 127.0.0.1 (and ::1 where configured; the server listens on 127.0.0.1
    # only, so that replica fails and is taken out without losing a sentence).
    texts, want = references
    port = demo_server.urls.grpc_address.rsplit(":", 1)[1]
    with Translator(f"dns:///localhost:{port}", concurrency=4) as client:
        assert [t.text for t in client.translate(texts[:40])] == want[:40]
        assert "127.0.0.1:" + port in {r.address for r in client._transport.replicas}


@pytest.fixture(scope="module")
def certificates(tmp_path_factory):
    """A test CA, a server certificate for localhost/127.0.0.1 and a client certificate (PEM files)."""
    import trustme

    root = tmp_path_factory.mktemp("tls")
    ca = trustme.CA()
    server, client = ca.issue_cert("localhost", "127.0.0.1"), ca.issue_cert("client@nmtserve")
    files = {name: root / f"{name}.pem" for name in ("ca", "server", "server_key", "client", "client_key")}
    ca.cert_pem.write_to_path(str(files["ca"]))
    server.cert_chain_pems[0].write_to_path(str(files["server"]))
    server.private_key_pem.write_to_path(str(files["server_key"]))
    client.cert_chain_pems[0].write_to_path(str(files["client"]))
    client.private_key_pem.write_to_path(str(files["client_key"]))
    return files


class TlsTerminator:
    """A TLS front for Triton's plain HTTP port, as an ingress would be: decrypts and pipes bytes.

    Triton's HTTP endpoint has no TLS of its own; this checks the HTTP clients' TLS settings
    (trusting a custom CA, presenting a client certificate) against a real handshake."""

    def __init__(self, backend_port: int, certificates, require_client_cert: bool) -> None:
        self._backend = backend_port
        self._context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(certificates["ca"]))
        self._context.load_cert_chain(str(certificates["server"]), str(certificates["server_key"]))
        self._context.verify_mode = ssl.CERT_REQUIRED if require_client_cert else ssl.CERT_NONE
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                raw, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(raw,), daemon=True).start()

    def _serve(self, raw) -> None:
        try:
            client = self._context.wrap_socket(raw, server_side=True)
        except OSError:
            raw.close()
            return
        backend = socket.create_connection(("127.0.0.1", self._backend))
        threading.Thread(target=self._pipe, args=(backend, client), daemon=True).start()
        self._pipe(client, backend)

    @staticmethod
    def _pipe(source, sink) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for s in (source, sink):
                try:
                    s.close()
                except OSError:
                    pass

    def close(self) -> None:
        self._listener.close()


@pytest.mark.server
def test_http_over_tls_with_a_custom_ca_and_client_certificate(demo_server, certificates, references):
    import asyncio

    from nmtserve.client import AsyncTranslator

    texts, want = references
    http_port = int(demo_server.urls.http_address.rsplit(":", 1)[1])
    front = TlsTerminator(http_port, certificates, require_client_cert=True)
    try:
        tls = TLS(ca=str(certificates["ca"]), cert=str(certificates["client"]), key=str(certificates["client_key"]))
        url = f"https://localhost:{front.port}"
        with Translator(url, protocol="http", tls=tls) as client:
            assert [t.text for t in client.translate(texts[:20])] == want[:20]

        async def run():
            async with AsyncTranslator(url, protocol="http", tls=tls) as client:
                return [t.text for t in await client.translate(texts[20:40])]

        assert asyncio.run(run()) == want[20:40]
        # A client that does not trust the test CA refuses the server: no silent plain-text fallback.
        with Translator(url, protocol="http", max_retries=0) as client:
            with pytest.raises(ServerUnavailableError):
                client.translate(texts[:1])
    finally:
        front.close()


@pytest.mark.server
def test_grpc_over_mutual_tls(demo_repository, references, certificates):
    ca_pem, server_pem, server_key = certificates["ca"], certificates["server"], certificates["server_key"]
    client_pem, client_key = certificates["client"], certificates["client_key"]
    server = _server(demo_repository, extra_args=[
        "--grpc-use-ssl=true", "--grpc-use-ssl-mutual=true", f"--grpc-server-cert={server_pem}",
        f"--grpc-server-key={server_key}", f"--grpc-root-cert={ca_pem}",
    ])
    texts, want = references
    with server:
        server.wait_until_ready(120)
        address = server.urls.grpc_address
        tls = TLS(ca=str(ca_pem), cert=str(client_pem), key=str(client_key))
        with Translator(address, tls=tls) as client:
            assert [t.text for t in client.translate(texts[:20])] == want[:20]
        # Without the client certificate the server refuses the handshake: a clear error.
        with Translator(address, tls=TLS(ca=str(ca_pem)), max_retries=0, timeout=10) as client:
            with pytest.raises(ServerUnavailableError):
                client.translate(texts[:2])
