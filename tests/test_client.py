"""nmtserve.client: Translator, AsyncTranslator and ``nmtserve translate`` against a server.

Tests marked ``server`` run the real tritonserver on the client-test fixture
tests/fixtures/fake_translate_repository, whose model "translates" a sentence into its words in
reverse order (see its model.py); the others test the client's own logic with no server.
"""

from __future__ import annotations

import asyncio
import builtins
import io
import json
import logging
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from tritonclient.utils import InferenceServerException

from nmtserve import cli
from nmtserve.client import (
    AsyncTranslator,
    Hypothesis,
    InvalidInputError,
    ModelNotFoundError,
    ServerError,
    ServerUnavailableError,
    TimeoutError,
    Translation,
    TranslationError,
    Translator,
)
from nmtserve.client._base import normalize_url
from nmtserve.client._batching import Job, plan_window
from nmtserve.client._protocol import Options, Request, decode_response
from nmtserve.client._retry import Attempts, Deadline, RetryPolicy, map_exception
from nmtserve.client.cli import _progress
from nmtserve.server.launcher import (
    ServerConfig,
    TritonInstall,
    TritonServer,
    free_port,
    free_ports,
)

FAKE_REPOSITORY = Path(__file__).parent / "fixtures" / "fake_translate_repository"
PROTOCOLS = ["grpc", "http"]
BLANK = Translation("", 0.0)


def expected(text: str) -> str:
    """What the fake model answers: the words in reverse order."""
    return " ".join(reversed(text.split()))


def mixed_lines(count: int) -> list[str]:
    """Sentences of 1 to 40 words, with blank and whitespace-only lines among them."""
    lines = []
    for i in range(count):
        if i % 50 == 7:
            lines.append("")
        elif i % 97 == 3:
            lines.append("  \t ")
        else:
            lines.append(" ".join(f"w{i}.{j}" for j in range(1 + (i * 7919) % 40)))
    return lines


# --------------------------------------------------------------------------------------------
# Planning and assembly (no server)


def test_requests_respect_batch_size_and_token_budget() -> None:
    items = [(i, " ".join(["w"] * n)) for i, n in enumerate([1, 9, 3, 3, 8, 2, 20, 1])]

    chunks = plan_window(items, batch_size=3, max_batch_tokens=16)

    assert sorted(i for c in chunks for i in c.indices) == list(range(8))
    assert chunks[0].indices == (6,)  # 20 words: over the budget, so alone, and sent first
    for chunk in chunks:
        lengths = [len(t.split()) for t in chunk.texts]
        assert len(chunk) <= 3
        assert lengths == sorted(lengths, reverse=True)  # similar lengths together
        assert len(chunk) == 1 or len(chunk) * max(lengths) <= 16


def test_job_answers_blank_lines_itself_and_returns_everything_in_order() -> None:
    lines = mixed_lines(300)
    job = Job(lines, batch_size=8, max_batch_tokens=None, blank=BLANK)
    chunks = []
    while (chunk := job.next_chunk()) is not None:
        chunks.append(chunk)
    out: list[Translation] = []
    for chunk in reversed(chunks):  # answers arrive in any order
        job.complete(chunk, [Translation(expected(t.decode()), -1.0) for t in chunk.texts])
        out += job.pop_ready()

    assert job.finished
    assert [t.text for t in out] == [expected(line) for line in lines]
    sent = sorted(i for c in chunks for i in c.indices)
    assert sent == [i for i, line in enumerate(lines) if line.strip()]


def test_response_with_a_wrong_count_is_a_server_error() -> None:
    class Result:
        def as_numpy(self, name: str) -> np.ndarray | None:
            return np.array([b"a", b"b"], dtype=np.object_) if name == "TRANSLATION" else None

    with pytest.raises(ServerError, match=r"TRANSLATION of shape \[2\].*3 sentence"):
        decode_response(Result(), 3, Options())


@pytest.mark.parametrize(
    ("url", "protocol", "address"),
    [
        (None, "grpc", "localhost:8001"),
        (None, "http", "localhost:8000"),
        ("example.org", "http", "example.org:8000"),
        ("grpc://10.0.0.1:9001", "grpc", "10.0.0.1:9001"),
        ("http://[::1]", "http", "[::1]:8000"),
    ],
)
def test_url_gets_the_protocol_default_port(url: str | None, protocol: str, address: str) -> None:
    assert normalize_url(url, protocol) == address


@pytest.mark.parametrize(
    "options",
    [
        {"num_hypotheses": 0},
        {"beam_size": 2, "num_hypotheses": 3},
        {"max_length": -1},
        {"length_penalty": float("nan")},
    ],
)
def test_bad_options_fail_before_any_request(options: dict) -> None:
    with Translator("127.0.0.1:1") as translator:  # nothing listens there; nothing is sent
        with pytest.raises(InvalidInputError):
            translator.translate(["a"], **options)


def test_an_unknown_keyword_is_a_type_error_naming_it_in_both_shells() -> None:
    # The keywords are TranslateArgs / DocumentArgs, taken as **args: a misspelt one must still
    # fail the way a missing named parameter does, before anything is sent.
    with Translator("127.0.0.1:1") as translator:
        with pytest.raises(TypeError, match="translate\\(\\) got an unexpected keyword argument 'beam'"):
            translator.translate(["a"], beam=4)  # type: ignore[call-arg]
        with pytest.raises(TypeError, match="'num_hypotheses'"):
            translator.translate_document("a", num_hypotheses=2)  # type: ignore[call-arg]

    async def run() -> None:
        async with AsyncTranslator("127.0.0.1:1") as translator:
            with pytest.raises(TypeError, match="'on_errors'"):
                await translator.translate("a", on_errors="return")  # type: ignore[call-arg]
            with pytest.raises(TypeError, match="'on_error'"):
                await translator.translate_document("a", on_error="return")  # type: ignore[call-arg]

    asyncio.run(run())


# --------------------------------------------------------------------------------------------
# Error mapping and retries (no server)


@pytest.mark.parametrize(
    ("status", "message", "error"),
    [
        ("StatusCode.INVALID_ARGUMENT", "TEXT[1] is empty", InvalidInputError),
        ("400", "TEXT[1] is empty", InvalidInputError),
        ("StatusCode.NOT_FOUND", "Request for unknown model: 'x' is not found", ModelNotFoundError),
        ("400", "Request for unknown model: 'x' is not found", ModelNotFoundError),
        ("StatusCode.UNAVAILABLE", "failed to connect to all addresses", ServerUnavailableError),
        ("503", "Service Unavailable", ServerUnavailableError),
        ("502", "Bad Gateway", ServerUnavailableError),
        (
            "StatusCode.UNAVAILABLE",
            "Request for unknown model: 'x' has no available versions",
            ServerUnavailableError,
        ),
        ("StatusCode.DEADLINE_EXCEEDED", "Deadline Exceeded", TimeoutError),
        ("StatusCode.INTERNAL", "stub crashed", ServerError),
        ("500", "stub crashed", ServerError),
        (None, "[StatusCode.DEADLINE_EXCEEDED] Deadline Exceeded", TimeoutError),
    ],
)
def test_triton_status_maps_to_an_error_class(
    status: str | None, message: str, error: type[TranslationError]
) -> None:
    mapped = map_exception(InferenceServerException(message, status), endpoint="h:1 (grpc)")

    assert type(mapped) is error
    assert mapped.retryable is (error is ServerUnavailableError)


@pytest.mark.parametrize(
    ("exc", "error"),
    [
        (ConnectionRefusedError(111, "Connection refused"), ServerUnavailableError),
        (ConnectionResetError(104, "Connection reset by peer"), ServerUnavailableError),
        (asyncio.TimeoutError(), TimeoutError),
        (ValueError("odd"), TranslationError),
    ],
)
def test_network_failures_map_to_an_error_class(
    exc: Exception, error: type[TranslationError]
) -> None:
    assert type(map_exception(exc, endpoint="h:1 (http)")) is error


def test_server_message_naming_a_sentence_gives_its_input_position() -> None:
    job = Job(["a", "", "b c", "INVALID d"], batch_size=8, max_batch_tokens=None, blank=BLANK)
    chunk = job.next_chunk()
    assert chunk is not None
    position = chunk.indices.index(3)
    exc = InferenceServerException(f"TEXT[{position}] is bad", "StatusCode.INVALID_ARGUMENT")

    error = map_exception(exc, endpoint="h:1 (grpc)", chunk=chunk)

    assert error.message == f"TEXT[{position}] is bad"
    assert (error.index, error.indices) == (3, (0, 2, 3))
    assert str(error).startswith("input 3: ")


def test_error_classes_are_also_the_builtin_ones() -> None:
    assert issubclass(TimeoutError, TranslationError)
    assert issubclass(TimeoutError, builtins.TimeoutError)
    assert issubclass(InvalidInputError, ValueError)


def test_backoff_grows_with_jitter_and_stops_at_the_maximum() -> None:
    policy = RetryPolicy(max_retries=10, initial_delay=0.5, max_delay=8.0, jitter=0.25)
    for retry, base in [(1, 0.5), (2, 1.0), (3, 2.0), (5, 8.0), (9, 8.0)]:
        delays = [policy.delay(retry) for _ in range(50)]
        assert all(0.75 * base <= d <= base for d in delays)
        assert len(set(delays)) > 1


def test_invalid_input_is_never_retried() -> None:
    attempts = Attempts(RetryPolicy(max_retries=5), Deadline(None), 1.0, endpoint="h:1 (grpc)")
    attempts.timeout()
    with pytest.raises(InvalidInputError) as raised:
        attempts.failed(InferenceServerException("TEXT[0] is empty", "StatusCode.INVALID_ARGUMENT"))
    assert raised.value.attempts == 1


def test_unavailable_is_retried_until_the_retries_are_used_up() -> None:
    attempts = Attempts(RetryPolicy(max_retries=2), Deadline(None), 1.0, endpoint="h:1 (grpc)")
    refused = ConnectionRefusedError(111, "Connection refused")
    attempts.timeout()
    assert attempts.failed(refused) > 0
    attempts.timeout()
    assert attempts.failed(refused) > 0
    attempts.timeout()
    with pytest.raises(ServerUnavailableError, match="Connection refused") as raised:
        attempts.failed(refused)
    assert raised.value.attempts == 3


def test_no_retry_is_started_that_the_deadline_would_cut() -> None:
    attempts = Attempts(
        RetryPolicy(max_retries=5, initial_delay=1.0), Deadline(0.5), None, endpoint="h:1 (grpc)"
    )
    assert attempts.timeout() <= 0.5  # the request's limit is what is left of the deadline
    with pytest.raises(ServerUnavailableError):
        attempts.failed(ConnectionRefusedError(111, "Connection refused"))


class FlakyTransport:
    """A transport that fails each request's first `failures` attempts, then answers."""

    connection_errors = ()
    per_request_timeout = True

    def __init__(self, failures: int, error: Exception) -> None:
        self.failures, self.error = failures, error
        self.calls: dict[tuple[bytes, ...], int] = {}
        self.lock = threading.Lock()

    def infer(self, model: str, request: Request, timeout: float | None) -> object:
        texts = tuple(request.inputs[0][1])
        with self.lock:
            self.calls[texts] = self.calls.get(texts, 0) + 1
            fail = self.calls[texts] <= self.failures
        if fail:
            raise self.error

        class Result:
            def as_numpy(self, name: str) -> np.ndarray:
                if name == "TRANSLATION":
                    return np.array([expected(t.decode()).encode() for t in texts], np.object_)
                return np.zeros(len(texts), np.float32)

        return Result()

    def close(self) -> None:
        pass


def test_transient_failures_are_retried_and_each_sentence_answered_once() -> None:
    translator = Translator("h:1", batch_size=4, concurrency=3)
    transport = FlakyTransport(2, InferenceServerException("down", "StatusCode.UNAVAILABLE"))
    translator._transport = transport  # type: ignore[assignment]
    translator.retry_policy = RetryPolicy(max_retries=2, initial_delay=0.001)
    lines = mixed_lines(60)

    with translator:
        results = translator.translate(lines)

    assert [r.text for r in results] == [expected(line) for line in lines]
    assert set(transport.calls.values()) == {3}  # every request: 2 failures, 1 success


def test_a_rejected_request_fails_the_call_without_retrying() -> None:
    translator = Translator("h:1", batch_size=4, concurrency=2)
    transport = FlakyTransport(1, InferenceServerException("TEXT[0] bad", "400"))
    translator._transport = transport  # type: ignore[assignment]

    with translator, pytest.raises(InvalidInputError, match=r"TEXT\[0\] bad"):
        translator.translate(mixed_lines(40))
    assert set(transport.calls.values()) == {1}


# --------------------------------------------------------------------------------------------
# Against a real tritonserver


def make_server(install: TritonInstall, tmp: Path, ports: list[int] | None = None) -> TritonServer:
    http, grpc, metrics = ports or free_ports(3)
    config = ServerConfig(
        model_repository=FAKE_REPOSITORY,
        http_port=http,
        grpc_port=grpc,
        metrics_port=metrics,
        cache_dir=tmp / "cache",
        log_file=tmp / f"tritonserver-{time.monotonic_ns()}.log",
        startup_timeout_s=60,
    )
    return TritonServer(config, install)


@pytest.fixture(scope="module")
def server(
    install: TritonInstall, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TritonServer]:
    with make_server(install, tmp_path_factory.mktemp("fake-translate")) as running:
        yield running


def address(server: TritonServer, protocol: str) -> str:
    return server.urls.grpc_address if protocol == "grpc" else server.urls.http_address


@pytest.fixture(params=PROTOCOLS)
def translator(request: pytest.FixtureRequest, server: TritonServer) -> Iterator[Translator]:
    with Translator(address(server, request.param), request.param) as t:
        yield t


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
    results = translator.translate(["a b c", "", "d"], num_hypotheses=3)

    assert results[0].hypotheses == [
        Hypothesis("c b a", -3.0),
        Hypothesis("c b a (1)", -4.0),
        Hypothesis("c b a (2)", -5.0),
    ]
    assert results[0].text == "c b a"
    assert results[1] == Translation("", 0.0, [])
    assert [len(r.hypotheses or []) for r in results] == [3, 0, 3]


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


# --------------------------------------------------------------------------------------------
# The CLI


def run_cli(argv: list[str], stdin: str, monkeypatch: pytest.MonkeyPatch) -> tuple[int, str, str]:
    """nmtserve's main() in this process, with stdin given; returns (code, stdout, stderr)."""
    stdout, stderr = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin.encode())))
    monkeypatch.setattr(sys, "stdout", stdout)
    monkeypatch.setattr(sys, "stderr", stderr)
    code = cli.main(argv)
    return code, stdout.getvalue(), stderr.getvalue()


@pytest.mark.server
def test_cli_translates_stdin_line_by_line(server: TritonServer) -> None:
    lines = mixed_lines(500)
    completed = subprocess.run(
        [sys.executable, "-m", "nmtserve.cli", "translate", "--url", server.urls.grpc_address],
        input="\n".join(lines) + "\n",
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=60,
    )

    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.split("\n")[:-1] == [expected(line) for line in lines]
    assert completed.stderr == ""  # no progress bar when stderr is not a terminal


@pytest.mark.server
def test_cli_json_lines_have_scores_and_nbest(
    server: TritonServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    argv = ["translate", "--url", server.urls.http_address, "--protocol", "http"]
    code, out, err = run_cli(
        [*argv, "--json", "--nbest", "2"], "Grüße aus Köln\n\nb a\n", monkeypatch
    )

    assert (code, err) == (0, "")
    records = [json.loads(line) for line in out.splitlines()]
    assert records[0] == {
        "source": "Grüße aus Köln",
        "translation": "Köln aus Grüße",
        "score": -3.0,
        "nbest": [
            {"translation": "Köln aus Grüße", "score": -3.0},
            {"translation": "Köln aus Grüße (1)", "score": -4.0},
        ],
    }
    assert records[1] == {"source": "", "translation": "", "score": 0.0, "nbest": []}
    assert records[2]["translation"] == "a b"


@pytest.mark.server
def test_cli_invalid_input_exits_2_naming_the_line(
    server: TritonServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out, err = run_cli(
        ["translate", "--url", server.urls.grpc_address, "--on-error", "fail"],
        "ok\n\nnot INVALID ok\nlast\n",
        monkeypatch,
    )

    assert code == 2
    assert out == "ok\n\n"  # every line before the rejected one
    assert err.count("\n") == 1
    assert err.startswith("nmtserve translate: error: <stdin>:3: the line contains the word INVALID")


def _bad_lines_input() -> tuple[list[str], set[int]]:
    """200 lines, 7 of them rejected by the fake model, two of those in one request."""
    lines = mixed_lines(200)
    bad = {0, 5, 6, 64, 120, 121, 199}
    for i in bad:
        lines[i] = f"bad {i} INVALID"
    return lines, bad


@pytest.mark.server
@pytest.mark.parametrize("on_error", ["empty", "skip"])
def test_cli_rejected_lines_are_reported_and_every_other_line_is_written_in_order(
    server: TritonServer, monkeypatch: pytest.MonkeyPatch, on_error: str
) -> None:
    lines, bad = _bad_lines_input()
    argv = ["translate", "--url", server.urls.grpc_address, "--batch-size", "8"]
    code, out, err = run_cli([*argv, "--on-error", on_error], "\n".join(lines) + "\n", monkeypatch)

    assert code == 2
    want = [
        "" if i in bad else expected(line)
        for i, line in enumerate(lines)
        if not (on_error == "skip" and i in bad)
    ]
    assert out.split("\n")[:-1] == want
    reported = err.splitlines()
    assert reported[:-1] == [
        f"nmtserve translate: error: <stdin>:{i + 1}: the line contains the word INVALID (the test model rejects it)"
        for i in sorted(bad)
    ]
    assert reported[-1] == "nmtserve translate: error: 7 of 200 lines rejected (see above)"


@pytest.mark.server
def test_cli_json_records_a_rejected_line_with_its_error(
    server: TritonServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out, _ = run_cli(
        ["translate", "--url", server.urls.grpc_address, "--json"], "a b\nx INVALID\n", monkeypatch
    )

    assert code == 2
    records = [json.loads(line) for line in out.splitlines()]
    assert records[0]["translation"] == "b a"
    assert records[1]["translation"] == "" and records[1]["score"] is None
    assert "contains the word INVALID" in records[1]["error"]


@pytest.mark.server
def test_cli_nbest_in_plain_output_is_tab_separated(
    server: TritonServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out, err = run_cli(
        ["translate", "--url", server.urls.grpc_address, "--nbest", "3"], "a b\n\nc\n", monkeypatch
    )

    assert (code, err) == (0, "")
    assert out.split("\n")[:-1] == ["b a\tb a (1)\tb a (2)", "", "c\tc (1)\tc (2)"]


@pytest.mark.server
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_library_on_error_return_marks_each_rejected_sentence(
    server: TritonServer, protocol: str
) -> None:
    lines, bad = _bad_lines_input()
    with Translator(address(server, protocol), protocol, batch_size=8, concurrency=3) as tr:
        results = tr.translate(lines, on_error="return")
    assert len(results) == len(lines)
    for i, (line, r) in enumerate(zip(lines, results, strict=True)):
        if i in bad:
            assert not r.ok and r.text == "" and r.score is None
            assert isinstance(r.error, InvalidInputError) and r.error.index == i
        else:
            assert r.ok and r.text == expected(line)

    async def run() -> list[Translation]:
        async with AsyncTranslator(address(server, protocol), protocol, batch_size=8) as tr:
            return await tr.translate(lines, on_error="return")

    def summary(rs: list[Translation]) -> list[tuple]:
        return [(r.text, r.score, r.error and (r.error.index, r.error.message)) for r in rs]

    assert summary(asyncio.run(run())) == summary(results)


def test_a_rejection_naming_no_sentence_is_halved_until_the_culprit_is_alone() -> None:
    from nmtserve.client._batching import Chunk, isolate_rejected

    chunk = Chunk((10, 11, 12, 13), (b"a", b"b", b"c", b"d"))
    failed = Translation("", None)

    def send(part: Chunk) -> list[Translation]:  # the server rejects any request holding 12
        try:
            if 12 in part.indices:
                raise InvalidInputError("request too large", index=None)
            return [Translation(t.decode(), -1.0) for t in part.texts]
        except InvalidInputError as exc:
            parts, merge = isolate_rejected(part, exc, failed)
            return merge([send(p) for p in parts])

    results = send(chunk)
    assert [r.text for r in results] == ["a", "b", "", "d"]
    assert results[2].error is not None and results[2].error.index == 12
    assert all(r.ok for i, r in enumerate(results) if i != 2)


def test_cli_exits_3_when_nothing_listens(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(RetryPolicy, "delay", lambda self, retry: 0.01)

    port = free_port()
    code, out, err = run_cli(["translate", "--url", f"127.0.0.1:{port}"], "hello\n", monkeypatch)

    assert (code, out) == (3, "")
    assert err.count("\n") == 1
    assert f"127.0.0.1:{port}" in err and "Connection refused" in err
    assert "gave up after 4 attempts" in err


def test_cli_bad_option_exits_2(monkeypatch: pytest.MonkeyPatch) -> None:
    code, _, err = run_cli(["translate", "--beam-size", "2", "--nbest", "3"], "x\n", monkeypatch)

    assert code == 2
    assert "--nbest (3) cannot exceed --beam-size (2)" in err


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(
    ("lines", "stream", "no_progress", "shown"),
    [
        (5000, Terminal, False, True),
        (5000, Terminal, True, False),  # --no-progress
        (20, Terminal, False, False),  # short input
        (5000, io.StringIO, False, False),  # stderr is a pipe or a file...
        (50_000, io.StringIO, False, True),  # ...unless the input is large
    ],
)
def test_cli_progress_bar_only_for_long_inputs(
    lines: int, stream: type[io.StringIO], no_progress: bool, shown: bool
) -> None:
    bar = _progress(lines, stream(), no_progress)
    assert (bar is not None) is shown
    if bar is not None:
        bar.close()


@pytest.mark.server
def test_cli_on_a_terminal_translates_each_line_as_typed(
    server: TritonServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Keyboard(io.TextIOWrapper):
        def isatty(self) -> bool:
            return True

    stdout, stderr = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stdin", Keyboard(io.BytesIO(b"a b\nan INVALID one\n\nc d\n")))
    monkeypatch.setattr(sys, "stdout", stdout)
    monkeypatch.setattr(sys, "stderr", stderr)

    code = cli.main(["translate", "--url", server.urls.grpc_address])

    assert code == 2  # a rejected line is reported, and the session goes on
    assert stdout.getvalue() == "b a\n\nd c\n"
    assert stderr.getvalue().count("\n") == 1 and "INVALID" in stderr.getvalue()


@pytest.mark.server
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_the_other_protocols_port_is_named_not_called_unavailable(
    server: TritonServer, protocol: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from nmtserve.client import ProtocolMismatchError

    wrong = server.urls.http_address if protocol == "grpc" else server.urls.grpc_address
    other = "http" if protocol == "grpc" else "grpc"
    with Translator(wrong, protocol, timeout=10) as tr:
        with pytest.raises(ProtocolMismatchError, match=rf"answers {other.upper()}, not {protocol.upper()}") as raised:
            tr.translate("a b")
    assert raised.value.attempts == 1  # not retried: another attempt would meet the same port
    code, _, err = run_cli(["translate", "--url", wrong, "--protocol", protocol], "a b\n", monkeypatch)
    assert code == 3
    assert f"--protocol {other}" in err and "is the server running" not in err


@pytest.mark.server
def test_headers_reach_the_server_from_the_library_and_the_cli(
    install: TritonInstall, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server that answers inference and health only with an `api-key: s3cret` header (Triton's
    restricted protocols, as a gateway's auth would; over gRPC Triton reads it as the metadata
    `triton-grpc-protocol-api-key`): the client's headers get every call through."""
    key = {"grpc": {"triton-grpc-protocol-api-key": "s3cret"}, "http": {"api-key": "s3cret"}}
    server = make_server(install, tmp_path)
    restricted = "inference,health,metadata:api-key=s3cret"
    server.config.extra_args = (f"--grpc-restricted-protocol={restricted}", f"--http-restricted-api={restricted}")
    server.start()
    try:
        deadline = time.monotonic() + 60
        with Translator(server.urls.grpc_address, headers=key["grpc"]) as tr:
            while not tr.is_ready() and time.monotonic() < deadline:
                time.sleep(0.2)
            assert tr.translate("a b c").text == "c b a"
        for protocol in PROTOCOLS:
            with Translator(address(server, protocol), protocol, max_retries=0) as tr:
                with pytest.raises(TranslationError):
                    tr.translate("a b")
            with Translator(address(server, protocol), protocol, headers=key[protocol]) as tr:
                assert tr.translate(["a b", "c d"]) == [Translation("b a", -2.0), Translation("d c", -2.0)]

            async def run(protocol: str = protocol) -> str:
                async with AsyncTranslator(address(server, protocol), protocol, headers=key[protocol]) as tr:
                    return (await tr.translate("x y")).text

            assert asyncio.run(run()) == "y x"
        code, out, _ = run_cli(["translate", "--url", server.urls.http_address, "--protocol", "http",
                                "--header", "api-key=s3cret"],
                               "one two\n", monkeypatch)
        assert (code, out) == (0, "two one\n")
    finally:
        server.stop()
