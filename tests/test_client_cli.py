"""``nmtserve translate`` (and the progress bar, exit statuses, headers) against a real
tritonserver (the fake-translate repository, tests/client_fixtures.py)."""

from __future__ import annotations

import asyncio
import io
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from client_fixtures import (
    PROTOCOLS,
    address,
    expected,
    make_server,
    mixed_lines,
    run_cli,
)

from nmtserve import cli
from nmtserve.client import (
    AsyncTranslator,
    Hypothesis,
    InvalidInputError,
    Translation,
    TranslationError,
    Translator,
)
from nmtserve.client._retry import RetryPolicy
from nmtserve.client.cli import _progress, format_line
from nmtserve.server.launcher import (
    TritonInstall,
    TritonServer,
    free_port,
)


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
        # the plausible hypotheses only: the fake's second is a whole point under the best
        "nbest": [{"translation": "Köln aus Grüße", "score": -3.0}],
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
    # The fake's lower hypotheses are not plausible (a whole point under the best): not printed.
    assert out.split("\n")[:-1] == ["b a", "", "c"]
    hypotheses = [Hypothesis("b a", -1.0), Hypothesis("a b", -1.05), Hypothesis("a\tb", -1.06)]
    assert format_line("a b", Translation("b a", -1.0, hypotheses), as_json=False) == "b a\ta b\ta b"


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


@pytest.mark.server
def test_cli_a_line_that_is_not_utf8_is_one_rejected_line(server: TritonServer, tmp_path: Path) -> None:
    """The other lines are translated, in order; the bad one is named FILE:LINE and gets an
    empty output line (--on-error empty); exit status 2."""
    source = tmp_path / "mixed.txt"
    source.write_bytes(b"one two\nbad \xff\xfe bytes\nthree four\n")
    result = subprocess.run([sys.executable, "-m", "nmtserve.cli", "translate", "--url", server.urls.grpc_address,
                             str(source)], capture_output=True, timeout=120)
    assert result.returncode == 2
    assert result.stdout.decode() == "two one\n\nfour three\n"
    assert f"{source}:2".encode() in result.stderr
    assert b"not valid UTF-8: byte 0xFF at character 5" in result.stderr
