"""Load: many concurrent one-sentence clients against the real tritonserver, every answer checked.

    python bench/load.py [--clients 256] [--seconds 120] [--repository DIR]

Exports the demo model (unless ``--repository`` names an exported one), starts the server, and
runs ``--clients`` threads, each with its own gRPC client, each sending one held-out sentence at
a time (the next as soon as the answer is back) until ``--seconds`` are over (a bounded loop).
Every answer is compared with the PyTorch reference translation of its sentence (a wrong or
swapped answer is counted, never hidden); errors are counted by status. The server's memory
(RSS of tritonserver and its stub processes) is sampled every second. Prints one table and
writes ``bench/results/load-*.json``. ``tests/test_load.py`` runs a short version in CI.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # noqa: E402
    DEFAULT_CHECKPOINT,
    demo_server,
    load_average,
    machine,
    markdown_table,
    percentile,
    process_group_pids,
    write_json,
)


@dataclasses.dataclass
class LoadResult:
    clients: int
    seconds: float
    answered: int = 0
    wrong: int = 0
    errors: Counter = dataclasses.field(default_factory=Counter)
    latencies_ms: list[float] = dataclasses.field(default_factory=list)
    rss_mb: list[float] = dataclasses.field(default_factory=list)  # one sample a second
    server_alive: bool = True

    def summary(self) -> dict:
        rss = self.rss_mb or [float("nan")]
        return {
            "clients": self.clients, "seconds": round(self.seconds, 1), "answered": self.answered,
            "answers_per_s": round(self.answered / self.seconds, 1), "wrong": self.wrong,
            "errors": dict(self.errors), "p50_ms": round(percentile(self.latencies_ms, 50), 1),
            "p99_ms": round(percentile(self.latencies_ms, 99), 1), "rss_mb_start": round(rss[0], 1),
            "rss_mb_peak": round(max(rss), 1), "rss_mb_end": round(rss[-1], 1), "server_alive": self.server_alive,
        }


def server_rss_mb(pid: int) -> float:
    """RSS of the server's process group (tritonserver and its Python stubs), MiB."""
    total = 0
    for p in process_group_pids(pid):
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total / 1024


def run_load(server, texts: list[str], references: list[str], clients: int, seconds: float,
             timeout: float = 60.0) -> LoadResult:
    """``clients`` threads of one-sentence requests for ``seconds`` against a started ``server``
    (nmtserve.server.launcher.TritonServer); every answer checked against ``references``."""
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    result = LoadResult(clients=clients, seconds=seconds)
    lock = threading.Lock()
    start = threading.Barrier(clients + 1)
    end_at = [0.0]

    def client(i: int) -> None:
        c = grpcclient.InferenceServerClient(server.urls.grpc_address)
        k = (i * 7919) % len(texts)
        start.wait()
        mine = []
        wrong, errors = 0, Counter()
        while time.monotonic() < end_at[0]:
            text = grpcclient.InferInput("TEXT", [1], "BYTES")
            text.set_data_from_numpy(np.array([texts[k].encode()], dtype=np.object_))
            t = time.perf_counter()
            try:
                got = c.infer("translate", [text], client_timeout=timeout).as_numpy("TRANSLATION")[0].decode()
                mine.append(1000 * (time.perf_counter() - t))
                wrong += got != references[k]
            except InferenceServerException as exc:
                errors[str(exc.status())] += 1
                time.sleep(0.1)
            k = (k + 1) % len(texts)
        c.close()
        with lock:
            result.latencies_ms += mine
            result.answered += len(mine)
            result.wrong += wrong
            result.errors.update(errors)

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
    for t in threads:
        t.start()
    result.rss_mb.append(server_rss_mb(server.pid))
    end_at[0] = time.monotonic() + seconds
    started = time.monotonic()
    start.wait()
    while time.monotonic() < end_at[0]:
        time.sleep(1.0)
        result.rss_mb.append(server_rss_mb(server.pid))
    for t in threads:
        t.join(timeout + 10)
    result.seconds = time.monotonic() - started
    result.rss_mb.append(server_rss_mb(server.pid))
    result.server_alive = server.is_running()
    return result


def references_for(texts: list[str]) -> list[str]:
    from _common import search_options

    from nmtserve.model.checkpoint import load_checkpoint
    from nmtserve.model.reference import translate

    ckpt = load_checkpoint(DEFAULT_CHECKPOINT)
    options = dataclasses.replace(search_options(), max_length=128)
    return [n[0][0] for n in translate(ckpt.model, ckpt.tokenizer, texts, options)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=256)
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--sentences", type=int, default=200, help="held-out sentences cycled through")
    parser.add_argument("--repository", type=Path, default=None, help="an exported repository (default: export the demo)")
    args = parser.parse_args(argv)

    texts = (DEFAULT_CHECKPOINT / "test.en").read_text(encoding="utf-8").splitlines()[: args.sentences]
    print(f"reference translations of {len(texts)} sentences ...", file=sys.stderr)
    references = references_for(texts)
    with demo_server(args.repository) as server:
        load_before = load_average()
        print(f"{args.clients} clients for {args.seconds:.0f} s ...", file=sys.stderr)
        result = run_load(server, texts, references, args.clients, args.seconds)
    summary = result.summary()
    print(markdown_table(list(summary), [list(summary.values())]))
    path = write_json("load", {"machine": machine(), "load_before": load_before, "summary": summary})
    print(f"written {path}")
    ok = result.server_alive and not result.wrong and result.answered > 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
