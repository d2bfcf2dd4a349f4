"""Fair shares: one-sentence clients while a bulk job runs, against the same clients on an idle server.

    python bench/fairness.py [--bulk 100000] [--clients 8] [--repository DIR]

Exports the demo model (unless ``--repository`` names an exported one) and starts the server.
Phase 1 (idle): ``--clients`` threads, each with its own gRPC client, send one held-out sentence
at a time for ``--seconds``. Phase 2 (bulk): one client translates ``--bulk`` sentences (the
library's batching: ``--bulk-batch`` sentences a request, ``--bulk-concurrency`` requests in
flight) while the same clients do the same again. Reports each phase's p50 / p99 latency of the
one-sentence requests and the ratio (the issue's goal: p99 under bulk <= 3x idle), the bulk
job's sentences per second, and writes ``bench/results/fairness-*.json``. Every answer is
checked against the idle phase's answer for the same sentence (a wrong answer is counted).
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import DEFAULT_CHECKPOINT, demo_server, load_test_set, machine, percentile, write_json  # noqa: E402


def _clients(address: str, sentences: list[str], clients: int, seconds: float, stop: threading.Event,
             answers: dict[str, str], wrong: list[str]) -> list[float]:
    from nmtserve.client import Translator

    latencies: list[float] = []
    lock = threading.Lock()

    def run(k: int) -> None:
        with Translator(address) as client:
            i = k
            end = time.monotonic() + seconds
            while time.monotonic() < end and not stop.is_set():
                sentence = sentences[i % len(sentences)]
                started = time.perf_counter()
                text = client.translate(sentence).text
                elapsed = time.perf_counter() - started
                with lock:
                    latencies.append(elapsed)
                    if answers.setdefault(sentence, text) != text:
                        wrong.append(sentence)
                i += clients

    threads = [threading.Thread(target=run, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bulk", type=int, default=100_000)
    parser.add_argument("--bulk-batch", type=int, default=64)
    parser.add_argument("--bulk-concurrency", type=int, default=8)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=30.0, help="the one-sentence clients' time per phase")
    parser.add_argument("--repository", type=Path)
    args = parser.parse_args()
    from nmtserve.client import Translator

    sentences, _ = load_test_set(DEFAULT_CHECKPOINT, 1000)
    bulk = [sentences[i % len(sentences)] for i in range(args.bulk)]
    answers: dict[str, str] = {}
    wrong: list[str] = []
    with demo_server(args.repository) as server:
        address = server.urls.grpc_address
        idle = _clients(address, sentences[:200], args.clients, args.seconds, threading.Event(), answers, wrong)
        stop, done = threading.Event(), {}

        def run_bulk() -> None:
            started = time.perf_counter()
            with Translator(address, batch_size=args.bulk_batch, concurrency=args.bulk_concurrency) as client:
                out = client.translate(bulk)
            done["seconds"] = time.perf_counter() - started
            done["sentences"] = len(out)

        worker = threading.Thread(target=run_bulk)
        worker.start()
        time.sleep(2.0)  # the bulk job's requests fill the engine first
        loaded = _clients(address, sentences[:200], args.clients, args.seconds, stop, answers, wrong)
        bulk_running = worker.is_alive()
        worker.join()
    result = {
        "machine": machine(), "clients": args.clients, "bulk": args.bulk, "bulk_batch": args.bulk_batch,
        "bulk_concurrency": args.bulk_concurrency, "bulk_still_running_at_the_end": bulk_running,
        "idle_p50_ms": round(1000 * percentile(idle, 50), 1), "idle_p99_ms": round(1000 * percentile(idle, 99), 1),
        "bulk_p50_ms": round(1000 * percentile(loaded, 50), 1), "bulk_p99_ms": round(1000 * percentile(loaded, 99), 1),
        "requests_idle": len(idle), "requests_under_bulk": len(loaded),
        "bulk_sentences_per_s": round(done["sentences"] / done["seconds"], 1), "wrong_answers": len(wrong),
    }
    result["p99_ratio"] = round(result["bulk_p99_ms"] / result["idle_p99_ms"], 2)
    result["p50_ratio"] = round(result["bulk_p50_ms"] / result["idle_p50_ms"], 2)
    print(result)
    print(f"written {write_json('fairness', result)}")


if __name__ == "__main__":
    main()
