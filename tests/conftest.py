"""Shared fixtures: the shipped demo checkpoint, its export, and a real tritonserver on it."""

from __future__ import annotations

import os
from pathlib import Path

# Reference decodes run beside a tritonserver on 2 cores: OpenMP workers that spin while waiting
# made PyTorch ~10x slower under that load (bench/RESULTS.md). Must precede the torch import.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import pytest

from nmtserve.server import leftovers

ROOT = Path(__file__).resolve().parents[1]
# What servers had left on the machine before this session (issue 27: the session must add nothing).
_LEFTOVERS_BEFORE = set(leftovers.present())
_PYTHON_ENVS_BEFORE = leftovers.python_envs()  # the Python backend's /tmp/python_env_* (no owner in the name)


_LEFT: dict = {}  # what pytest_sessionfinish found, printed in the terminal summary


def pytest_sessionfinish(session, exitstatus):
    """Count what the session's servers left behind (shared memory, temporary logs, drain flags,
    the Python backend's environment folders): a stopped server must leave nothing, and one that
    failed keeps only its log for the report."""
    left = {path: owner for path, owner in leftovers.present().items()
            if path not in _LEFTOVERS_BEFORE and (owner == os.getpid() or not leftovers.is_alive(owner))}
    # The Python backend's folders carry no owner: counted when no other launcher runs on the
    # machine (CI), since another's server may have made one meanwhile.
    others = {owner for owner in leftovers.present().values() if owner != os.getpid() and leftovers.is_alive(owner)}
    if not others:
        left.update({path: 0 for path in leftovers.python_envs() - _PYTHON_ENVS_BEFORE})
    _LEFT.clear()
    _LEFT.update(left)
    if any(not p.name.endswith(".log") for p in left):  # shared memory, a drain flag, a folder: never
        session.exitstatus = 1


def pytest_terminal_summary(terminalreporter):
    """The count on a line of its own (the session-finish hooks run before the progress line ends)."""
    terminalreporter.write_line(f"server leftovers of this session: {len(_LEFT)}"
                                + "".join(f"\n  {p}" for p in sorted(_LEFT)[:20]))


DEMO = ROOT / "models" / "en-fr-numbers"


@pytest.fixture(scope="session")
def install():
    """The tritonserver of the nvidia-pytriton wheel (the tests that need it skip without it,
    except under CI, where they fail)."""
    from nmtserve.server.install import TritonNotInstalledError, find_tritonserver

    try:
        return find_tritonserver()
    except TritonNotInstalledError as exc:
        if os.environ.get("CI"):  # a broken install must not pass CI green
            pytest.fail(f"CI is set and tritonserver is missing: {exc}")
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def one_torch_thread():
    """Tiny models: a second intra-op thread only adds synchronisation (3x slower here)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def demo_checkpoint():
    from nmtserve.model.checkpoint import load_checkpoint

    if not (DEMO / "model.safetensors").is_file():
        pytest.fail(f"the demo checkpoint is missing: {DEMO} (train it with `nmtserve train`)")
    return load_checkpoint(DEMO)


@pytest.fixture(scope="session")
def demo_sentences() -> list[str]:
    return (DEMO / "test.en").read_text(encoding="utf-8").splitlines()


@pytest.fixture(scope="session")
def demo_repository(tmp_path_factory) -> Path:
    """The demo exported through the CLI (parity checked on 50 held-out sentences)."""
    from nmtserve.cli import main

    repo = tmp_path_factory.mktemp("repo") / "model_repository"
    code = main(["export", str(DEMO), "--repository", str(repo), "--graph-models", "--max-target-len", "128",
                 "--max-source-len", "128", "--max-batch", "32"])
    assert code == 0, "nmtserve export failed"
    return repo


@pytest.fixture(scope="session")
def demo_int8_repository(tmp_path_factory) -> Path:
    """The demo exported in int8 through the CLI (quality gate on 200 held-out sentences)."""
    from nmtserve.cli import main

    repo = tmp_path_factory.mktemp("int8") / "model_repository"
    code = main(["export", str(DEMO), "--repository", str(repo), "--precision", "int8", "--parity-sentences", "10",
                 "--gate-sentences", "200", "--max-source-len", "128", "--max-target-len", "128", "--max-batch", "32"])
    assert code == 0, "int8 export failed"
    return repo


@pytest.fixture(scope="session")
def demo_server(demo_repository):
    from nmtserve.server.launcher import ServerConfig, TritonServer

    running = TritonServer(ServerConfig.on_free_ports(demo_repository))
    running.start()
    try:
        running.wait_until_ready(120)
        yield running
    finally:
        running.stop()


# The client tests' fake-translate server (tests/client_fixtures.py), for the modules that ask for it.
from client_fixtures import server, translator  # noqa: E402, F401
