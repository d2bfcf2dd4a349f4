"""The gateway's cost: the same one-sentence clients through `nmtserve gateway` (LibreTranslate's
POST /translate) and on Triton's gRPC directly.

    python bench/gateway.py [--clients 64] [--seconds 20] [--rounds 3] [--requests 300] [--repository DIR]

Exports the demo model (unless ``--repository`` names an exported one), starts tritonserver and
``nmtserve gateway`` in front of it, then:

* throughput: ``--clients`` threads, each sending one held-out sentence at a time (the next as
  soon as the answer is back), for ``--seconds``; direct and gateway rounds alternate
  ``--rounds`` times (this machine's speed drifts within minutes), the ratio is the median of
  the rounds' ratios. Direct clients are tritonclient gRPC clients (as bench/load.py), gateway
  clients keep-alive HTTP/1.1 connections;
* latency: one client, ``--requests`` sentences, alternating direct and gateway request by
  request; the p50 the gateway adds is its p50 minus the direct p50.

Every answer is checked against the sentence's reference (test.fr: the demo model's exact match
is 100%); a wrong answer or an error is counted, never hidden. The gateway's own CPU time per
request is reported beside it. Prints one table and writes ``bench/results/gateway-*.json``.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # noqa: E402
    DEFAULT_CHECKPOINT,
    demo_server,
    load_average,
    load_test_set,
    machine,
    markdown_table,
    percentile,
    write_json,
)

Send = Callable[[str], str]


def direct_client(address: str) -> tuple[Send, Callable[[], None]]:
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(address)

    def send(text: str) -> str:
        tensor = grpcclient.InferInput("TEXT", [1], "BYTES")
        tensor.set_data_from_numpy(np.array([text.encode()], dtype=np.object_))
        return client.infer("translate", [tensor], client_timeout=60).as_numpy("TRANSLATION")[0].decode()

    return send, client.close


def gateway_client(port: int) -> tuple[Send, Callable[[], None]]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    headers = {"Content-Type": "application/json"}

    def send(text: str) -> str:
        connection.request("POST", "/translate", json.dumps({"q": text, "source": "en", "target": "fr"}), headers)
        response = connection.getresponse()
        body = response.read()
        if response.status != 200:
            raise RuntimeError(f"{response.status}: {body[:200]!r}")
        return json.loads(body)["translatedText"]

    return send, connection.close


def throughput(make: Callable[[], tuple[Send, Callable[[], None]]], texts: list[str], references: list[str],
               clients: int, seconds: float) -> dict:
    answered, wrong, errors = [0], [0], [0]
    lock = threading.Lock()
    start = threading.Barrier(clients + 1)
    end_at = [0.0]

    def run(i: int) -> None:
        send, close = make()
        k, mine, bad, failed = (i * 7919) % len(texts), 0, 0, 0
        start.wait()
        while time.monotonic() < end_at[0]:
            try:
                bad += send(texts[k]) != references[k]
                mine += 1
            except Exception:  # noqa: BLE001 - counted, and shown in the table
                failed += 1
                time.sleep(0.1)
            k = (k + 1) % len(texts)
        close()
        with lock:
            answered[0] += mine
            wrong[0] += bad
            errors[0] += failed

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(clients)]
    for t in threads:
        t.start()
    end_at[0] = time.monotonic() + seconds
    started = time.monotonic()
    start.wait()
    for t in threads:
        t.join(120)
    elapsed = time.monotonic() - started
    return {"answers_per_s": answered[0] / elapsed, "answered": answered[0], "wrong": wrong[0], "errors": errors[0]}


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_for(port: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            connection.request("GET", "/languages")
            if connection.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"the gateway did not answer on port {port} in {timeout} s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=20.0, help="per round and side")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=300, help="one-client requests per side (latency)")
    parser.add_argument("--sentences", type=int, default=200, help="held-out sentences cycled through")
    parser.add_argument("--repository", type=Path, default=None, help="an exported repository (default: export the demo)")
    args = parser.parse_args(argv)

    from nmtserve.server.launcher import free_port

    texts, references = load_test_set(DEFAULT_CHECKPOINT, args.sentences)
    with demo_server(args.repository) as server:
        port = free_port()
        gateway = subprocess.Popen([sys.executable, "-m", "nmtserve.cli", "gateway", "--url",
                                    server.urls.grpc_address, "--port", str(port)])
        try:
            wait_for(port)
            load_before = load_average()
            result = measure(args, server.urls.grpc_address, port, gateway.pid, texts, references)
        finally:
            gateway.terminate()
            gateway.wait(15)
    result.update(machine=machine(), load_before=load_before, load_after=load_average(), args=vars(args) | {
        "repository": str(args.repository) if args.repository else None})
    path = write_json("gateway", result)
    print(f"written {path}")
    bad = sum(r["wrong"] + r["errors"] for side in ("direct", "gateway") for r in result["rounds"][side])
    return 0 if bad == 0 else 1


def measure(args: argparse.Namespace, grpc_address: str, port: int, gateway_pid: int, texts: list[str],
            references: list[str]) -> dict:
    make_direct = lambda: direct_client(grpc_address)  # noqa: E731
    make_gateway = lambda: gateway_client(port)  # noqa: E731
    # Warm both paths (connections, the detector, Triton's first batches).
    throughput(make_direct, texts, references, args.clients, 2)
    throughput(make_gateway, texts, references, args.clients, 2)

    rounds: dict[str, list[dict]] = {"direct": [], "gateway": []}
    for r in range(args.rounds):
        print(f"round {r + 1}/{args.rounds}: {args.clients} clients x {args.seconds:.0f} s, each side ...",
              file=sys.stderr)
        rounds["direct"].append(throughput(make_direct, texts, references, args.clients, args.seconds))
        cpu = cpu_seconds(gateway_pid)
        one = throughput(make_gateway, texts, references, args.clients, args.seconds)
        one["gateway_cpu_ms_per_request"] = 1000 * (cpu_seconds(gateway_pid) - cpu) / max(1, one["answered"])
        rounds["gateway"].append(one)
    ratios = [g["answers_per_s"] / d["answers_per_s"] for d, g in zip(rounds["direct"], rounds["gateway"], strict=True)]

    print(f"latency: one client, {args.requests} requests each side, alternating ...", file=sys.stderr)
    send_direct, close_direct = direct_client(grpc_address)
    send_gateway, close_gateway = gateway_client(port)
    latency: dict[str, list[float]] = {"direct": [], "gateway": []}
    wrong = 0
    for i in range(args.requests):
        k = i % len(texts)
        for side, send in (("direct", send_direct), ("gateway", send_gateway)):
            t = time.perf_counter()
            wrong += send(texts[k]) != references[k]
            latency[side].append(1000 * (time.perf_counter() - t))
    close_direct()
    close_gateway()
    p50 = {side: percentile(v, 50) for side, v in latency.items()}
    p90 = {side: percentile(v, 90) for side, v in latency.items()}

    rows = [[side, f"{statistics.median(r['answers_per_s'] for r in rounds[side]):.1f}",
             " / ".join(f"{r['answers_per_s']:.1f}" for r in rounds[side]),
             sum(r["wrong"] for r in rounds[side]), sum(r["errors"] for r in rounds[side]),
             f"{p50[side]:.1f}", f"{p90[side]:.1f}"] for side in ("direct", "gateway")]
    print(markdown_table(["path", "answers/s (median)", "per round", "wrong", "errors", "p50 ms (1 client)",
                          "p90 ms"], rows))
    cpu_ms = statistics.median(r["gateway_cpu_ms_per_request"] for r in rounds["gateway"])
    print(f"\nthroughput ratio gateway/direct: {statistics.median(ratios):.3f} (rounds: "
          f"{', '.join(f'{x:.3f}' for x in ratios)}); p50 added by the gateway: {p50['gateway'] - p50['direct']:.2f} ms; "
          f"gateway CPU per request: {cpu_ms:.2f} ms; one-client answers wrong: {wrong}")
    return {"rounds": rounds, "ratios": ratios, "ratio_median": statistics.median(ratios),
            "p50_ms": p50, "p90_ms": p90, "p50_added_ms": p50["gateway"] - p50["direct"],
            "gateway_cpu_ms_per_request": cpu_ms, "latency_wrong": wrong}


if __name__ == "__main__":
    sys.exit(main())
