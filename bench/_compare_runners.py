"""bench/compare.py's engines: how each row exports, starts and decodes, and how a scenario is timed."""


from __future__ import annotations

import itertools
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (  # noqa: E402
    MAX_CAP,
    OtherLoad,
    load_average,
    own_cpu_seconds,
    percentile,
    process_group_cpu_seconds,
    process_group_pids,
)
from _compare_setup import CT2_ROWS, MAX_SENTENCES, SLOW_ROWS, Counts, Decoder, Size  # noqa: E402

log = logging.getLogger("bench.compare")


def export_repository(size: Size, repo: Path, threads: int, precision: str = "fp32", backend: str = "") -> Path:
    """``nmtserve export`` (Python API), then the served decode's CPU threads set to ``threads`` in
    all (``served_layout``). int8: the export's quality gate runs on the demo's held-out set; the
    base size (random weights, no references) is gated against its fp32 translations with the
    gate's limit off (a random model's near-flat distributions make any precision change flip
    tokens: its drop says nothing about a trained model), and its report is kept in the JSON."""
    from nmtserve.export.pipeline import ExportOptions, export

    started = time.perf_counter()
    gate = {}
    if precision == "int8" and size.name in ("base", "student"):  # random weights
        source = repo.parent / "gate.en"
        source.write_text("\n".join(size.texts[:200]) + "\n", encoding="utf-8")
        gate = {"gate_source": source, "max_bleu_drop": 100.0}
    report = export(size.model_dir, ExportOptions(repository=repo, skip_parity=True, max_batch=MAX_SENTENCES,
                                                  max_target_len=size.counts.max_new_tokens or MAX_CAP,
                                                  precision=precision, generate_backend=backend, **gate))
    suffix = "" if precision == "fp32" else f"_{precision}"
    size.info[f"export{suffix}_s"] = round(time.perf_counter() - started, 1)
    if precision != "fp32":
        size.info[f"quality_gate{suffix}"] = {k: v for k, v in report.quality.get(precision, {}).items() if k != "worst"}
    size.info["served_threads"] = served_layout(repo, threads)
    return repo


def _param(text: str, key: str, value: int) -> str:
    """A config.pbtxt string parameter set to ``value``."""
    head = f'key: "{key}" value: {{ string_value: "'
    start = text.index(head) + len(head)
    return text[:start] + str(value) + text[text.index('"', start):]


def served_layout(repo: Path, threads: int) -> str:
    """Give the served model ``threads`` CPU threads in all, laid out as the server lays out that
    many cores (``cpu_layout``: decode loops x ONNX Runtime threads each)."""
    from nmtserve.server.triton_models import cpu_layout

    loops, per_loop = cpu_layout("inprocess", cores=threads)
    config = repo / "generate" / "config.pbtxt"
    config.write_text(_param(_param(config.read_text(), "workers", loops), "intra_op_threads", per_loop or 1))
    return f"{loops} decode loop(s) x {per_loop} intra-op thread(s)"


def precision_of(repo: Path) -> str:
    from nmtserve.runtime.spec import SPEC_FILE, ModelSpec

    return ModelSpec.load(artifacts(repo) / SPEC_FILE).precision


def artifacts(repo: Path) -> Path:
    """The folder with encoder.onnx, decoder.onnx and model.json (wherever the export puts it)."""
    from nmtserve.runtime.spec import SPEC_FILE

    found = sorted(repo.rglob(SPEC_FILE))
    if not found:
        raise FileNotFoundError(f"{repo}: no {SPEC_FILE} (exported graphs) found")
    return found[0].parent


@dataclass
class Runner:
    """One row ready to run: ``decoder(beam)`` is thread-safe (the serving scenario shares it)."""

    name: str
    what: str
    decoder: Callable[[int], Decoder]
    texts: bool = False  # items are texts (the served contract) instead of id lists
    other_load: Callable[[], OtherLoad] = OtherLoad
    extra: Callable[[], dict] = dict  # per-measurement extras (server CPU)
    thread_setup: Callable[[], object] = dict  # run by each serving client thread before the start
    serving_decoder: Callable[[int], Decoder] | None = None  # another layout for the serving scenario
    # Other thread layouts to try for bulk and latency (CTranslate2: "2x1" beside its "1x2"); the
    # better one is reported, both are in the entry.
    layouts: dict[str, Callable[[int], Decoder]] = field(default_factory=dict)


@contextmanager
def served_runner(size: Size, repo: Path, log_dir: Path, name: str = "served", early_stopping: bool = False) -> Iterator[Runner]:
    import tritonclient.grpc as grpcclient

    from nmtserve.server.launcher import ServerConfig, TritonServer

    env = {"OMP_WAIT_POLICY": os.environ["OMP_WAIT_POLICY"]} if "OMP_WAIT_POLICY" in os.environ else {}
    server = TritonServer(ServerConfig.on_free_ports(
        repo, log_file=log_dir / f"tritonserver-compare-{size.name}-{name}.log", env=env))
    started = time.perf_counter()
    server.start()
    local, clients = threading.local(), []

    def client():
        if not hasattr(local, "client"):
            local.client = grpcclient.InferenceServerClient(server.urls.grpc_address)
            clients.append(local.client)
        return local.client

    def decoder(beam: int) -> Decoder:
        def run(texts: list[str]) -> list[str]:
            inputs = [grpcclient.InferInput("TEXT", [len(texts)], "BYTES")]
            inputs[0].set_data_from_numpy(np.array([t.encode("utf-8") for t in texts], dtype=np.object_))
            outputs = [grpcclient.InferRequestedOutput("TRANSLATION")]
            options = {"BEAM_SIZE": beam, "MAX_LENGTH": size.counts.max_new_tokens}
            for name, value in options.items():
                if value is not None:
                    inputs.append(grpcclient.InferInput(name, [1], "INT32"))
                    inputs[-1].set_data_from_numpy(np.array([value], dtype=np.int32))
            if early_stopping:  # the opt-in rule (EARLY_STOPPING): stop once beam_size hypotheses finished
                inputs.append(grpcclient.InferInput("EARLY_STOPPING", [1], "BOOL"))
                inputs[-1].set_data_from_numpy(np.array([True]))
            # The outputs parameter, as the nmtserve client sends it: the server computes TRANSLATION alone.
            result = client().infer("translate", inputs, outputs=outputs, parameters={"outputs": "TRANSLATION"})
            return [t.decode("utf-8") for t in result.as_numpy("TRANSLATION")]

        return run

    cpu = {"last": 0.0}

    def server_cpu() -> dict:  # CPU seconds of tritonserver + its stubs since the previous call
        now = process_group_cpu_seconds(server.pid)
        delta, cpu["last"] = now - cpu["last"], now
        return {"server_cpu_s": round(delta, 2)}

    try:
        server.wait_until_ready(300)
        size.info["served_startup_s"] = round(time.perf_counter() - started, 1)
        size.info["served_log"] = str(server.log_path)
        cpu["last"] = process_group_cpu_seconds(server.pid)
        rule = ", EARLY_STOPPING" if early_stopping else ""
        yield Runner(name, f"tritonserver `translate` over gRPC (tritonclient), {precision_of(repo)} graphs{rule}",
                     decoder, texts=True,
                     other_load=lambda: OtherLoad(lambda: own_cpu_seconds() + process_group_cpu_seconds(server.pid),
                                                  lambda: process_group_pids(server.pid)),
                     extra=server_cpu, thread_setup=client)
    finally:
        for c in clients:
            c.close()
        server.stop()


@contextmanager
def engine_runner(size: Size, repo: Path, threads: int) -> Iterator[Runner]:
    from nmtserve.engine import EnginePool
    from nmtserve.runtime.onnxruntime import OnnxModel
    from nmtserve.runtime.spec import ModelSpec
    from nmtserve.server.triton_models import cpu_layout, running_batch

    art = artifacts(repo)
    spec = ModelSpec.load(art / "model.json")
    loops, per_loop = cpu_layout("inprocess", cores=threads)  # what the server runs
    model = OnnxModel(art / "encoder.onnx", art / "decoder.onnx", spec, threads=per_loop)
    running = running_batch("inprocess", 0, MAX_SENTENCES, cores=threads)  # the server's running batch
    engine = EnginePool(model, loops, max_sentences=running, max_beam=spec.max_beam).start()

    def decoder(beam: int) -> Decoder:
        options = size.options(beam)
        return lambda batch: [hyps[0].tokens for hyps in engine.translate(batch, options, timeout=900)]

    try:
        yield Runner("engine", f"EnginePool({loops} loops x {per_loop} threads, max_sentences={running}) "
                               "in this process, the server's layout", decoder)
    finally:
        engine.stop()


@contextmanager
def pytorch_runner(size: Size) -> Iterator[Runner]:
    from decode import torch_decoder

    yield Runner("pytorch", "nmtserve reference_decode (PyTorch eager + the shared beam search)",
                 lambda beam: torch_decoder(size.ckpt, size.options(beam)))


@contextmanager
def transformers_runner(size: Size) -> Iterator[Runner]:
    import transformers
    from _marian_base import hf_decoder

    model = transformers.MarianMTModel.from_pretrained(size.model_dir).eval()
    yield Runner("transformers", f"transformers {transformers.__version__} MarianMTModel.generate",
                 lambda beam: hf_decoder(model, beam, size.counts.max_new_tokens))


@contextmanager
def ct2_runner(size: Size, name: str, threads: int) -> Iterator[Runner]:
    import ctranslate2

    compute = CT2_ROWS[name]
    translator = ctranslate2.Translator(str(size.ct2_dir), device="cpu", compute_type=compute,
                                        intra_threads=threads, inter_threads=1)
    # Concurrent clients: as many CT2 workers as nmtserve has decode loops, the threads split
    # between them (on 2 cores 2 x 1: 2.2x CT2's own 1 x 2 layout with 64 one-sentence clients).
    workers = min(2, threads)
    parallel = ctranslate2.Translator(str(size.ct2_dir), device="cpu", compute_type=compute,
                                      intra_threads=max(1, threads // workers), inter_threads=workers)
    yield Runner(name, f"CTranslate2 {ctranslate2.__version__} {compute} (bulk and latency: the better of 1 x "
                       f"{threads} and {workers} workers x {max(1, threads // workers)} threads; serving: the "
                       "latter)",
                 lambda beam: size.ct2_decoder(translator, beam),
                 serving_decoder=lambda beam: size.ct2_decoder(parallel, beam),
                 layouts={f"{workers}x{max(1, threads // workers)}": lambda beam: size.ct2_decoder(parallel, beam)})


def run_serving(decode: Decoder, items: list, clients: int, setup: Callable[[], object]
                ) -> tuple[list, float, list[float]]:
    """``clients`` threads, each sending one sentence per request until every item is answered.

    Each thread runs ``setup`` untimed (the served row opens its gRPC channel there); then all
    start together. Returns outputs in item order, wall seconds from the common start to the
    last answer, and each request's latency.
    """
    n = len(items)
    outputs: list = [None] * n
    latency: list[float] = [0.0] * n
    counter = itertools.count()
    go = threading.Barrier(clients + 1, timeout=600)

    def client() -> None:
        try:
            setup()
        except BaseException:
            go.abort()  # the others (and the caller) stop waiting
            raise
        go.wait()
        while (i := next(counter)) < n:
            sent = time.perf_counter()
            outputs[i] = decode([items[i]])[0]
            latency[i] = time.perf_counter() - sent

    with ThreadPoolExecutor(clients, thread_name_prefix="client") as pool:
        futures = [pool.submit(client) for _ in range(clients)]
        go.wait()
        started = time.perf_counter()
        for f in futures:
            f.result()
        elapsed = time.perf_counter() - started
    return outputs, elapsed, latency


PAIRED_BLOCK = 10  # sentences a row takes in turn in the paired latency scenario


def measure_paired_latency(size: Size, runners: list[Runner], beam: int, pass_name: str) -> list[tuple[dict, list]]:
    """The latency scenario of several rows at once, in blocks of ``PAIRED_BLOCK`` sentences:
    every row (and every thread layout of a row) takes the block in turn, after one untimed
    sentence (its caches warm again, as in a run of its own), the order rotated from one block to
    the next, so the machine's drift (tens of percent within minutes here) falls on every row
    alike. One (JSON entry, outputs) per row, as ``measure`` gives for ``latency``: a row with
    several layouts reports the one with the lower p50."""
    c = size.counts
    n = min(scenario_sentences(c, r.name, "latency") for r in runners)
    decoders = []  # (row index, layout, decode)
    for i, runner in enumerate(runners):
        decoders.append((i, "default", runner.decoder(beam)))
        decoders += [(i, layout, other(beam)) for layout, other in runner.layouts.items()]
    items = [(size.texts if r.texts else size.sources)[:n] for r in runners]
    load, outputs = load_average(), {(i, layout): [] for i, layout, _ in decoders}
    seconds: dict[tuple[int, str], list[float]] = {(i, layout): [] for i, layout, _ in decoders}
    for runner in runners:
        runner.extra()
    for lo in range(0, n, PAIRED_BLOCK):
        shift = (lo // PAIRED_BLOCK) % len(decoders)
        for i, layout, decode in decoders[shift:] + decoders[:shift]:
            decode(items[i][:1])  # untimed: the first block's warm-up too, as ``decode.latencies``
            for item in items[i][lo:lo + PAIRED_BLOCK]:
                started = time.perf_counter()
                outputs[i, layout].extend(decode([item]))
                seconds[i, layout].append(time.perf_counter() - started)
    out = []
    for i, runner in enumerate(runners):
        p50 = {layout: 1000 * percentile(lat, 50) for (row, layout), lat in seconds.items() if row == i}
        best = min(p50, key=p50.__getitem__)
        lat = seconds[i, best]
        entry = {"size": size.name, "row": runner.name, "beam": beam, "scenario": "latency", "pass": pass_name,
                 "sentences": n, "load_before": load, "paired": True, "other_processes_cpu_pct": 0.0,
                 "other_processes_top": []}
        if len(p50) > 1:
            entry["layouts"] = p50
            if best != "default":
                entry["layout"] = best
        entry.update(runner.extra(), seconds=round(sum(lat), 3), sentences_per_s=n / sum(lat),
                     load_after=load_average(), p50_ms=p50[best], p90_ms=1000 * percentile(lat, 90))
        log.info("[%s] %-12s beam %d latency %-6s %4d sentences (paired): p50 %.2f ms, p90 %.2f ms",
                 size.name, runner.name, beam, pass_name, n, entry["p50_ms"], entry["p90_ms"])
        out.append((entry, outputs[i, best]))
    return out


def scenario_sentences(counts: Counts, row: str, scenario: str) -> int:
    slow = row in SLOW_ROWS
    return {"bulk": counts.slow_bulk if slow else counts.bulk, "serving": counts.serving,
            "latency": counts.slow_latency if slow else counts.latency}[scenario]


def measure(size: Size, runner: Runner, beam: int, scenario: str, pass_name: str) -> tuple[dict, list]:
    """One (row, beam, scenario) figure with its load; returns (JSON entry, outputs in sentence order)."""
    from decode import latencies, throughput

    c = size.counts
    n = scenario_sentences(c, runner.name, scenario)
    items = (size.texts if runner.texts else size.sources)[:n]
    serving = scenario == "serving" and runner.serving_decoder is not None
    decode = runner.serving_decoder(beam) if serving else runner.decoder(beam)  # type: ignore[misc]
    entry = {"size": size.name, "row": runner.name, "beam": beam, "scenario": scenario, "pass": pass_name,
             "sentences": n, "load_before": load_average()}
    runner.extra()
    others = runner.other_load().start()
    lat: list[float] = []
    if scenario == "bulk":
        outputs, seconds = throughput(decode, items, c.batch)
        entry["batch"] = c.batch
        for layout, other in runner.layouts.items():  # the better thread layout is reported
            other_outputs, other_seconds = throughput(other(beam), items, c.batch)
            entry.setdefault("layouts", {"default": n / seconds})[layout] = n / other_seconds
            if other_seconds < seconds:
                outputs, seconds, entry["layout"] = other_outputs, other_seconds, layout
    elif scenario == "serving":
        outputs, seconds, lat = run_serving(decode, items, c.clients, runner.thread_setup)
        entry["clients"] = c.clients
    else:
        outputs, lat = latencies(decode, items)
        seconds = sum(lat)
        for layout, other in runner.layouts.items():
            other_outputs, other_lat = latencies(other(beam), items)
            entry.setdefault("layouts", {"default": 1000 * percentile(lat, 50)})[layout] = 1000 * percentile(other_lat, 50)
            if percentile(other_lat, 50) < percentile(lat, 50):
                outputs, lat, seconds, entry["layout"] = other_outputs, other_lat, sum(other_lat), layout
    entry["other_processes_cpu_pct"] = round(others.stop(), 1)
    entry.update(runner.extra(), seconds=round(seconds, 3), sentences_per_s=n / seconds,
                 load_after=load_average(), other_processes_top=others.top)
    if lat:
        entry.update(p50_ms=1000 * percentile(lat, 50), p90_ms=1000 * percentile(lat, 90))
    log.info("[%s] %-12s beam %d %-7s %-6s %4d sentences: %7.2f sent/s%s (load %s; others %.0f%% CPU)",
             size.name, runner.name, beam, scenario, pass_name, n, entry["sentences_per_s"],
             f", p50 {entry['p50_ms']:.0f} ms, p90 {entry['p90_ms']:.0f} ms" if lat else "",
             entry["load_before"], entry["other_processes_cpu_pct"])
    return entry, outputs
