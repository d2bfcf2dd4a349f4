"""Serving throughput on the real tritonserver: in-process ONNX Runtime vs BLS step backend.

    python bench/serve.py [--checkpoint models/en-fr-numbers] [--duration 20]

For each step backend (``inprocess``, the default, then ``bls``) it exports the checkpoint
into a temporary repository (``--max-target-len 200``, parity check skipped: every response is
checked against the PyTorch reference instead), starts tritonserver, records start-up time
(launch -> /v2/health/ready) and the first request's latency, then for each load row runs
``clients`` concurrent gRPC clients (``tritonclient.grpc.aio``, one channel each) sending
``translate`` requests of ``per_request`` held-out sentences back to back for ``--duration``
seconds. Every TRANSLATION is compared with the PyTorch reference decode of that sentence
(mismatches counted). The clients run in this process, on the same cores as the server.

Results go to bench/results/serve-*.json; a table is printed.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import logging
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (  # noqa: E402
    DEFAULT_CHECKPOINT,
    MAX_CAP,
    RESULTS,
    OtherLoad,
    chunks,
    load_average,
    load_test_set,
    machine,
    markdown_table,
    own_cpu_seconds,
    percentile,
    process_group_cpu_seconds,
    process_group_pids,
    reference_cache_path,
    search_options,
    versions,
    write_json,
)

log = logging.getLogger("bench.serve")


def reference_translations(checkpoint: Path, texts: list[str]) -> list[str]:
    """PyTorch reference translations; reuses the cache bench/decode.py writes."""
    cache = reference_cache_path(checkpoint, len(texts))
    if cache.is_file():
        data = json.loads(cache.read_text())
        if data["texts"] == texts:
            log.info("reference translations from %s", cache)
            return data["translations"]
    import torch

    from nmtserve.model.checkpoint import load_checkpoint
    from nmtserve.model.reference import reference_decode

    torch.set_num_threads(2)
    ckpt = load_checkpoint(checkpoint)
    log.info("computing the PyTorch reference for %d sentences", len(texts))
    sources = [ckpt.tokenizer.encode(t) for t in texts]
    tokens = []
    for chunk in chunks(sources, 32):
        tokens.extend(h[0].tokens for h in reference_decode(ckpt.model, chunk, search_options()))
    translations = [ckpt.tokenizer.decode(t) for t in tokens]
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps({"texts": texts, "tokens": tokens, "translations": translations}))
    return translations


def _request(texts: list[str]):
    import tritonclient.grpc as grpcclient

    text = grpcclient.InferInput("TEXT", [len(texts)], "BYTES")
    text.set_data_from_numpy(np.array([t.encode("utf-8") for t in texts], dtype=np.object_))
    return [text], [grpcclient.InferRequestedOutput("TRANSLATION")]


async def run_load(address: str, texts: list[str], expected: list[str], clients: int, per_request: int,
                   duration: float) -> dict:
    """``clients`` workers send requests of ``per_request`` consecutive sentences until ``duration``."""
    from tritonclient.grpc.aio import InferenceServerClient

    n = len(texts)
    counter = itertools.count()
    latencies: list[float] = []
    stats = {"requests": 0, "sentences": 0, "mismatches": 0, "errors": 0}
    first_errors: list[str] = []
    mismatch_examples: list[dict] = []

    async def worker(client) -> None:
        while time.perf_counter() < deadline:
            start = (next(counter) * per_request) % n
            idx = [(start + j) % n for j in range(per_request)]
            inputs, outputs = _request([texts[i] for i in idx])
            sent = time.perf_counter()
            try:
                result = await client.infer("translate", inputs, outputs=outputs)
            except Exception as exc:  # count and go on: a benchmark reports failures
                stats["errors"] += 1
                if len(first_errors) < 3:
                    first_errors.append(str(exc)[:300])
                continue
            latencies.append(time.perf_counter() - sent)
            got = [t.decode("utf-8") for t in result.as_numpy("TRANSLATION")]
            stats["requests"] += 1
            stats["sentences"] += len(idx)
            for i, g in zip(idx, got, strict=True):
                if g != expected[i]:
                    stats["mismatches"] += 1
                    if len(mismatch_examples) < 5:
                        mismatch_examples.append({"source": texts[i], "served": g, "reference": expected[i]})

    client_objs = [InferenceServerClient(address) for _ in range(clients)]
    try:
        cpu0 = time.process_time()
        started = time.perf_counter()
        deadline = started + duration
        await asyncio.gather(*(worker(c) for c in client_objs))
        elapsed = time.perf_counter() - started
        client_cpu = time.process_time() - cpu0
    finally:
        for c in client_objs:
            await c.close()
    return {
        **stats, "seconds": elapsed,
        "requests_per_s": stats["requests"] / elapsed, "sentences_per_s": stats["sentences"] / elapsed,
        "p50_ms": 1000 * percentile(latencies, 50), "p90_ms": 1000 * percentile(latencies, 90),
        "p99_ms": 1000 * percentile(latencies, 99), "client_cpu_s": client_cpu,
        "first_errors": first_errors, "mismatch_examples": mismatch_examples,
    }


def first_request(address: str, text: str, expected: str) -> tuple[float, bool]:
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(address)
    try:
        inputs, outputs = _request([text])
        t = time.perf_counter()
        result = client.infer("translate", inputs, outputs=outputs)
        seconds = time.perf_counter() - t
    finally:
        client.close()
    return seconds, result.as_numpy("TRANSLATION")[0].decode("utf-8") == expected


def front_instances(repo: Path) -> int:
    """The instance count of the `generate` front, as written in its config.pbtxt."""
    text = (repo / "generate" / "config.pbtxt").read_text()
    match = re.search(r"instance_group \[ \{ count: (\d+)", text)
    if not match:
        raise RuntimeError(f"{repo}/generate/config.pbtxt: no instance_group count")
    return int(match.group(1))


def set_step_backend(repo: Path, backend: str) -> None:
    """Rewrite generate's ``step_backend`` parameter (the server reads it at load)."""
    config = repo / "generate" / "config.pbtxt"
    text = config.read_text()
    for current in ("inprocess", "bls"):
        old = f'key: "step_backend" value: {{ string_value: "{current}" }}'
        if old in text:
            config.write_text(text.replace(old, f'key: "step_backend" value: {{ string_value: "{backend}" }}'))
            return
    raise RuntimeError(f"{config}: no step_backend parameter to rewrite")


def bench_backend(repo: Path, backend: str, texts: list[str], expected: list[str], loads: list[tuple[int, int]],
                  duration: float, log_dir: Path) -> dict:
    from nmtserve.server.launcher import ServerConfig, TritonServer, free_ports

    set_step_backend(repo, backend)
    http, grpc, metrics = free_ports(3)
    server = TritonServer(ServerConfig(model_repository=repo, http_port=http, grpc_port=grpc, metrics_port=metrics,
                                       log_file=log_dir / f"tritonserver-{backend}.log"))
    out: dict = {"step_backend": backend, "load_before_start": load_average()}
    launched = time.perf_counter()
    server.start()
    try:
        server.wait_until_ready(180)
        out["startup_s"] = time.perf_counter() - launched
        log.info("%s: ready after %.1f s", backend, out["startup_s"])
        address = server.urls.grpc_address
        # The first request (lazy initialisation anywhere on the path) and a short warm-up.
        out["first_request_s"], out["first_request_ok"] = first_request(address, texts[0], expected[0])
        asyncio.run(run_load(address, texts, expected, 8, 1, 2.0))
        out["rows"] = []
        for clients, per_request in loads:
            load_before = load_average()
            cpu0 = process_group_cpu_seconds(server.pid)
            others = OtherLoad(lambda: own_cpu_seconds() + process_group_cpu_seconds(server.pid),
                               lambda: process_group_pids(server.pid)).start()
            row = asyncio.run(run_load(address, texts, expected, clients, per_request, duration))
            row["other_processes_cpu_pct"] = others.stop()
            row["other_processes_top"] = others.top
            row["server_cpu_s"] = process_group_cpu_seconds(server.pid) - cpu0
            row.update(clients=clients, per_request=per_request, load_before=load_before, load_after=load_average())
            log.info("%s %d clients x %d sentences: %.1f req/s, %.1f sent/s, p50 %.0f ms, mismatches %d, errors %d "
                     "(load %s; other processes %.0f%% CPU %s)", backend, clients, per_request, row["requests_per_s"],
                     row["sentences_per_s"], row["p50_ms"], row["mismatches"], row["errors"], row["load_after"],
                     row["other_processes_cpu_pct"], others.top)
            out["rows"].append(row)
    finally:
        server.stop()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--checkpoint", type=Path, default=DEFAULT_CHECKPOINT)
    ap.add_argument("--sentences", type=int, default=1000, help="distinct held-out sentences cycled through")
    ap.add_argument("--duration", type=float, default=20.0, help="seconds per load row")
    ap.add_argument("--loads", default="1x1,32x1,32x8", help="CLIENTSxSENTENCES_PER_REQUEST rows")
    ap.add_argument("--backends", default="inprocess,bls")
    ap.add_argument("--front-instances", type=int, default=None,
                    help="instances of the non-decoupled `generate` front (default: the export's)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    loads = [tuple(int(x) for x in item.split("x")) for item in args.loads.split(",")]

    from nmtserve.export.pipeline import ExportOptions, export

    info = {"machine": machine(), "versions": versions("nvidia-pytriton", "onnxruntime", "tritonclient"),
            "checkpoint": str(args.checkpoint), "sentences": args.sentences, "duration_s": args.duration,
            "front_instances": args.front_instances,
            "options": {"beam": 4, "length_penalty": 1.0, "max_length": f"min(2*src+10, {MAX_CAP})"}}
    texts, _ = load_test_set(args.checkpoint, args.sentences)
    expected = reference_translations(args.checkpoint, texts)
    log_dir = RESULTS / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="nmtserve-bench-serve-"))
    try:
        repo = tmp / "model_repository"
        t = time.perf_counter()
        extra = {} if args.front_instances is None else {"front_instances": args.front_instances}
        export(args.checkpoint, ExportOptions(repository=repo, skip_parity=True, max_target_len=MAX_CAP,
                                              max_source_len=MAX_CAP, **extra))
        info["export_s"] = time.perf_counter() - t
        info["front_instances"] = front_instances(repo)
        info["backends"] = [bench_backend(repo, b, texts, expected, loads, args.duration, log_dir)
                            for b in args.backends.split(",")]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    info["machine"]["load_average_end"] = load_average()
    # Non-default experiments get their own name, so serve-latest.json stays the standard run.
    tag = "" if (args.front_instances, args.backends, args.loads) == (None, "inprocess,bls", "1x1,32x1,32x8") else "-custom"
    path = write_json("serve" + tag, info)

    rows = []
    for b in info["backends"]:
        for r in b["rows"]:
            rows.append([b["step_backend"], f"{r['clients']} x {r['per_request']}", r["requests_per_s"],
                         r["sentences_per_s"], r["p50_ms"], r["p90_ms"], f"{r['server_cpu_s']:.1f} / {r['client_cpu_s']:.1f}",
                         1000 * r["server_cpu_s"] / max(1, r["sentences"]),
                         f"{r['mismatches']} / {r['sentences']}", r["errors"], r["load_before"],
                         f"{r['other_processes_cpu_pct']:.0f}%"])
    m = info["machine"]
    print(f"\n{args.checkpoint}, beam 4; {m['nproc']} CPUs ({m['cpu']}), {m['date_utc']} UTC, "
          f"load {m['load_average_1_5_15']} -> {m['load_average_end']}; {args.duration:.0f} s per row, "
          f"generate front instances {info['front_instances']}")
    print(markdown_table(["step backend", "startup s", "first request s"],
                         [[b["step_backend"], b["startup_s"], b["first_request_s"]] for b in info["backends"]]))
    print()
    print(markdown_table(["step backend", "clients x sent/req", "req/s", "sent/s", "p50 ms", "p90 ms",
                          "CPU s server / client", "server CPU ms/sent", "mismatches", "errors", "load before",
                          "others' CPU"], rows))
    print(f"\nwritten {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
