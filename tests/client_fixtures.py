"""The client tests' shared parts: the fake-translate repository on a real tritonserver (its
model "translates" a sentence into its words in reverse order, see its model.py), fixtures for
it, and helpers (loaded for every test module by tests/conftest.py)."""

from __future__ import annotations

import io
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nmtserve import cli
from nmtserve.client import (
    Translation,
    Translator,
)
from nmtserve.server.launcher import (
    ServerConfig,
    TritonInstall,
    TritonServer,
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


def run_cli(argv: list[str], stdin: str, monkeypatch: pytest.MonkeyPatch) -> tuple[int, str, str]:
    """nmtserve's main() in this process, with stdin given; returns (code, stdout, stderr)."""
    stdout, stderr = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin.encode())))
    monkeypatch.setattr(sys, "stdout", stdout)
    monkeypatch.setattr(sys, "stderr", stderr)
    code = cli.main(argv)
    return code, stdout.getvalue(), stderr.getvalue()
