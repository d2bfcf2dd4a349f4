"""Embedded CPU launcher: run the real ``tritonserver`` shipped in the nvidia-pytriton wheel.

(One job in ~680 lines: the life of one server process, start, readiness, watchdog and the
drain-then-stop shutdown; the install half is ``install.py``, ports and URLs ``ports.py``, the
stop handshake with the models ``drain.py``.)

This is what ``nmtserve serve`` runs on a machine without Docker or a GPU. It uses only the
binary and the Python backend that the wheel ships, not PyTriton's own Python API (which wants
to own the model repository and the model code).

Where the binary, its Python backend and the stub for this Python are, and the environment they
need: ``nmtserve.server.install``. Nothing here imports torch, or pytriton itself.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType, TracebackType
from typing import IO, Any, TextIO

__all__ = [
    "PortInUseError",
    "ServerConfig",
    "ServerError",
    "ServerStartError",
    "ServerUrls",
    "TritonInstall",
    "TritonNotInstalledError",
    "TritonServer",
    "find_tritonserver",
    "free_port",
    "free_ports",
    "prepare_backend_directory",
    "serve_forever",
]

from . import connections, drain, leftovers
from .install import (  # the install half (re-exported: callers import it from here too)
    ServerError,
    TritonInstall,
    TritonNotInstalledError,
    _python_library_dir,
    _server_env,
    _system_has_libpython,
    find_tritonserver,
    prepare_backend_directory,
)
from .ports import (  # the address half (re-exported: callers import it from here too)
    PortInUseError,
    ServerUrls,
    check_ports_free,
    free_port,
    free_ports,
    urls_for,
)

LOGGER = logging.getLogger(__name__)

LOG_TAIL_LINES = 40


class ServerStartError(ServerError):
    """The server did not become ready (it exited, or the start-up timeout passed)."""


# --------------------------------------------------------------------------------------------
# Configuration

# Triton endpoints that change the server or read its memory: reachable beyond loopback only with
# the header ADMIN_HEADER set to $NMTSERVE_ADMIN_KEY (unset: a random key nobody knows, so closed).
# Longest wait for generate to answer what it holds before SIGINT (its check runs every 0.05 s,
# then the decoder step in progress ends: ~0.05 s on the demo, ~0.3 s at opus-mt-base size).
DRAIN_SECONDS = 1.0


def _process_alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"  # a zombie has exited; its parent has not reaped it yet


RESTRICTED_APIS = ("model-repository", "shared-memory", "trace", "logging")
ADMIN_HEADER = "nmtserve-admin-key"  # over gRPC Triton expects it as "triton-grpc-protocol-nmtserve-admin-key"
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1", "ipv6:[::1]")


def restricted_api_args(host: str) -> list[str]:
    """Triton's restricted-API options for a server bound beyond loopback (none on loopback)."""
    if host in LOOPBACK_HOSTS:
        return []
    import secrets  # noqa: PLC0415

    key = os.environ.get("NMTSERVE_ADMIN_KEY") or secrets.token_urlsafe(24)
    apis = ",".join(RESTRICTED_APIS)
    return [f"--http-restricted-api={apis}:{ADMIN_HEADER}={key}",
            f"--grpc-restricted-protocol={apis}:{ADMIN_HEADER}={key}"]


@dataclass
class ServerConfig:
    """How to run the embedded tritonserver."""

    model_repository: Path
    # Loopback by default: the server has no authentication, so exposing it is a choice.
    host: str = "127.0.0.1"
    http_port: int = 8000
    grpc_port: int = 8001
    metrics_port: int = 8002
    log_verbose: int = 0
    # Triton waits this long for in-flight requests on shutdown; its default (30 s) makes
    # Ctrl-C feel hung, and the unload itself takes ~2 s anyway.
    exit_timeout_s: int = 5
    # Appended last, verbatim (e.g. "--backend-config=python,shm-default-byte-size=...").
    extra_args: Sequence[str] = ()
    startup_timeout_s: float = 120.0
    # Where the server's stdout/stderr go; None: a new file in the temp directory.
    log_file: Path | None = None
    # Also copy the server's output to this stream (e.g. sys.stderr) as it arrives.
    log_stream: TextIO | None = None
    # Root of nmtserve's cache (backend directory); None: default_cache_dir().
    cache_dir: Path | None = None
    # Extra environment for the server (and so for the Python models' stub processes).
    env: dict[str, str] = field(default_factory=dict)

    @classmethod
    def on_free_ports(cls, model_repository: str | Path, **fields: Any) -> ServerConfig:
        """A config whose three ports are free on loopback now (tests, benchmarks, servers side
        by side); ``fields`` set the rest, a port given among them included."""
        http, grpc, metrics = free_ports(3)
        ports = {"http_port": http, "grpc_port": grpc, "metrics_port": metrics}
        return cls(model_repository=Path(model_repository), **{**ports, **fields})

    def __post_init__(self) -> None:
        self.model_repository = Path(self.model_repository)
        ports = {"http": self.http_port, "grpc": self.grpc_port, "metrics": self.metrics_port}
        for name, port in ports.items():
            if not 0 < int(port) < 65536:
                raise ValueError(f"{name} port {port} is not a valid TCP port")
        if len(set(ports.values())) != len(ports):
            raise ValueError(f"http, grpc and metrics ports must differ, got {ports}")


# --------------------------------------------------------------------------------------------
# Model repository


def check_model_repository(repository: Path) -> list[str]:
    """Return the model names of repository; raise ServerError if it cannot be served."""
    if not repository.exists():
        raise ServerError(f"model repository {repository} does not exist")
    if not repository.is_dir():
        raise ServerError(f"model repository {repository} is not a directory")
    models: list[str] = []
    without_config: list[str] = []
    for entry in sorted(repository.iterdir()):
        if not entry.is_dir() or entry.name.startswith("."):
            continue
        (models if (entry / "config.pbtxt").is_file() else without_config).append(entry.name)
    if not models:
        detail = (
            f" (directories without one: {', '.join(without_config)})" if without_config else ""
        )
        raise ServerError(
            f"model repository {repository} has no model: expected at least one directory "
            f"<model>/config.pbtxt{detail}"
        )
    if without_config:
        # --disable-auto-complete-config means Triton will not invent a config for these, and
        # with --model-control-mode=none it tries to load every directory: they will fail.
        LOGGER.warning(
            "model repository %s: %s ha%s no config.pbtxt and will fail to load",
            repository,
            ", ".join(without_config),
            "s" if len(without_config) == 1 else "ve",
        )
    return models


def check_backends(repository: Path, models: list[str], backend_directory: Path) -> list[str]:
    """The models whose config asks for the nmtserve backend (they run in the server's process);
    ServerError naming them where the backend directory has none (nmtserve_native built without
    libpython, or a system Triton install)."""
    from .install import NMTSERVE_BACKEND, NMTSERVE_BACKEND_LIBRARY

    wanting = [m for m in models if f'backend: "{NMTSERVE_BACKEND}"' in
               (repository / m / "config.pbtxt").read_text(encoding="utf-8", errors="replace")]
    if wanting and not (backend_directory / NMTSERVE_BACKEND / NMTSERVE_BACKEND_LIBRARY).is_file():
        raise ServerError(
            f"{', '.join(wanting)} in {repository} run on the nmtserve backend (export --generate-backend "
            f"nmtserve), which {backend_directory} lacks: install nmtserve_native where libpython{sys.version_info.major}."
            f"{sys.version_info.minor} is found (a Python built with --enable-shared), or export with "
            "--generate-backend python")
    return wanting


# --------------------------------------------------------------------------------------------
# Logs


def _tail_lines(path: Path, count: int = LOG_TAIL_LINES, max_bytes: int = 64 * 1024) -> list[str]:
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            text = f.read().decode("utf-8", errors="replace")
    except OSError:
        return []
    return text.splitlines()[-count:]


# Triton 2.51 reports a model that fails to load as
#   E... model_lifecycle.cc:...] "failed to load 'NAME' version 1: Internal: ..."
# and again in the model table as "| NAME | 1 | UNAVAILABLE: ... |".
_FAILED_MODEL = re.compile(r"failed to load '([^']+)'")
# What the dynamic linker prints when a stub (or the server) misses a library.
_MISSING_LIBRARY = "error while loading shared libraries"


def _failed_model_report(path: Path) -> tuple[list[str], list[str]]:
    """(names of the models that failed to load, the log lines that say so)."""
    try:
        text = path.read_text("utf-8", errors="replace")
    except OSError:
        return [], []
    names: list[str] = []
    lines: list[str] = []
    for line in text.splitlines():
        match = _FAILED_MODEL.search(line)
        if match:
            if match.group(1) not in names:
                names.append(match.group(1))
            # Triton escapes the Python traceback's newlines: restore them for reading.
            lines.append(line.strip().replace("\\n", "\n    "))
        elif "UNAVAILABLE" in line and line.lstrip().startswith("|"):
            lines.append(line.strip())
    return names, lines


# --------------------------------------------------------------------------------------------
# The server


def _parent_death_signal() -> Callable[[], None] | None:
    """A preexec_fn that makes the child get SIGTERM when this process dies (Linux), so a
    crashed or killed launcher never leaves a server holding its ports. PyTriton does the same.

    Linux ties this to the *thread* that forked: start the server from a long-lived thread.
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)  # loaded before fork: no dlopen in the child
    except OSError:
        return None
    parent = os.getpid()
    pr_set_pdeathsig = 1

    def preexec() -> None:
        libc.prctl(pr_set_pdeathsig, signal.SIGTERM)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(1)

    return preexec


class TritonServer:
    """One tritonserver process serving a model repository.

    Usage::

        with TritonServer(ServerConfig(model_repository=Path("model_repository"))) as server:
            print(server.urls.grpc)

    ``__enter__`` starts the server and waits until it is ready; ``__exit__`` stops it.
    """

    def __init__(self, config: ServerConfig, install: TritonInstall | None = None) -> None:
        self.config = config
        self._install = install
        self._process: subprocess.Popen[bytes] | None = None
        self._log_path: Path | None = None
        self._shm_prefix = leftovers.shm_prefix()
        self._log_handle: IO[bytes] | None = None
        self._log_thread: threading.Thread | None = None
        self._drain_file: Path | None = None
        # The Python backend's /tmp/python_env_* folders: those there before the start, and the
        # record of the ones this server made (leftovers.py).
        self._python_envs_before: set[Path] | None = None  # None: nothing to diff (not started, or recorded)
        self._python_env_record: Path | None = None
        self._models: list[str] = []  # what Triton loads (check_model_repository, at start)
        self.in_process_models: list[str] = []  # of those, the ones on the nmtserve backend (check_backends)
        self.stop_notes: list[str] = []  # what the last stop did, for the console

    # -- properties

    @property
    def urls(self) -> ServerUrls:
        return urls_for(self.config)

    @property
    def log_path(self) -> Path | None:
        """The file with the server's stdout and stderr (set by start())."""
        return self._log_path

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def returncode(self) -> int | None:
        """The server's exit status once it has exited, else None."""
        return self._process.poll() if self._process is not None else None

    def is_running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    # -- lifecycle

    def command(self, backend_directory: Path) -> list[str]:
        """The tritonserver command line for this config."""
        install = self._install or find_tritonserver()
        config = self.config
        host = config.host
        return [
            str(install.binary),
            f"--model-repository={config.model_repository.resolve()}",
            f"--backend-directory={backend_directory}",
            f"--cache-directory={install.caches_dir}",
            f"--http-address={host}",
            f"--http-port={config.http_port}",
            f"--grpc-address={host}",
            f"--grpc-port={config.grpc_port}",
            "--allow-metrics=true",
            f"--metrics-address={host}",
            f"--metrics-port={config.metrics_port}",
            # Load everything in the repository once; no load/unload API to guard.
            "--model-control-mode=none",
            # Every config.pbtxt is complete; auto-complete starts each Python model's stub an
            # extra time just to ask it for its config (start-up ~4x slower).
            "--disable-auto-complete-config",
            f"--exit-timeout-secs={config.exit_timeout_s}",
            f"--log-verbose={config.log_verbose}",
            # The Python backend's shared memory carries this server's name (leftovers.py).
            f"--backend-config=python,shm-region-prefix-name={self._shm_prefix}",
            *restricted_api_args(host),
            *config.extra_args,
        ]

    def start(self) -> None:
        """Check the repository and the ports, then start the server (without waiting)."""
        if self.is_running():
            raise ServerError(f"tritonserver is already running (pid {self.pid})")
        config = self.config
        self._models = check_model_repository(config.model_repository)
        check_ports_free(config)
        leftovers.reap()  # of servers whose launcher was killed
        self._shm_prefix = leftovers.shm_prefix()
        install = self._install = self._install or find_tritonserver()
        backend_directory = prepare_backend_directory(install, config.cache_dir, config.env.get("PYTHONPATH", ""))
        self.in_process_models = check_backends(config.model_repository, self._models, backend_directory)
        if _python_library_dir() is None and not _system_has_libpython():
            LOGGER.warning(
                "libpython%s.so.1.0 was not found: Python-backend models will fail to start "
                "(their stub links against it). Use a Python built with --enable-shared.",
                install.python_version,
            )
        command = self.command(backend_directory)

        if config.log_file is not None:
            self._log_path = Path(config.log_file)
            self._log_path.parent.mkdir(parents=True, exist_ok=True)
        else:
            fd, name = tempfile.mkstemp(prefix=leftovers.log_prefix(), suffix=".log")
            os.close(fd)
            self._log_path = Path(name)
        self._log_handle = self._log_path.open("wb")

        # Stop requests reach the models through this file (DRAIN_ENV): they answer what is in
        # flight with UNAVAILABLE at once instead of making Triton wait out its exit timeout.
        self._drain_file = drain.new_flag()
        LOGGER.info("starting tritonserver: %s", " ".join(command))
        LOGGER.info("tritonserver log: %s", self._log_path)
        self._python_envs_before = leftovers.python_envs()
        self._process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            # Without a stream to copy to, the server writes straight into the file: no pipe
            # that could fill up and block it if nobody reads.
            stdout=subprocess.PIPE if config.log_stream is not None else self._log_handle,
            stderr=subprocess.STDOUT,
            env=_server_env(install, {**config.env, drain.DRAIN_ENV: str(self._drain_file)}),
            # Its own process group: a terminal's Ctrl-C reaches only the launcher, which then
            # stops the server once (and can kill the server and its stubs together).
            start_new_session=True,
            preexec_fn=_parent_death_signal(),
        )
        if config.log_stream is not None:
            self._log_thread = threading.Thread(
                target=self._copy_output,
                args=(config.log_stream,),
                name="tritonserver-log",
                daemon=True,
            )
            self._log_thread.start()

    def _copy_output(self, stream: TextIO) -> None:
        assert self._process is not None and self._process.stdout is not None
        assert self._log_handle is not None
        for line in iter(self._process.stdout.readline, b""):
            self._log_handle.write(line)
            self._log_handle.flush()
            try:
                stream.write(line.decode("utf-8", errors="replace"))
                stream.flush()
            except (OSError, ValueError):  # closed stream: keep logging to the file
                pass

    def wait_until_ready(
        self, timeout: float | None = None, abort: threading.Event | None = None
    ) -> float:
        """Poll GET /v2/health/ready until the server is ready; return the seconds it took.

        With --model-control-mode=none Triton is ready only when every model has loaded. Raises
        ServerStartError as soon as the server exits (quoting the log lines that name a model
        that failed to load, and the log's tail), or when timeout (default: the config's
        startup_timeout_s) passes. abort, when set, ends the wait early with ServerStartError.
        """
        if self._process is None:
            raise ServerError("tritonserver was not started")
        timeout = self.config.startup_timeout_s if timeout is None else timeout
        url = f"{self.urls.http}/v2/health/ready"
        # An HTTP(S)_PROXY in the environment must not capture requests to our own loopback.
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        started = time.monotonic()
        deadline = started + timeout
        while True:
            if self._process.poll() is not None:
                raise ServerStartError(self.exit_report("before it was ready"))
            try:
                with opener.open(url, timeout=1.0) as response:
                    if response.status == 200:
                        elapsed = time.monotonic() - started
                        LOGGER.info("tritonserver ready after %.2f s", elapsed)
                        # The Python backend made its folder while loading: recorded now, while
                        # another server starting later cannot have made one yet.
                        if self._python_envs_before is not None:
                            self._python_env_record = leftovers.record_python_envs(
                                self._python_envs_before, self._python_env_record)
                            self._python_envs_before = None
                        return elapsed
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                pass  # not listening yet, or 400 while models load
            if abort is not None and abort.is_set():
                raise ServerStartError("start-up aborted")
            if self._stub_cannot_start():
                # Triton keeps waiting for a stub that died loading its libraries: give up now
                # rather than at the timeout.
                raise ServerStartError(
                    "a Python backend stub could not start.\n" + self._log_excerpt()
                )
            if time.monotonic() >= deadline:
                raise ServerStartError(
                    f"tritonserver was not ready after {timeout:.0f} s.\n" + self._log_excerpt()
                )
            time.sleep(0.1)

    def _stub_cannot_start(self) -> bool:
        if self._log_path is None:
            return False
        return any(_MISSING_LIBRARY in line for line in _tail_lines(self._log_path))

    def exit_report(self, when: str) -> str:
        """Why the server exited: its exit status, the models that failed to load, the log's
        tail. when completes "tritonserver exited with code N ..."."""
        assert self._process is not None
        code = self._process.poll()
        head = f"tritonserver exited with code {code} {when}."
        if self._log_thread is not None:
            self._log_thread.join(timeout=2.0)  # let the last lines reach the file
        return head + "\n" + self._log_excerpt()

    def _log_excerpt(self) -> str:
        if self._log_path is None:
            return ""
        if self._log_handle is not None:
            self._log_handle.flush()
        parts: list[str] = []
        names, lines = _failed_model_report(self._log_path)
        if names:
            parts.append(f"Model(s) that failed to load: {', '.join(names)}")
            parts.extend(f"  {line}" for line in lines)
        tail = _tail_lines(self._log_path)
        if any(_MISSING_LIBRARY in line for line in tail):
            parts.append(
                "A shared library is missing: check that nvidia-pytriton is complete and that "
                "this Python has a shared libpython."
            )
        # Triton's start-up banner is tables (backends, models, options): the failed models'
        # rows are quoted above, the rest only hides the messages around them.
        tail = [line for line in tail if line.strip() and not line.lstrip().startswith(("|", "+"))]
        parts.append(f"Last lines of {self._log_path}:")
        parts.extend(f"  {line}" for line in tail[-LOG_TAIL_LINES // 2 :])
        return "\n".join(parts)

    def stop(self, timeout: float | None = None) -> int | None:
        """Stop the server: drain, SIGINT, wait for every model to unload, end the process.

        1. The drain file appears: ``generate`` answers what it is decoding or holding with
           UNAVAILABLE (retryable) within ~0.1 s, so Triton finds nothing in flight.
        2. SIGINT: Triton stops taking requests and unloads every model.
        3. Once the log says every model of the repository is unloaded, the process group is
           ended: Triton would only wait for its next once-a-second check, then exit (without
           this, a stop takes ~3 s even with nothing to do). If that never shows, Triton is
           left to exit on its own; after ``timeout`` (default: the config's exit_timeout_s +
           10 s) it is killed.

        Returns the exit status (None if it was never started; 0 when it was ended after a
        complete unload). Safe to call more than once.
        """
        process = self._process
        if process is None:
            return None
        if process.poll() is None:
            timeout = self.config.exit_timeout_s + 10.0 if timeout is None else timeout
            LOGGER.info("stopping tritonserver (pid %d)", process.pid)
            deadline = time.monotonic() + timeout
            # Every `generate` (one per language pair: generate_en_fr, ...) watches the drain file.
            started = time.monotonic()
            self.stop_notes = []
            if self._drain_file is not None and any(self.config.model_repository.glob("generate*/config.pbtxt")):
                self._drain_file.touch()
                drained = self._wait_drained(time.monotonic() + DRAIN_SECONDS)
                LOGGER.info("drain %s after %.2f s", "acknowledged" if drained else "not acknowledged",
                            time.monotonic() - started)
                self.stop_notes.append("generate answered what it held" if drained
                                       else f"generate did not confirm its drain in {DRAIN_SECONDS:g} s")
            # Idle keep-alive clients would hold Triton's HTTP shutdown for the whole exit timeout.
            closed = self._close_client_connections()
            waiting = {f"successfully unloaded '{m}'" for m in self._models}
            log_at = self._log_path.stat().st_size if self._log_path and self._log_path.exists() else 0
            process.send_signal(signal.SIGINT)
            time.sleep(0.05)
            closed += self._close_client_connections()  # opened since, before Triton stopped accepting
            if closed:
                self.stop_notes.append(f"closed {closed} idle client connection(s) (HTTP keep-alive, metrics)")
            unloaded = False
            while process.poll() is None and time.monotonic() < deadline:
                log_at = self._unloads_seen(waiting, log_at)
                if not unloaded and self._models and not waiting:
                    unloaded = True
                    LOGGER.info("every model unloaded: ending tritonserver")
                    self._kill_group(process)
                time.sleep(0.02)
            if process.poll() is None:
                LOGGER.warning("tritonserver did not stop within %.0f s; killing it", timeout)
                self._kill_group(process)
            process.wait()
            if unloaded:
                process.returncode = 0
                self.stop_notes.append("every model unloaded")
            self.stop_notes.append(f"stopped in {time.monotonic() - started:.1f} s")
        self._kill_group(process)  # stubs that outlived their server, if any
        if self._drain_file is not None:
            drain.remove(self._drain_file)
        leftovers.remove_shm(self._shm_prefix)
        record = self._python_env_record
        if self._python_envs_before is not None:  # stopped before it was ready: what appeared since its start
            record = leftovers.record_python_envs(self._python_envs_before, record)
        leftovers.remove_python_envs(record)
        self._python_env_record, self._python_envs_before = None, None
        if self._log_thread is not None:
            self._log_thread.join(timeout=5.0)
            self._log_thread = None
        if process.stdout is not None:
            process.stdout.close()
        if self._log_handle is not None:
            self._log_handle.close()
            self._log_handle = None
            if process.returncode == 0:  # a clean stop leaves nothing to read
                self._remove_temporary_log()
        return process.returncode

    def stub_processes(self) -> dict[int, str]:
        """The server's Python-backend stub processes: pid -> model instance (e.g. "generate_0_0")."""
        if not self.is_running() or self.pid is None:
            return {}
        found = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
                ppid = int(stat.rsplit(")", 1)[1].split()[1])
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except (OSError, ValueError, IndexError):
                continue
            if ppid == self.pid and argv and argv[0].endswith(b"triton_python_backend_stub"):
                instance = next((a.decode() for a in argv[1:] if re.fullmatch(rb"\S+_\d+_\d+", a)), "?")
                found[int(entry.name)] = instance
        return found

    def kill(self) -> None:
        """End the server and its stubs at once (after a crash: what is in flight is lost anyway).
        An end asked for leaves nothing to report: the temporary log goes too."""
        process = self._process
        if process is not None and process.poll() is None:
            LOGGER.warning("killing tritonserver (pid %d)", process.pid)
            self._kill_group(process)
            process.wait()
        self.stop()
        self._remove_temporary_log()

    def _remove_temporary_log(self) -> None:
        """The log file the launcher made goes with its server (a log the caller named stays; so
        does one after a failure, for the report: the callers decide when)."""
        if self.config.log_file is None and self._log_path is not None:
            self._log_path.unlink(missing_ok=True)

    def _wait_drained(self, until: float) -> bool:
        """Until ``generate`` says it answered everything it held (or ``until``); whether it did."""
        assert self._drain_file is not None
        return drain.wait_acknowledged(self._drain_file, until)

    def _close_client_connections(self) -> int:
        """End the clients' open connections to the HTTP and metrics ports (server/connections.py)."""
        if self._process is None or self._process.poll() is not None:
            return 0
        closed, why = connections.close_client_connections(
            self._process.pid, (self.config.http_port, self.config.metrics_port))
        note = f"could not close idle client connections ({why})"
        if why and note not in self.stop_notes:  # once per stop, though it is tried twice
            LOGGER.warning("%s: Triton waits up to %d s for them", note, self.config.exit_timeout_s)
            self.stop_notes.append(note)
        return closed

    def _unloads_seen(self, waiting: set[str], position: int) -> int:
        """Drop from ``waiting`` the unload lines the log gained since ``position`` (complete lines
        only); the position to read from next time."""
        if not waiting or self._log_path is None or not self._log_path.exists():
            return position
        with self._log_path.open("rb") as log:
            log.seek(position)
            new = log.read()
        complete = new[: new.rfind(b"\n") + 1]
        text = complete.decode("utf-8", "replace")
        waiting.difference_update({w for w in waiting if w in text})
        return position + len(complete)

    @staticmethod
    def _kill_group(process: subprocess.Popen[bytes]) -> None:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def __enter__(self) -> TritonServer:
        self.start()
        try:
            self.wait_until_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


# --------------------------------------------------------------------------------------------
# CLI entry


RESTART_ATTEMPTS = 3


def _restart(server: TritonServer, stop_requested: threading.Event) -> float | None:
    """Kill and start ``server`` again; seconds to ready, or None when it would not start in
    RESTART_ATTEMPTS tries (each failure said on stderr) or a stop was asked meanwhile."""
    for attempt in range(1, RESTART_ATTEMPTS + 1):
        server.kill()
        if stop_requested.is_set():
            return None
        try:
            server.start()
            return server.wait_until_ready(abort=stop_requested)
        except ServerError as exc:
            if stop_requested.is_set():
                return None
            print(f"nmtserve: restart {attempt} of {RESTART_ATTEMPTS} failed: {exc}", file=sys.stderr, flush=True)
            stop_requested.wait(1.0 * attempt)
    server.kill()
    return None


class _SignalRelay:
    """Turns SIGINT/SIGTERM into ``event.set()`` from a thread of its own.

    A Python signal handler runs in the main thread between two bytecodes, possibly while that
    thread holds the event's internal lock (inside ``event.wait(0.5)``, as serve_forever's loop
    always is): ``event.set()`` from the handler would wait for that lock forever. The handler
    therefore only writes a byte to a pipe; the relay thread reads it and sets the event.
    """

    def __init__(self, event: threading.Event) -> None:
        self._event = event
        self._read, self._write = os.pipe()
        self._thread = threading.Thread(target=self._run, name="nmtserve-signal-relay", daemon=True)
        self._thread.start()

    def handler(self, signum: int, frame: FrameType | None) -> None:
        try:
            os.write(self._write, b"s")
        except OSError:  # closed: serve_forever is returning anyway
            pass

    def _run(self) -> None:
        try:
            while os.read(self._read, 1) == b"s":  # b"q" from close() ends it
                self._event.set()
        except OSError:
            pass

    def close(self) -> None:
        try:
            os.write(self._write, b"q")
        except OSError:
            pass
        self._thread.join(timeout=1.0)
        for fd in (self._write, self._read):
            try:
                os.close(fd)
            except OSError:
                pass


# Signals of a crash (not of a stop, nor of the kernel's out-of-memory killer: SIGKILL).
CRASH_SIGNALS = frozenset({signal.SIGSEGV, signal.SIGABRT, signal.SIGBUS, signal.SIGFPE, signal.SIGILL})


def serve_forever(config: ServerConfig, out: TextIO | None = None) -> int:
    """Run the server until SIGINT/SIGTERM; return the process exit code for the CLI.

    0 after a requested stop (also during start-up); 1 when the server did not start; the
    server's own status (128 + signal if it was killed) when it died while serving.
    """
    out = out or sys.stdout
    stop_requested = threading.Event()
    previous: dict[int, object] = {}
    # signal.signal works only in the main thread; elsewhere the caller owns shutdown.
    relay = _SignalRelay(stop_requested) if threading.current_thread() is threading.main_thread() else None
    if relay is not None:
        for signum in (signal.SIGINT, signal.SIGTERM):
            previous[signum] = signal.signal(signum, relay.handler)
    server = TritonServer(config)
    try:
        try:
            server.start()
            elapsed = server.wait_until_ready(abort=stop_requested)
        except ServerError as exc:
            if stop_requested.is_set():
                return 0
            print(f"nmtserve: {exc}", file=sys.stderr)
            return 1
        urls = server.urls
        stubs = server.stub_processes()  # watched from before the banner says it serves
        print(
            f"nmtserve: Triton is serving {config.model_repository} (ready in {elapsed:.1f} s)\n"
            f"  HTTP     {urls.http}\n"
            f"  gRPC     {urls.grpc_address}\n"
            f"  metrics  {urls.metrics}\n"
            f"  log      {server.log_path}\n"
            f"  pid      {server.pid}\n"
            "Press Ctrl+C to stop.",
            file=out,
            flush=True,
        )
        while not stop_requested.wait(0.5):
            code = server.returncode
            dead = sorted(name for pid, name in stubs.items() if not _process_alive(pid))
            # A stub killed while it holds the shared-memory lock can take tritonserver down with
            # it (boost::interprocess::lock_exception, then abort): that is the stub's death, and
            # restarted as one. A crash of a model that runs in the server's process (the nmtserve
            # backend) is the server's crash: restarted the same way. Any other exit (killed,
            # crashed with its stubs alive and no model in process) is reported.
            crashed = code is not None and -code in CRASH_SIGNALS and bool(server.in_process_models)
            taken_down = (code == -signal.SIGABRT and bool(dead)) or crashed
            if code is not None and not taken_down:
                print(f"nmtserve: {server.exit_report('while serving')}", file=sys.stderr)
                if code == 0:  # exiting unasked is a failure even when Triton calls it success
                    return 1
                return 128 - code if code < 0 else code
            if dead or crashed:
                # Triton keeps reporting the model ready, but its requests would hang or fail
                # ("Stub process ... is not healthy") from now on: start afresh. Clients see
                # UNAVAILABLE / refused connections meanwhile, which nmtserve's client retries.
                if crashed:
                    when = "after a model in its process crashed"
                    cause = f"a crash of {', '.join(server.in_process_models)} (in the server's process) took it down"
                else:
                    when, cause = "after a Python stub died", f"the Python stub process of {', '.join(dead)} died"
                if code is not None:
                    print(f"nmtserve: {server.exit_report(when)}", file=sys.stderr)
                print(f"nmtserve: {cause}; restarting tritonserver", file=sys.stderr, flush=True)
                elapsed = _restart(server, stop_requested)
                if elapsed is None:
                    return 0 if stop_requested.is_set() else 1
                stubs = server.stub_processes()
                print(f"nmtserve: Triton is serving again (ready in {elapsed:.1f} s)", file=out, flush=True)
        print("nmtserve: stopping", file=out, flush=True)
        server.stop()
        print(f"nmtserve: {'; '.join(server.stop_notes)}", file=out, flush=True)
        return 0
    finally:
        server.stop()
        for signum, handler in previous.items():
            signal.signal(signum, handler)  # type: ignore[arg-type]
        if relay is not None:
            relay.close()
