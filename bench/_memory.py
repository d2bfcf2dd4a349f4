"""What a process tree holds: RSS, PSS and peak memory from /proc, sampled under load, and a
folder's size on disk."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path


def disk_usage(path: Path) -> dict:
    """Bytes on disk (``du``: allocated blocks) and apparent bytes of a directory, and its largest files."""
    files = [p for p in path.rglob("*") if p.is_file() and not p.is_symlink()]
    stats = [(p, p.stat()) for p in files]
    largest = sorted(stats, key=lambda ps: ps[1].st_size, reverse=True)[:6]
    return {"bytes_on_disk": sum(s.st_blocks * 512 for _, s in stats), "bytes": sum(s.st_size for _, s in stats),
            "largest": {str(p.relative_to(path)): s.st_size for p, s in largest}}


def _kb(path: str, key: str) -> int:
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(key):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def rss_mb(pids: set[int]) -> float:
    return sum(_kb(f"/proc/{pid}/status", "VmRSS:") for pid in pids) / 1024


def pss_mb(pids: set[int]) -> float:
    return sum(_kb(f"/proc/{pid}/smaps_rollup", "Pss:") for pid in pids) / 1024


def hwm_mb(pids: set[int]) -> float:
    """Sum of each process's own peak RSS (VmHWM, loading included): a bound on the tree's peak."""
    return sum(_kb(f"/proc/{pid}/status", "VmHWM:") for pid in pids) / 1024


def breakdown(pids: set[int]) -> dict[str, int]:
    """RSS (MB) per process, named by command (a Triton Python stub by its model)."""
    out = {}
    for pid in sorted(pids):
        try:
            name = Path(f"/proc/{pid}/comm").read_text().strip()
            args = Path(f"/proc/{pid}/cmdline").read_text().split("\0")
        except OSError:
            continue
        if name.startswith("triton_python") and len(args) > 1:
            name = f"stub {Path(args[1]).parent.parent.name}"  # .../<model>/1/model.py
        out[f"{name} [{pid}]"] = round(_kb(f"/proc/{pid}/status", "VmRSS:") / 1024)
    return out


class MemorySampler:
    """Peak summed VmRSS (every ``interval`` s) and PSS (every 4th sample) of ``pids()`` meanwhile;
    ``at_peak``: each process's RSS (``breakdown``) in the sample where the sum peaked."""

    def __init__(self, pids: Callable[[], set[int]], interval: float = 0.5):
        self.pids, self.interval = pids, interval
        self.rss = self.pss = 0.0
        self.at_peak: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="memory-sampler", daemon=True)

    def sample(self, with_pss: bool = True) -> None:
        pids = self.pids()
        now = rss_mb(pids)
        if now > self.rss:
            self.rss, self.at_peak = now, breakdown(pids)
        if with_pss:
            self.pss = max(self.pss, pss_mb(pids))

    def _run(self) -> None:
        i = 0
        while not self._stop.wait(self.interval):
            i += 1
            self.sample(with_pss=i % 4 == 0)

    def __enter__(self) -> MemorySampler:
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()
