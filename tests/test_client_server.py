"""Translator and AsyncTranslator against a real tritonserver (the fake-translate repository,
tests/client_fixtures.py)."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from client_fixtures import (
    PROTOCOLS,
    address,
    expected,
    make_server,
    mixed_lines,
)

from nmtserve.client import (
    AsyncTranslator,
    Hypothesis,
    InvalidInputError,
    ModelNotFoundError,
    ServerUnavailableError,
    TimeoutError,
    Translation,
    Translator,
)
from nmtserve.client._retry import RetryPolicy
from nmtserve.server.launcher import (
    TritonInstall,
    TritonServer,
    free_port,
    free_ports,
)


@pytest.mark.server
def test_one_string_in_one_translation_out(translator: Translator) -> None:
    result = translator.translate("the cat sat")

    assert result == Translation("sat cat the", -3.0, None)
    assert str(result) == "sat cat the"


@pytest.mark.server
@pytest.mark.parametrize("concurrency", [1, 4, 16])
def test_order_and_count_survive_batching(server: TritonServer, concurrency: int) -> None:
    lines = mixed_lines(1000)
    with Translator(server.urls.grpc_address, concurrency=concurrency, batch_size=16) as t:
        results = t.translate(lines)

    assert len(results) == len(lines)
    assert [r.text for r in results] == [expected(line) for line in lines]
    assert [r.score for r in results] == [
        -float(len(line.split())) if line.strip() else 0.0 for line in lines
    ]


@pytest.mark.server
def test_sync_async_grpc_and_http_agree(server: TritonServer) -> None:
    lines = mixed_lines(300)
    options = {"beam_size": 4, "num_hypotheses": 2, "length_penalty": 0.5}

    async def run_async(protocol: str) -> list[Translation]:
        async with AsyncTranslator(address(server, protocol), protocol, batch_size=8) as t:
            return await t.translate(lines, **options)

    results = {}
    for protocol in PROTOCOLS:
        with Translator(address(server, protocol), protocol, batch_size=8) as t:
            results["sync", protocol] = t.translate(lines, **options)
        results["async", protocol] = asyncio.run(run_async(protocol))

    first = results["sync", "grpc"]
    assert [r.text for r in first] == [expected(line) for line in lines]
    for key, other in results.items():
        assert other == first, key


@pytest.mark.server
def test_nbest_has_k_hypotheses_best_first(translator: Translator) -> None:
    results = translator.translate(["a b c", "", "d"], num_hypotheses=3, all_hypotheses=True)

    assert results[0].hypotheses == [
        Hypothesis("c b a", -3.0),
        Hypothesis("c b a (1)", -4.0),
        Hypothesis("c b a (2)", -5.0),
    ]
    assert results[0].text == "c b a"
    assert results[1] == Translation("", 0.0, [])
    assert [len(r.hypotheses or []) for r in results] == [3, 0, 3]


@pytest.mark.server
def test_nbest_keeps_only_the_plausible_hypotheses_by_default(translator: Translator) -> None:
    # The fake's lower hypotheses are a whole point under the best (nmtserve.alternatives.MARGIN
    # is 0.1) and add a number: the best comes back alone.
    results = translator.translate(["a b c", "", "d"], num_hypotheses=3)

    assert [r.hypotheses for r in results] == [[Hypothesis("c b a", -3.0)], [], [Hypothesis("d", -1.0)]]


@pytest.mark.server
def test_invalid_input_names_the_sentence_and_the_server_keeps_serving(
    translator: Translator,
) -> None:
    lines = ["fine", "also fine", "this is INVALID here", "fine again"]

    with pytest.raises(InvalidInputError) as raised:
        translator.translate(lines)

    error = raised.value
    assert "contains the word INVALID" in error.message
    assert error.index == 2
    assert error.status in ("StatusCode.INVALID_ARGUMENT", "400")
    assert translator.translate("still here").text == "here still"


@pytest.mark.server
def test_option_out_of_range_is_invalid_input(translator: Translator) -> None:
    with pytest.raises(InvalidInputError, match=r"BEAM_SIZE must be in \[1, 16\], got 99"):
        translator.translate("a b", beam_size=99)


@pytest.mark.server
def test_unknown_model_is_model_not_found(server: TritonServer) -> None:
    for protocol in PROTOCOLS:
        with Translator(address(server, protocol), protocol, model="nosuch") as t:
            with pytest.raises(ModelNotFoundError, match="nosuch"):
                t.translate("a")
            with pytest.raises(ModelNotFoundError):
                t.wait_until_ready(timeout=5)


@pytest.mark.server
def test_readiness(translator: Translator) -> None:
    assert translator.is_ready()
    assert translator.wait_until_ready(timeout=5) < 5


@pytest.mark.server
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_nothing_listening_is_unavailable_after_retries_within_the_deadline(
    protocol: str,
) -> None:
    translator = Translator(f"127.0.0.1:{free_port()}", protocol, deadline=5.0)
    translator.retry_policy = RetryPolicy(max_retries=2, initial_delay=0.05)
    started = time.monotonic()

    with translator, pytest.raises(ServerUnavailableError) as raised:
        translator.translate(["a", "b"])

    assert time.monotonic() - started < 5.0
    assert raised.value.attempts == 3
    assert not translator.is_ready()


@pytest.mark.server
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_request_timeout_is_not_retried(server: TritonServer, protocol: str) -> None:
    started = time.monotonic()

    with Translator(address(server, protocol), protocol, timeout=0.3) as translator:
        with pytest.raises(TimeoutError) as raised:
            translator.translate(["a SLOW request"])

    assert time.monotonic() - started < 0.9  # one attempt, no retry
    assert raised.value.attempts == 1


@pytest.mark.server
def test_deadline_bounds_the_whole_call(server: TritonServer) -> None:
    async def run() -> None:
        async with AsyncTranslator(server.urls.grpc_address, deadline=0.3) as t:
            await t.translate(["SLOW one", "x " * 50])

    started = time.monotonic()
    with pytest.raises(TimeoutError):
        asyncio.run(run())
    assert time.monotonic() - started < 0.9


@pytest.mark.server
def test_clients_recover_when_the_server_restarts(
    install: TritonInstall, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The server stops and a new one starts on the same ports a second later: the clients
    retry through the outage and every line is translated once, in order.

    The gRPC client is halfway through its input when the server stops. The HTTP client starts
    after it stopped: Triton's shutdown waits for open HTTP keep-alive connections until its
    exit timeout and then exits without unloading the models, which leaves the Python backend's
    shared memory behind in /dev/shm."""
    ports = free_ports(3)
    first = make_server(install, tmp_path, ports)
    replacement = make_server(install, tmp_path, ports)
    lines = mixed_lines(600)
    pause_at = {"grpc": len(lines) // 2, "http": 0}
    paused = {protocol: threading.Event() for protocol in PROTOCOLS}
    resume = threading.Event()

    def source(protocol: str) -> Iterator[str]:
        # The input is read lazily: the rest is sent once the first server is gone.
        for i, line in enumerate(lines):
            if i == pause_at[protocol]:
                paused[protocol].set()
                resume.wait(30)
            yield line

    def translate(protocol: str) -> list[Translation]:
        t = Translator(address(first, protocol), protocol, batch_size=4, concurrency=2)
        # Short backoff, so that the test does not sit out a long wait after the restart.
        t.retry_policy = RetryPolicy(max_retries=40, initial_delay=0.1, max_delay=0.5)
        with t:
            return t.translate(source(protocol))

    caplog.set_level(logging.INFO, logger="nmtserve.client")
    # The servers are started from this thread: the launcher ties a server's life to the
    # thread that started it (PR_SET_PDEATHSIG), so the clients run in other threads.
    with ThreadPoolExecutor(len(PROTOCOLS)) as pool:
        try:
            first.start()
            first.wait_until_ready()
            running = {protocol: pool.submit(translate, protocol) for protocol in PROTOCOLS}
            assert all(event.wait(30) for event in paused.values())
            first.stop()
            time.sleep(1.0)
            # Started before the clients resume: the launcher forks, and a fork while gRPC calls
            # are in flight in this process can kill the child before it runs tritonserver.
            replacement.start()
            resume.set()  # what is left meets a port nobody listens on yet, then the new server
            results = {protocol: future.result(timeout=60) for protocol, future in running.items()}
            assert replacement.is_running()
        finally:
            resume.set()
            first.stop()
            replacement.stop()

    for protocol in PROTOCOLS:
        assert len(results[protocol]) == len(lines)
        assert [r.text for r in results[protocol]] == [expected(line) for line in lines]
        assert any(
            "retrying" in r.getMessage() and f"({protocol})" in r.getMessage()
            for r in caplog.records
        )
