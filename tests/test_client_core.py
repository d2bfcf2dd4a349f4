"""nmtserve.client's own logic, with no server: batching, options, errors, retries, failover of
a flaky transport."""

from __future__ import annotations

import asyncio
import builtins
import threading

import numpy as np
import pytest
from client_fixtures import BLANK, expected, mixed_lines
from tritonclient.utils import InferenceServerException

from nmtserve.client import (
    AsyncTranslator,
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
    exc = InferenceServerException(f"in ensemble 'translate', TEXT[{position}] is bad", "StatusCode.INVALID_ARGUMENT")

    error = map_exception(exc, endpoint="h:1 (grpc)", chunk=chunk)

    assert error.message == f"in ensemble 'translate', TEXT[{position}] is bad"
    assert (error.index, error.indices) == (3, (0, 2, 3))
    assert str(error) == "input 3: the sentence is bad"  # one index, the caller's


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
                return np.zeros(len(texts), np.float32) if name == "SCORE" else None  # a server without WARNING

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

    with translator, pytest.raises(InvalidInputError, match=r"^input 1: the sentence bad$"):
        translator.translate(mixed_lines(40))
    assert set(transport.calls.values()) == {1}


@pytest.mark.parametrize("message, index, theirs", [
    ("TEXT[3] is empty or whitespace only", 3, True),
    ("TARGET_PREFIX[0] is too long: 300 tokens", None, True),
    ("TARGET_LANG[1]: unknown language 'tlh'", None, True),
    ("the line contains the word INVALID", None, True),
    ("BEAM_SIZE must be between 1 and 8, got 99", None, False),
    ("TARGET_LANG is required: this multilingual model translates into 202 languages", None, False),
    ("SOURCE_LANG: unknown language 'xx'", None, False),
])
def test_a_rejection_is_a_sentences_unless_it_names_a_request_wide_input(message, index, theirs) -> None:
    from nmtserve.client._batching import sentence_fault

    assert sentence_fault(InvalidInputError(message, index=index)) is theirs


def test_a_sentence_request_names_the_outputs_it_reads_and_a_document_request_does_not():
    """The ``outputs`` parameter (the server computes those alone): the outputs asked for,
    WARNING included once the transport adds it, over gRPC and HTTP; none for documents."""
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    from nmtserve.client import _transports
    from nmtserve.client._protocol import encode_document_request, encode_request

    transport = _transports._Transport("localhost:1", None, 1)
    plain = transport._shaped(encode_request([b"x"], Options()))
    rich = transport._shaped(encode_request([b"x"], Options(alignment=True, confidence=True, num_hypotheses=2)))
    document = encode_document_request("x", "plain", Options())
    for module, args in ((grpcclient, _transports._grpc_infer_args), (httpclient, _transports._http_infer_args)):
        assert args(module, plain, None, None)["parameters"] == {"outputs": "TRANSLATION,SCORE,WARNING"}
        named = args(module, rich, None, None)["parameters"]["outputs"].split(",")
        assert named == [o.name() for o in args(module, rich, None, None)["outputs"]]
        assert set(named) == {"TRANSLATION", "SCORE", "ALIGNMENT", "SENTENCE_CONFIDENCE", "WORD_CONFIDENCE",
                              "MISSING_WORDS", "NBEST_TRANSLATION", "NBEST_SCORE", "WARNING"}
        assert args(module, document, None, None)["parameters"] is None
