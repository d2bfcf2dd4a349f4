"""Shared by bench/decode.py and bench/serve.py: sentences, search options, machine facts."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

from nmtserve.decoding.search import SearchOptions

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CHECKPOINT = ROOT / "models" / "en-fr-numbers"
RESULTS = ROOT / "bench" / "results"

# The serving defaults: beam 4, length penalty 1, max length 2 * source tokens + 10 (source
# tokens include EOS), capped at 200 (what `nmtserve evaluate` uses; serve.py exports with
# --max-target-len 200 so the server's cap is the same).
BEAM, LENGTH_PENALTY, MAX_A, MAX_B, MAX_CAP = 4, 1.0, 2.0, 10, 200


def search_options() -> SearchOptions:
    return SearchOptions(beam_size=BEAM, length_penalty=LENGTH_PENALTY, max_length=MAX_CAP,
                         max_length_a=MAX_A, max_length_b=MAX_B)


def load_test_set(checkpoint: Path, n: int) -> tuple[list[str], list[str]]:
    """The first n held-out sentences (test.en) and their references (test.fr)."""
    src = (checkpoint / "test.en").read_text(encoding="utf-8").splitlines()[:n]
    ref = (checkpoint / "test.fr").read_text(encoding="utf-8").splitlines()[:n]
    if len(src) < n:
        raise SystemExit(f"{checkpoint}/test.en has only {len(src)} sentences, {n} requested")
    return src, ref


def chunks(items: list, size: int) -> list[list]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


_TICKS = os.sysconf("SC_CLK_TCK")


def busy_cpu_seconds() -> float:
    """CPU seconds spent busy by the whole machine since boot (all cores, /proc/stat)."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[:8])
    return (user + nice + system + irq + softirq + steal) / _TICKS


def own_cpu_seconds() -> float:
    """CPU seconds of this process (all threads) and its waited-for children."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def proc_stats():
    """(pid, command name, process group, utime + stime seconds) of every live process."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            text = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        name = text[text.index("(") + 1 : text.rindex(")")]
        fields = text[text.rindex(")") + 2 :].split()  # fields[0] is state; [2] pgrp; [11], [12] times
        yield int(entry), name, int(fields[2]), (int(fields[11]) + int(fields[12])) / _TICKS


def process_cpu_seconds() -> dict[int, tuple[float, str]]:
    """pid -> (utime + stime in seconds, command name) of every live process."""
    return {pid: (cpu, name) for pid, name, _, cpu in proc_stats()}


def process_group_cpu_seconds(pgid: int) -> float:
    """utime + stime of every live process in a process group (tritonserver and its stubs)."""
    return sum(cpu for _, _, group, cpu in proc_stats() if group == pgid)


def process_group_pids(pgid: int) -> set[int]:
    return {pid for pid, _, group, _ in proc_stats() if group == pgid}


class OtherLoad:
    """Share of the machine's CPU used by *other* processes between start() and stop().

    ``own`` returns the CPU seconds of what is being measured (this process by default);
    ``top`` names the other processes that used the most CPU meanwhile (those that started
    and exited in between only show in the total).
    """

    def __init__(self, own=own_cpu_seconds, exclude_pids=lambda: set()):
        self.own, self.exclude_pids = own, exclude_pids
        self.top: list[str] = []

    def start(self) -> OtherLoad:
        self.procs0 = process_cpu_seconds()
        self.t0, self.busy0, self.own0 = time.perf_counter(), busy_cpu_seconds(), self.own()
        return self

    def stop(self) -> float:
        wall = time.perf_counter() - self.t0
        others = (busy_cpu_seconds() - self.busy0) - (self.own() - self.own0)
        skip = {os.getpid(), *self.exclude_pids()}
        deltas = []
        for pid, (cpu, name) in process_cpu_seconds().items():
            before = self.procs0.get(pid, (0.0, name))[0]
            if pid not in skip and cpu - before >= 0.5:
                deltas.append((cpu - before, f"{name}[{pid}] {cpu - before:.1f}s"))
        self.top = [d for _, d in sorted(deltas, reverse=True)[:3]]
        return max(0.0, 100.0 * others / (wall * (os.cpu_count() or 1)))


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def versions(*packages: str) -> dict[str, str]:
    out = {}
    for p in packages:
        try:
            out[p] = metadata.version(p)
        except metadata.PackageNotFoundError:
            out[p] = "not installed"
    return out


def machine() -> dict:
    return {
        "date_utc": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S"),
        "nproc": os.cpu_count(),
        "cpu": cpu_model(),
        "load_average_1_5_15": load_average(),
        "python": platform.python_version(),
    }


def checkpoint_id(checkpoint: Path) -> str:
    """sha256 (first 12 hex) of the weights: ties results and caches to one checkpoint."""
    h = hashlib.sha256()
    with (checkpoint / "model.safetensors").open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()[:12]


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def write_json(name: str, data: dict) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    path = RESULTS / f"{name}-{stamp}.json"
    path.write_text(json.dumps(data, indent=2) + "\n")
    (RESULTS / f"{name}-latest.json").write_text(json.dumps(data, indent=2) + "\n")
    return path


def reference_cache_path(checkpoint: Path, n: int) -> Path:
    return RESULTS / f"reference-{checkpoint_id(checkpoint)}-{n}-b{BEAM}-cap{MAX_CAP}.json"


def markdown_table(header: list[str], rows: list[list]) -> str:
    def fmt(x) -> str:
        if isinstance(x, float):
            return f"{x:.3g}" if abs(x) < 10 else f"{x:.1f}"
        return str(x)

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(fmt(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


@contextmanager
def demo_server(repository: Path | None) -> Iterator:
    """A running tritonserver (ready) on ``repository``, or on the demo model exported into a
    temporary one when it is None (no parity check: the benches check the answers)."""
    from nmtserve.export.pipeline import ExportOptions, export
    from nmtserve.server.launcher import ServerConfig, TritonServer

    with tempfile.TemporaryDirectory(prefix="nmtserve-bench-") as tmp:
        if repository is None:
            repository = Path(tmp) / "model_repository"
            export(DEFAULT_CHECKPOINT, ExportOptions(repository=repository, skip_parity=True, max_target_len=128))
        with TritonServer(ServerConfig.on_free_ports(repository)) as server:
            server.wait_until_ready(120)
            yield server
