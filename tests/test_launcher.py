"""The embedded launcher starts the real tritonserver from the nvidia-pytriton wheel.

Tests marked ``server`` start it (about a second each on two cores, plus ~3 s to stop); the
others check what the launcher refuses before starting anything.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from nmtserve.server import install as install_module
from nmtserve.server import launcher
from nmtserve.server.launcher import (
    PortInUseError,
    ServerConfig,
    ServerError,
    ServerStartError,
    TritonInstall,
    TritonNotInstalledError,
    TritonServer,
    find_tritonserver,
    free_ports,
    prepare_backend_directory,
)

ECHO_REPOSITORY = Path(__file__).parent / "fixtures" / "echo_repository"
TEXTS = ["Guten Morgen.", "Grüße aus Köln – ✓", ""]


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cache")


def make_config(repository: Path, cache_dir: Path, log_dir: Path) -> ServerConfig:
    http, grpc, metrics = free_ports(3)
    return ServerConfig(
        model_repository=repository,
        http_port=http,
        grpc_port=grpc,
        metrics_port=metrics,
        cache_dir=cache_dir,
        log_file=log_dir / "tritonserver.log",
        startup_timeout_s=60,
    )


@pytest.fixture(scope="module")
def echo_server(
    install: TritonInstall, cache_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TritonServer]:
    config = make_config(ECHO_REPOSITORY, cache_dir, tmp_path_factory.mktemp("echo-log"))
    with TritonServer(config, install) as server:
        yield server


def text_array(texts: list[str]) -> np.ndarray:
    return np.array([t.encode("utf-8") for t in texts], dtype=np.object_)


# -- a running server


@pytest.mark.server
def test_server_reports_ready_over_http(echo_server: TritonServer) -> None:
    with urllib.request.urlopen(f"{echo_server.urls.http}/v2/health/ready", timeout=5) as response:
        assert response.status == 200


@pytest.mark.server
@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_infer_returns_the_text(echo_server: TritonServer, protocol: str) -> None:
    module = pytest.importorskip(f"tritonclient.{protocol}")
    address = echo_server.urls.grpc_address if protocol == "grpc" else echo_server.urls.http_address
    client = module.InferenceServerClient(url=address)
    text = module.InferInput("TEXT", [len(TEXTS)], "BYTES")
    text.set_data_from_numpy(text_array(TEXTS))

    result = client.infer("echo", [text])

    assert [b.decode("utf-8") for b in result.as_numpy("TEXT")] == TEXTS


@pytest.mark.server
def test_metrics_are_served(echo_server: TritonServer) -> None:
    with urllib.request.urlopen(echo_server.urls.metrics, timeout=5) as response:
        assert b"nv_inference_request_success" in response.read()


def test_server_environment_puts_this_python_first(install: TritonInstall) -> None:
    env = launcher._server_env(install, {})

    assert env["PATH"].split(os.pathsep)[0] == str(Path(sys.exec_prefix) / "bin")
    assert str(install.library_dirs[0]) in env["LD_LIBRARY_PATH"].split(os.pathsep)


# -- refused before starting


def test_taken_port_is_reported_without_starting(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = make_config(ECHO_REPOSITORY, tmp_path / "cache", tmp_path)
        config.grpc_port = port
        server = TritonServer(config)

        with pytest.raises(
            PortInUseError, match=f"port {port} \\(grpc\\) on 127.0.0.1 is already in use"
        ):
            server.start()

    assert server.pid is None


def test_missing_repository_is_reported(tmp_path: Path) -> None:
    server = TritonServer(make_config(tmp_path / "nowhere", tmp_path / "cache", tmp_path))

    with pytest.raises(ServerError, match="does not exist"):
        server.start()
    assert server.pid is None


def test_repository_without_a_model_config_is_reported(tmp_path: Path) -> None:
    repository = tmp_path / "repository"
    (repository / "echo" / "1").mkdir(parents=True)

    with pytest.raises(ServerError, match=r"has no model.*config\.pbtxt.*echo"):
        TritonServer(make_config(repository, tmp_path / "cache", tmp_path)).start()


def test_ports_must_differ(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="must differ"):
        ServerConfig(model_repository=tmp_path, http_port=9000, grpc_port=9000)


def test_missing_wheel_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(install_module, "_pytriton_package_dir", lambda: None)

    with pytest.raises(
        TritonNotInstalledError, match=r"nvidia-pytriton.*pip install 'nmtserve\[server\]'"
    ):
        find_tritonserver()


def test_launcher_does_not_import_torch() -> None:
    code = "import sys, nmtserve.server.launcher; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 0


# -- the backend directory


def test_backend_directory_is_prepared_once_outside_site_packages(
    install: TritonInstall, tmp_path: Path
) -> None:
    backends = prepare_backend_directory(install, tmp_path)
    stub = backends / "python" / "triton_python_backend_stub"
    first = {p.name: p.stat().st_mtime_ns for p in (backends / "python").iterdir()}

    again = prepare_backend_directory(install, tmp_path)

    assert again == backends
    assert backends.is_relative_to(tmp_path)
    assert {p.name: p.stat().st_mtime_ns for p in (backends / "python").iterdir()} == first
    assert sorted(first) == [
        "libtriton_python.so",
        "triton_python_backend_stub",
        "triton_python_backend_utils.py",
    ]
    assert os.access(stub, os.X_OK)
    assert stub.read_bytes() == install.stub.read_bytes()


def test_backend_directory_repairs_a_damaged_copy(install: TritonInstall, tmp_path: Path) -> None:
    backends = prepare_backend_directory(install, tmp_path)
    stub = backends / "python" / "triton_python_backend_stub"
    stub.write_bytes(b"truncated")

    prepare_backend_directory(install, tmp_path)

    assert stub.read_bytes() == install.stub.read_bytes()


def test_a_full_installs_backends_are_linked_beside_nmtserves(tmp_path: Path, monkeypatch) -> None:
    """The NGC image's /opt/tritonserver/backends holds every backend but nmtserve's: the launcher
    serves a directory of links to each of them beside nmtserve's, made again idempotently; with
    no nmtserve backend (or one already there) the install's own directory, as it is."""
    import dataclasses

    root = tmp_path / "opt-tritonserver"
    for name in ("python", "tensorrt"):
        (root / "backends" / name).mkdir(parents=True)
        (root / "backends" / name / f"libtriton_{name}.so").write_bytes(name.encode())
    library = tmp_path / "built" / "libtriton_nmtserve.so"
    library.parent.mkdir()
    library.write_bytes(b"ours")
    system = dataclasses.replace(find_tritonserver(), root=root, system=True)
    monkeypatch.setattr(install_module, "nmtserve_backend_library", lambda pythonpath="": library)

    backends = prepare_backend_directory(system, tmp_path / "cache")
    assert backends.is_relative_to(tmp_path / "cache") and backends != root / "backends"
    assert sorted(p.name for p in backends.iterdir()) == ["nmtserve", "python", "tensorrt"]
    assert (backends / "tensorrt").readlink() == root / "backends" / "tensorrt"
    assert (backends / "python" / "libtriton_python.so").read_bytes() == b"python"
    assert (backends / "nmtserve" / "libtriton_nmtserve.so").read_bytes() == b"ours"
    assert prepare_backend_directory(system, tmp_path / "cache") == backends  # again: the same links
    assert sorted(p.name for p in backends.iterdir()) == ["nmtserve", "python", "tensorrt"]

    monkeypatch.setattr(install_module, "nmtserve_backend_library", lambda pythonpath="": None)
    assert prepare_backend_directory(system, tmp_path / "cache") == root / "backends"


def test_the_backend_library_follows_the_servers_pythonpath(tmp_path: Path, monkeypatch) -> None:
    """A server whose PYTHONPATH puts another nmtserve_native build first imports that build in its
    embedded interpreter: the launcher serves the backend library beside it (bench/served_ab.py's
    sides), none where that build has none, and the installed one where PYTHONPATH has no build."""
    from nmtserve.decoding import native

    build = tmp_path / "build"
    (build / "nmtserve_triton_backend").mkdir(parents=True)
    (build / "nmtserve_native.cpython-311-x86_64-linux-gnu.so").write_bytes(b"module")
    library = build / "nmtserve_triton_backend" / native.TRITON_BACKEND_LIBRARY
    library.write_bytes(b"backend of the build")
    elsewhere = tmp_path / "other-tree"
    elsewhere.mkdir()
    pythonpath = os.pathsep.join([str(elsewhere), str(build)])
    assert native.triton_backend_library(pythonpath) == library
    library.unlink()
    assert native.triton_backend_library(pythonpath) is None  # that build has no backend
    assert native.triton_backend_library(str(elsewhere)) == native.triton_backend_library()

    library.write_bytes(b"backend of the build")
    backends = prepare_backend_directory(find_tritonserver(), tmp_path / "cache", pythonpath)
    assert (backends / "nmtserve" / native.TRITON_BACKEND_LIBRARY).read_bytes() == b"backend of the build"


# -- failures and shutdown


@pytest.mark.server
def test_model_failing_to_initialize_is_named(
    install: TritonInstall, cache_dir: Path, tmp_path: Path
) -> None:
    repository = tmp_path / "repository"
    (repository / "broken" / "1").mkdir(parents=True)
    (repository / "broken" / "config.pbtxt").write_text(
        (ECHO_REPOSITORY / "echo" / "config.pbtxt")
        .read_text()
        .replace('name: "echo"', 'name: "broken"')
    )
    (repository / "broken" / "1" / "model.py").write_text(
        textwrap.dedent(
            """
            class TritonPythonModel:
                def initialize(self, args):
                    raise RuntimeError("broken on purpose")
            """
        )
    )
    server = TritonServer(make_config(repository, cache_dir, tmp_path), install)
    server.start()
    try:
        with pytest.raises(ServerStartError) as failure:
            server.wait_until_ready()
    finally:
        server.stop()

    message = str(failure.value)
    assert "Model(s) that failed to load: broken" in message
    assert "failed to load 'broken'" in message
    assert "broken on purpose" in message
    assert server.returncode not in (None, 0)


@pytest.mark.server
def test_stop_ends_the_server_promptly(
    install: TritonInstall, cache_dir: Path, tmp_path: Path
) -> None:
    server = TritonServer(make_config(ECHO_REPOSITORY, cache_dir, tmp_path), install)
    server.start()
    try:
        server.wait_until_ready()
        pid = server.pid
        started = time.monotonic()
        server.stop()
        elapsed = time.monotonic() - started
    finally:
        server.stop()

    assert elapsed < 6.0, f"stop() took {elapsed:.1f} s"
    assert server.returncode == 0
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # type: ignore[arg-type]


def test_a_stop_signal_landing_inside_the_wait_does_not_deadlock() -> None:
    """serve_forever's loop is always inside stop_requested.wait(0.5), which holds the event's
    lock for a moment each round; a SIGINT handled right then must not wait for that lock (it
    did once in CI: Event.set() from the handler hung the stop for good). Here the handler runs
    while this thread holds the lock, as it would in that moment."""
    event = threading.Event()
    relay = launcher._SignalRelay(event)
    try:
        with event._cond:  # type: ignore[attr-defined]  # the lock Event.wait holds around its check
            relay.handler(signal.SIGINT, None)  # returns at once: it only writes to the pipe
        assert event.wait(timeout=5.0), "the relay thread never set the event"
    finally:
        relay.close()


def start_serve_forever(cache_dir: Path, tmp_path: Path) -> tuple[subprocess.Popen[str], str]:
    """Run serve_forever in a child Python (it installs signal handlers, so it needs a main
    thread of its own); return the process and its banner once it is ready."""
    http, grpc, metrics = free_ports(3)
    code = textwrap.dedent(
        f"""
        import sys
        from pathlib import Path
        from nmtserve.server.launcher import ServerConfig, serve_forever
        sys.exit(serve_forever(ServerConfig(
            model_repository=Path({str(ECHO_REPOSITORY)!r}), http_port={http}, grpc_port={grpc},
            metrics_port={metrics}, cache_dir=Path({str(cache_dir)!r}),
            log_file=Path({str(tmp_path / "serve.log")!r}), startup_timeout_s=60)))
        """
    )
    process = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert process.stdout is not None
    banner = []
    for line in process.stdout:  # blocks until the banner is complete or the process ends
        banner.append(line)
        if line.startswith("Press Ctrl+C"):
            break
    output = "".join(banner)
    if "Press Ctrl+C" not in output:
        process.kill()
        pytest.fail(f"serve_forever did not start:\n{output}{process.communicate()[1]}")
    assert f"http://127.0.0.1:{http}" in output
    assert f"127.0.0.1:{grpc}" in output
    assert f"http://127.0.0.1:{metrics}/metrics" in output
    return process, output


@pytest.mark.server
def test_serve_forever_stops_cleanly_on_sigint(
    install: TritonInstall, cache_dir: Path, tmp_path: Path
) -> None:
    process, _ = start_serve_forever(cache_dir, tmp_path)
    try:
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=20) == 0
    finally:
        process.kill()
        process.wait()


@pytest.mark.server
def test_serve_forever_fails_when_the_server_dies(
    install: TritonInstall, cache_dir: Path, tmp_path: Path
) -> None:
    process, banner = start_serve_forever(cache_dir, tmp_path)
    try:
        server_pid = int(re.search(r"pid +(\d+)", banner).group(1))  # type: ignore[union-attr]
        os.kill(server_pid, signal.SIGKILL)
        assert process.wait(timeout=20) == 128 + signal.SIGKILL
        assert "tritonserver exited with code -9 while serving" in process.communicate()[1]
    finally:
        process.kill()
        process.wait()


@pytest.mark.server
def test_serve_forever_restarts_a_server_its_killed_stub_took_down(
    install: TritonInstall, cache_dir: Path, tmp_path: Path
) -> None:
    """A Python stub killed while it holds the shared-memory lock can make tritonserver abort
    (boost::interprocess::lock_exception, seen under load in tests/test_faults.py): the stub's
    death, so serve_forever restarts it, as it restarts after a stub's death alone."""
    process, banner = start_serve_forever(cache_dir, tmp_path)
    try:
        server_pid = int(re.search(r"pid +(\d+)", banner).group(1))  # type: ignore[union-attr]
        stubs = [int(e.name) for e in Path("/proc").iterdir() if e.name.isdigit() and _child_stub(e, server_pid)]
        assert stubs, "no Python stub process found"
        os.kill(stubs[0], signal.SIGKILL)
        os.kill(server_pid, signal.SIGABRT)
        assert process.stdout is not None
        again = next((line for line in process.stdout if "serving again" in line), None)
        if again is None:
            process.wait(timeout=30)
            pytest.fail(f"no restart (exit {process.returncode}):\n{process.communicate()[1]}")
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=20) == 0
        assert "after a Python stub died" in process.communicate()[1]
    finally:
        process.kill()
        process.wait()


def _child_stub(entry: Path, parent: int) -> bool:
    try:
        ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        return ppid == parent and (entry / "cmdline").read_bytes().split(b"\0")[0].endswith(b"triton_python_backend_stub")
    except (OSError, ValueError, IndexError):
        return False


def test_beyond_loopback_the_admin_apis_need_the_admin_key(
    install: TritonInstall, cache_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bound to every interface, the model-repository (and shared-memory, trace, logging) APIs
    answer only requests carrying the admin header; inference and health stay open."""
    import dataclasses
    import urllib.error
    import urllib.request

    from nmtserve.server.launcher import ADMIN_HEADER, restricted_api_args

    assert restricted_api_args("127.0.0.1") == []
    monkeypatch.setenv("NMTSERVE_ADMIN_KEY", "s3cret")
    config = dataclasses.replace(make_config(ECHO_REPOSITORY, cache_dir, tmp_path), host="0.0.0.0")
    with TritonServer(config, install) as server:
        server.wait_until_ready(60)
        base = f"http://127.0.0.1:{config.http_port}"

        def index(headers: dict[str, str]) -> int:
            request = urllib.request.Request(f"{base}/v2/repository/index", data=b"{}", headers=headers)
            try:
                with urllib.request.urlopen(request, timeout=10) as response:
                    return response.status
            except urllib.error.HTTPError as exc:
                return exc.code

        assert index({}) == 403
        assert index({ADMIN_HEADER: "wrong"}) == 403
        assert index({ADMIN_HEADER: "s3cret"}) == 200
        with urllib.request.urlopen(f"{base}/v2/health/ready", timeout=10) as response:
            assert response.status == 200


@pytest.mark.server
def test_a_stopped_server_leaves_no_shared_memory_and_a_dead_launchers_leftovers_are_reaped(install, tmp_path):
    """The Python backend's regions carry the server's name and go with it, so does its
    /tmp/python_env_XXXXXX; files named after a launcher that no longer runs (killed with SIGKILL)
    are removed by the next start."""
    from nmtserve.server import leftovers

    repository = Path(__file__).parent / "fixtures" / "echo_repository"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # a pid that no longer runs
    stale = [leftovers.SHM_DIR / f"{leftovers.SHM_PREFIX}{dead.pid}-1-region",
             Path(tempfile.gettempdir()) / f"{leftovers.LOG_PREFIX}{dead.pid}-x.log",
             Path(tempfile.gettempdir()) / f"{leftovers.DRAIN_PREFIX}{dead.pid}-x"]
    mine = Path(tempfile.gettempdir()) / f"{leftovers.LOG_PREFIX}{os.getpid()}-kept.log"  # a live launcher's
    for path in (*stale, mine):
        path.write_bytes(b"")
    # A dead launcher's record of the Python backend's folders: the empty one goes, a full one stays.
    empty_env, full_env = (Path(tempfile.mkdtemp(prefix="python_env_", dir=leftovers.PYTHON_ENV_DIR)) for _ in range(2))
    (full_env / "extracted").write_text("another Triton's environment")
    record = Path(tempfile.gettempdir()) / f"{leftovers.PYENV_PREFIX}{dead.pid}-x.txt"
    record.write_text(f"{empty_env}\n{full_env}\n/etc\n")
    envs_before = leftovers.python_envs()
    server = TritonServer(ServerConfig.on_free_ports(repository, cache_dir=tmp_path / "cache"), install)
    with server:
        server.wait_until_ready(120)
        assert not any(path.exists() for path in (*stale, record, empty_env))
        assert full_env.exists() and Path("/etc").is_dir()
        regions = list(leftovers.SHM_DIR.glob(f"{server._shm_prefix}*"))
        assert regions, "the Python backend's regions carry the server's prefix"
        made = leftovers.python_envs() - envs_before
        assert made, "the Python backend makes /tmp/python_env_XXXXXX when it loads"
        kept = server._python_env_record
        assert kept is not None and set(kept.read_text().split()) == {str(p) for p in made}
    assert not list(leftovers.SHM_DIR.glob(f"{server._shm_prefix}*"))
    assert not any(path.exists() for path in made), "a stopped server leaves no /tmp/python_env_*"
    assert not kept.exists()
    assert mine.exists()
    mine.unlink()
    (full_env / "extracted").unlink()
    full_env.rmdir()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_the_generate_stub_gives_large_blocks_back():
    """The generate stub fixes glibc's threshold for blocks mapped on their own (freed blocks of a
    decode loop's large arrays go back to the system instead of staying in its thread's arena)."""
    from nmtserve.server import stub

    assert stub.return_large_blocks()  # glibc accepted M_MMAP_THRESHOLD
