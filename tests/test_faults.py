"""Faults under load: the `generate` stub process killed mid-load, on `nmtserve serve` (serve_forever);
with generate in the server's process (`export --generate-backend nmtserve`), the server killed.

Triton keeps reporting a model whose Python stub died as ready while its requests hang or fail
("Stub process ... is not healthy"); serve_forever notices the death, restarts tritonserver, and
nmtserve's client retries what failed meanwhile. Checked: every client finishes, every answer is
the reference translation of its own sentence, none is lost or duplicated.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.server


def _stub_pid(server_pid: int, instance: str) -> int | None:
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except (OSError, ValueError, IndexError):
            continue
        if ppid == server_pid and instance.encode() in argv:
            return int(entry.name)
    return None


def _export(tmp_path: Path, backend: str) -> Path:
    from nmtserve.cli import main

    repo = tmp_path / "repository"
    demo = Path(__file__).resolve().parents[1] / "models" / "en-fr-numbers"
    assert main(["export", str(demo), "--repository", str(repo), "--generate-backend", backend, "--skip-parity",
                 "--max-target-len", "128", "--max-source-len", "128", "--max-batch", "32"]) == 0
    return repo


def test_killing_the_generate_stub_under_load_loses_nothing(demo_checkpoint, demo_sentences, tmp_path):
    """``export --generate-backend python`` (the GPU target's, and the CPU target's where
    nmtserve_native has no nmtserve backend): generate runs in a stub process of its own."""
    def kill(server_pid: int) -> None:
        stub = _stub_pid(server_pid, "generate_0_0")
        assert stub is not None, "no generate stub process found"
        os.kill(stub, signal.SIGKILL)

    _killed_under_load(_export(tmp_path, "python"), demo_checkpoint, demo_sentences, tmp_path, kill)


def test_a_crash_of_generate_in_the_server_process_under_load_loses_nothing(demo_repository, demo_checkpoint,
                                                                             demo_sentences, tmp_path):
    """The CPU target's default where nmtserve_native has it (``export --generate-backend
    nmtserve``): generate runs inside tritonserver, so a crash of the model is a crash of the
    server (a segfault, SIGSEGV here); serve_forever restarts it, and the client retries what
    failed meanwhile."""
    if 'backend: "nmtserve"' not in (demo_repository / "generate" / "config.pbtxt").read_text():
        pytest.skip("nmtserve_native was built without libpython: the demo's generate runs on the Python backend")
    _killed_under_load(demo_repository, demo_checkpoint, demo_sentences, tmp_path,
                       lambda server_pid: os.kill(server_pid, signal.SIGSEGV))


def _killed_under_load(repository: Path, demo_checkpoint, demo_sentences, tmp_path: Path, kill) -> None:
    """12 clients translate through serve_forever while ``kill(server_pid)`` strikes: every client
    finishes, every answer is its own sentence's reference translation, some come after the restart."""
    from helpers import DEFAULTS

    from nmtserve.client import Translator
    from nmtserve.model.reference import translate as reference_translate
    from nmtserve.server.launcher import free_ports

    texts = demo_sentences[300:348]
    want = {t: n[0][0] for t, n in zip(texts, reference_translate(
        demo_checkpoint.model, demo_checkpoint.tokenizer, texts, DEFAULTS), strict=True)}
    http, grpc, metrics = free_ports(3)
    code = textwrap.dedent(f"""
        import sys
        from pathlib import Path
        from nmtserve.server.launcher import ServerConfig, serve_forever
        sys.exit(serve_forever(ServerConfig(model_repository=Path({str(repository)!r}), http_port={http},
                 grpc_port={grpc}, metrics_port={metrics}, log_file=Path({str(tmp_path / "serve.log")!r}))))
        """)
    serve = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    ready = threading.Event()
    restarted = threading.Event()

    def read() -> None:
        assert serve.stdout is not None
        for line in serve.stdout:
            lines.append(line)
            if line.startswith("Press Ctrl+C"):
                ready.set()
            if "serving again" in line:
                restarted.set()

    threading.Thread(target=read, daemon=True).start()
    results: list[tuple[str, str]] = []
    errors: list[str] = []
    stop = threading.Event()

    def client(i: int) -> None:
        with Translator(f"127.0.0.1:{grpc}", max_retries=20, timeout=30, deadline=120, batch_size=4) as tr:
            k = i
            while not stop.is_set():
                batch = [texts[(k + j) % len(texts)] for j in range(3)]
                try:
                    got = tr.translate(batch)
                except Exception as exc:  # noqa: BLE001 - every failure is a finding
                    errors.append(f"{type(exc).__name__}: {exc}")
                    return
                results.extend(zip(batch, [g.text for g in got], strict=True))
                k += 5

    try:
        assert ready.wait(180), "".join(lines) + (serve.stderr.read() if serve.poll() is not None else "")
        server_pid = int(re.search(r"pid\s+(\d+)", "".join(lines)).group(1))
        threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(12)]
        for t in threads:
            t.start()
        time.sleep(3)
        before = len(results)
        kill(server_pid)
        if not restarted.wait(120):
            serve.send_signal(signal.SIGINT)
            try:
                serve.wait(30)
            except subprocess.TimeoutExpired:
                serve.kill()
                serve.wait()
            err = serve.stderr.read() if serve.stderr else ""
            log = (tmp_path / "serve.log").read_text(errors="replace") if (tmp_path / "serve.log").exists() else ""
            pytest.fail("serve_forever did not restart the server\n--- stdout\n" + "".join(lines)
                        + "\n--- stderr\n" + err[-4000:] + "\n--- tritonserver log (end)\n" + log[-4000:])
        time.sleep(3)
        stop.set()
        for t in threads:
            t.join(150)
    finally:
        stop.set()
        serve.send_signal(signal.SIGINT)
        try:
            serve.wait(30)
        except subprocess.TimeoutExpired:
            serve.kill()
    print(f"{len(results)} sentences answered ({before} before the kill), errors: {errors[:3]}")
    assert serve.returncode == 0
    assert not errors
    assert len(results) > before  # served after the restart too
    assert all(got == want[text] for text, got in results), [r for r in results if r[1] != want[r[0]]][:3]
