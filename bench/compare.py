"""nmtserve against PyTorch, transformers and CTranslate2 in one run: same machine, same weights,
same sentences, the same thread count everywhere (``--threads``, default 2).

    python bench/compare.py [--sizes demo,base] [--beams 4,1] [--rows ...] [--quick]

Rows (engines):

* ``served``        nmtserve on the real ``tritonserver`` (``nmtserve.server.launcher.TritonServer``),
  model ``translate`` over gRPC with the stock ``tritonclient`` (one sync client per client
  thread); the repository is exported here (``nmtserve.export.pipeline.export``, parity check
  skipped: outputs are checked below); the server's decode gets ``--threads`` threads in all
  (its ``workers`` x ``intra_op_threads`` parameters: 2 decode loops x 1 thread for 2);
* ``served-int8``   the same, on a repository exported with ``--precision int8`` (weights of both
  graphs in int8, ``nmtserve.export.quantize``; the export's quality gate report is in the JSON's
  size info);
* ``engine``        the in-process in-flight engine on the same exported graphs, laid out as
  the server lays out ``--threads`` cores (``EnginePool``: 2 decode loops x threads // 2
  ONNX Runtime threads over one ``OnnxModel``, 64 running sentences in all);
* ``pytorch``       ``nmtserve.model.reference.reference_decode`` (PyTorch eager);
* ``transformers``  ``MarianMTModel.generate`` (``early_stopping=False``, pad banned, no forced
  EOS): base size only. The demo checkpoint has no Marian form (the paper's interleaved sin/cos
  position table; Marian's is [sin | cos]) and nmtserve has no nmtserve -> Marian exporter;
* ``ct2``, ``ct2-int8``  CTranslate2 ``Translator`` (``intra_threads`` = ``--threads``,
  ``inter_threads=1``), fp32 and int8 (weights quantized at load). Demo: converted with
  ``bench/decode.py``'s ``convert_to_ctranslate2``; base: CTranslate2's own
  ``TransformersConverter`` on the Marian directory. CT2 stops a sentence once it has K finished
  hypotheses (transformers' ``early_stopping=True``), which does less work on the demo model.

Scenarios (columns), each for every beam of ``--beams``:

* ``bulk``     sentences in requests (batches) of ``batch``, one request at a time, after a
  one-request warm-up: sentences/s and generated tokens/s (best hypothesis, EOS included);
* ``serving``  ``clients`` concurrent clients, one sentence per request, each client sending
  its next sentence as soon as its answer is back, until every sentence is answered:
  sentences/s (first send -> last answer) and p50/p90 request latency. ``served``: a thread per
  client with its own gRPC client; ``engine``: a thread per client calling
  ``EnginePool.translate``; CTranslate2: a thread per client calling ``translate_batch``
  with its one sentence (CT2 does not batch across calls), on a translator with as many
  workers as nmtserve has decode loops (``inter_threads=2, intra_threads=threads // 2``: on 2
  cores 2.2x its ``1 x 2`` layout, so that layout would flatter nmtserve). Not measured for ``pytorch`` and
  ``transformers`` (no cross-request batching: it would be the latency scenario, serialized);
* ``latency``  one client, one sentence at a time: p50/p90 ms.

Sizes:

* ``demo``  the shipped checkpoint ``models/en-fr-numbers``, its ``test.en`` sentences; max
  length min(2 x source tokens + 10, 200) as served;
* ``base``  an opus-mt-base-shaped Marian with seeded random weights built here (d_model 512,
  6+6 layers, 8 heads, FFN 2048, vocabulary 58,101; ``bench/_marian_base.py``) fed to every
  engine from the same directory; every engine generates at most 32 new tokens (random weights
  rarely end with EOS: compare tokens/s); fewer sentences (see ``--help``).

Method. Per size, in this order: ``pytorch`` and ``transformers`` (the references), the
CTranslate2 rows, ``served``, ``engine``, then the CTranslate2 rows again; each CT2 figure is the
better of its two passes, so a machine that got busier never flatters nmtserve (both passes are
in the JSON). Timings exclude tokenization (common to every row). Next to every figure: the
1/5/15-minute load average when it started and the CPU share used by *other* processes meanwhile
(``others' CPU``; trust rows where it is near 0%). ``OMP_WAIT_POLICY`` is left as found unless
``--omp-wait-policy`` sets it (for this process and the server alike; bench/README.md explains
the trade-off). Correctness: the share of outputs identical to the size's reference row
(``pytorch`` on demo, ``transformers`` on base: token ids, or the detokenized text for
``served``, whose responses are text), and pairwise agreement between all rows (JSON).

Results: bench/results/compare-<UTC>.json (+ compare-latest.json; ``--quick`` and non-default
runs are written as compare-quick-* / compare-custom-*), a PNG chart of the speed ratios vs
CTranslate2 fp32 beside it (needs matplotlib), and markdown tables on stdout.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import itertools
import logging
import os
import shutil
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (  # noqa: E402
    DEFAULT_CHECKPOINT,
    MAX_CAP,
    RESULTS,
    OtherLoad,
    load_average,
    load_test_set,
    machine,
    markdown_table,
    own_cpu_seconds,
    percentile,
    process_group_cpu_seconds,
    process_group_pids,
    search_options,
    versions,
    write_json,
)

log = logging.getLogger("bench.compare")

ROWS = ("served", "served-int8", "engine", "pytorch", "transformers", "ct2", "ct2-int8")
SCENARIOS = ("bulk", "serving", "latency")
CT2_ROWS = {"ct2": "float32", "ct2-int8": "int8"}
SLOW_ROWS = ("pytorch", "transformers")  # no serving scenario; fewer sentences at base size
MAX_SENTENCES = 64  # the engine's running batch (= the export's max_batch, the server's)

Output = list[int] | str  # generated token ids, or the served translation text
Decoder = Callable[[list], list]  # items (id lists, or texts for `served`) -> outputs


@dataclass(frozen=True)
class Counts:
    """How many sentences each scenario uses (``slow_*``: the pytorch / transformers rows)."""

    bulk: int
    batch: int
    serving: int
    clients: int
    latency: int
    slow_bulk: int
    slow_latency: int
    max_new_tokens: int | None = None  # None: the demo's relative cap

    def need(self) -> int:
        return max(self.bulk, self.serving, self.latency)


# Sized for ~15 minutes on 2 idle cores. At base size CTranslate2 decodes every serving and
# latency sentence alone (~1 s each at beam 4), twice (before / after), fp32 and int8: that is
# most of the time, so base serving is one burst of 32 clients x 1 sentence.
COUNTS = {
    "demo": Counts(bulk=1000, batch=32, serving=320, clients=64, latency=100, slow_bulk=1000, slow_latency=100),
    "base": Counts(bulk=64, batch=16, serving=32, clients=32, latency=8, slow_bulk=16, slow_latency=4,
                   max_new_tokens=32),
}
QUICK_COUNTS = {
    "demo": Counts(bulk=40, batch=32, serving=40, clients=8, latency=10, slow_bulk=40, slow_latency=10),
    "base": Counts(bulk=8, batch=8, serving=8, clients=8, latency=4, slow_bulk=4, slow_latency=2,
                   max_new_tokens=8),
}


# ---- the sizes --------------------------------------------------------------------------------------


@dataclass
class Size:
    """One model and its sentences, as every row of that size sees them."""

    name: str
    model_dir: Path  # what `nmtserve export` reads: an nmtserve checkpoint or a Marian directory
    ckpt: object  # nmtserve Checkpoint (PyTorch model + tokenizer)
    texts: list[str]
    counts: Counts
    reference: str  # the row every other row is compared with
    ct2_dir: Path | None = None
    ct2_decoder: Callable | None = None  # (translator, beam) -> Decoder
    not_applicable: dict[str, str] = field(default_factory=dict)
    info: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.sources = [self.ckpt.tokenizer.encode(t) for t in self.texts]

    def options(self, beam: int):
        from nmtserve.decoding.search import SearchOptions

        if self.counts.max_new_tokens is None:
            return dataclasses.replace(search_options(), beam_size=beam)
        return SearchOptions(beam_size=beam, length_penalty=1.0, max_length=self.counts.max_new_tokens)

    def text(self, output: Output) -> str:
        return output if isinstance(output, str) else self.ckpt.tokenizer.decode(output)


def setup_demo(tmp: Path, counts: Counts, wanted: set[str]) -> Size:
    from decode import convert_to_ctranslate2, ct2_decoder

    from nmtserve.model.checkpoint import load_checkpoint

    ckpt = load_checkpoint(DEFAULT_CHECKPOINT)
    texts, _ = load_test_set(DEFAULT_CHECKPOINT, counts.need())
    size = Size("demo", DEFAULT_CHECKPOINT, ckpt, texts, counts, reference="pytorch",
                info={"model": f"{DEFAULT_CHECKPOINT.relative_to(DEFAULT_CHECKPOINT.parents[1])} "
                               f"(d_model {ckpt.config.d_model}, {ckpt.config.encoder_layers}+"
                               f"{ckpt.config.decoder_layers} layers, vocabulary {ckpt.config.tgt_vocab_size})",
                      "max_length": f"min(2 * source tokens + 10, {MAX_CAP})"})
    size.not_applicable["transformers"] = (
        "not applicable: the demo checkpoint uses the paper's interleaved sin/cos position table, which "
        "a Marian checkpoint cannot express (Marian's static table is [sin | cos]), and nmtserve has no "
        "nmtserve -> Marian exporter")
    if wanted & set(CT2_ROWS):
        size.ct2_dir, vocab = convert_to_ctranslate2(ckpt, tmp / "ct2")
        pad_piece = vocab[ckpt.config.pad_id]
        size.ct2_decoder = lambda tr, beam: ct2_decoder(tr, vocab, size.options(beam), pad_piece)
    return size


def setup_base(tmp: Path, counts: Counts, wanted: set[str]) -> Size:
    import _marian_base as mb

    from nmtserve.model.marian import load_marian

    started = time.perf_counter()
    marian = mb.build_marian(tmp / "marian")
    log.info("base: random Marian built in %.0f s", time.perf_counter() - started)
    ckpt = load_marian(marian)
    size = Size("base", marian, ckpt, mb.base_sentences(counts.need()), counts, reference="transformers",
                info={"model": "random opus-mt-base-shaped Marian (bench/_marian_base.py: d_model 512, 6+6 "
                               "layers, 8 heads, FFN 2048, vocabulary 58,101, seeded)",
                      "max_length": f"{counts.max_new_tokens} new tokens"})
    if wanted & set(CT2_ROWS):
        vocab = mb.convert_ct2(marian, tmp / "ct2")
        size.ct2_dir = tmp / "ct2"
        size.ct2_decoder = lambda tr, beam: mb.ct2_decoder(tr, vocab, beam, counts.max_new_tokens)
    return size


def export_repository(size: Size, repo: Path, threads: int, precision: str = "fp32") -> Path:
    """``nmtserve export`` (Python API), then the served decode's CPU threads set to ``threads`` in
    all (``served_layout``). int8: the export's quality gate runs on the demo's held-out set; the
    base size (random weights, no references) is gated against its fp32 translations with the
    gate's limit off (a random model's near-flat distributions make any precision change flip
    tokens: its drop says nothing about a trained model), and its report is kept in the JSON."""
    from nmtserve.export.pipeline import ExportOptions, export

    started = time.perf_counter()
    gate = {}
    if precision == "int8" and size.name == "base":
        source = repo.parent / "gate.en"
        source.write_text("\n".join(size.texts[:200]) + "\n", encoding="utf-8")
        gate = {"gate_source": source, "max_bleu_drop": 100.0}
    report = export(size.model_dir, ExportOptions(repository=repo, skip_parity=True, max_batch=MAX_SENTENCES,
                                                  max_target_len=size.counts.max_new_tokens or MAX_CAP,
                                                  precision=precision, **gate))
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


# ---- the rows ---------------------------------------------------------------------------------------


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


@contextmanager
def served_runner(size: Size, repo: Path, log_dir: Path, name: str = "served") -> Iterator[Runner]:
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
            result = client().infer("translate", inputs, outputs=outputs)
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
        yield Runner(name, f"tritonserver `translate` over gRPC (tritonclient), {precision_of(repo)} graphs",
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
    from nmtserve.server.triton_models import cpu_layout

    art = artifacts(repo)
    spec = ModelSpec.load(art / "model.json")
    loops, per_loop = cpu_layout("inprocess", cores=threads)  # what the server runs
    model = OnnxModel(art / "encoder.onnx", art / "decoder.onnx", spec, threads=per_loop)
    engine = EnginePool(model, loops, max_sentences=MAX_SENTENCES, max_beam=spec.max_beam).start()

    def decoder(beam: int) -> Decoder:
        options = size.options(beam)
        return lambda batch: [hyps[0].tokens for hyps in engine.translate(batch, options, timeout=900)]

    try:
        yield Runner("engine", f"EnginePool({loops} loops x {per_loop} threads, max_sentences={MAX_SENTENCES}) "
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
    yield Runner(name, f"CTranslate2 {ctranslate2.__version__} {compute} (serving: {workers} workers x "
                       f"{max(1, threads // workers)} threads)",
                 lambda beam: size.ct2_decoder(translator, beam),
                 serving_decoder=lambda beam: size.ct2_decoder(parallel, beam))


# ---- the scenarios ----------------------------------------------------------------------------------


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
    elif scenario == "serving":
        outputs, seconds, lat = run_serving(decode, items, c.clients, runner.thread_setup)
        entry["clients"] = c.clients
    else:
        outputs, lat = latencies(decode, items)
        seconds = sum(lat)
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


# ---- one size, every row ----------------------------------------------------------------------------


@dataclass
class Results:
    entries: list[dict] = field(default_factory=list)
    outputs: list[list] = field(default_factory=list)  # parallel to entries
    errors: list[dict] = field(default_factory=list)
    what: dict[str, dict[str, str]] = field(default_factory=dict)  # size -> row -> what ran

    def add(self, entry: dict, outputs: list) -> None:
        self.entries.append(entry)
        self.outputs.append(outputs)


def run_row(results: Results, size: Size, make_runner: Callable, row: str, beams: list[int],
            pass_name: str) -> None:
    """Every beam x scenario of one row; a failing row is recorded and the run goes on."""
    scenarios = [s for s in SCENARIOS if not (s == "serving" and row in SLOW_ROWS)]
    log.info("[%s] %s (%s pass; load %s)", size.name, row, pass_name, load_average())
    try:
        with make_runner() as runner:
            results.what.setdefault(size.name, {})[row] = runner.what
            for beam in beams:
                for scenario in scenarios:
                    results.add(*measure(size, runner, beam, scenario, pass_name))
    except Exception as exc:  # noqa: BLE001 - a benchmark reports a broken row and goes on
        log.error("[%s] %s failed: %s", size.name, row, exc)
        results.errors.append({"size": size.name, "row": row, "pass": pass_name,
                               "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()})
    gc.collect()  # the row's model / translator / engine go now, not during the next row


def bench_size(size: Size, tmp: Path, args, results: Results) -> None:
    """References first, CT2 before, served, engine, CT2 after (the fairness rule)."""
    wanted, beams = args.rows, args.beams
    repo = repo_int8 = None
    if {"served", "engine"} & set(wanted):
        repo = export_repository(size, tmp / "repository", args.threads)
    if "served-int8" in wanted:
        repo_int8 = export_repository(size, tmp / "repository-int8", args.threads, precision="int8")
    log_dir = RESULTS / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    runners: dict[str, Callable] = {
        "pytorch": lambda: pytorch_runner(size),
        "transformers": lambda: transformers_runner(size),
        "served": lambda: served_runner(size, repo, log_dir),
        "served-int8": lambda: served_runner(size, repo_int8, log_dir, name="served-int8"),
        "engine": lambda: engine_runner(size, repo, args.threads),
        **{name: (lambda name=name: ct2_runner(size, name, args.threads)) for name in CT2_ROWS},
    }
    ct2 = [r for r in CT2_ROWS if r in wanted]
    plan = ([(r, "only") for r in SLOW_ROWS if r in wanted] + [(r, "before") for r in ct2]
            + [(r, "only") for r in ("served", "served-int8", "engine") if r in wanted]
            + [(r, "after") for r in ct2])
    for row, pass_name in plan:
        if row in size.not_applicable:
            log.info("[%s] %s: %s", size.name, row, size.not_applicable[row])
            continue
        run_row(results, size, runners[row], row, beams, pass_name)


# ---- after the runs: best CT2 pass, tokens, agreement, ratios ----------------------------------------

RATIO_BASES = ("ct2", "ct2-int8", "pytorch")


def _key(entry: dict) -> tuple:
    return entry["size"], entry["row"], entry["beam"], entry["scenario"]


def pick_reported(results: Results) -> dict[tuple, int]:
    """(size, row, beam, scenario) -> index of the reported entry: the better CT2 pass."""
    groups: dict[tuple, list[int]] = {}
    for i, e in enumerate(results.entries):
        groups.setdefault(_key(e), []).append(i)
    chosen = {}
    for k, idx in groups.items():
        if k[3] == "latency":
            best = min(idx, key=lambda i: results.entries[i]["p50_ms"])
        else:
            best = max(idx, key=lambda i: results.entries[i]["sentences_per_s"])
        for i in idx:
            results.entries[i]["reported"] = i == best
        chosen[k] = best
    return chosen


def same_output(size: Size, a: Output, b: Output) -> bool:
    if isinstance(a, str) or isinstance(b, str):
        return size.text(a) == size.text(b)
    return a == b


def agreement(size: Size, a: list, b: list) -> tuple[float | None, int]:
    """Share of the first min(len) sentences with identical outputs, and that count."""
    n = min(len(a), len(b))
    if n == 0:
        return None, 0
    return sum(same_output(size, x, y) for x, y in zip(a[:n], b[:n], strict=True)) / n, n


def differences(size: Size, outputs: list, reference: list, limit: int = 3) -> list[dict]:
    """The first few sentences whose output differs from the reference's (text)."""
    out = []
    for i, (a, b) in enumerate(zip(outputs, reference, strict=False)):
        if len(out) == limit:
            break
        if not same_output(size, a, b):
            out.append({"sentence": i, "source": size.texts[i], "output": size.text(a), "reference": size.text(b)})
    return out


def token_counts(size: Size, results: Results, index: int) -> tuple[list[int], str]:
    """Generated tokens per sentence. Served answers are text: a sentence whose text equals
    another row's decode (same beam) counts that row's ids, else its re-tokenized length."""
    outputs = results.outputs[index]
    if not any(isinstance(o, str) for o in outputs):
        return [len(o) for o in outputs], "generated ids (EOS included)"
    beam = results.entries[index]["beam"]
    known: dict[tuple[int, str], int] = {}
    for e, outs in zip(results.entries, results.outputs, strict=True):
        if e["size"] == size.name and e["beam"] == beam and not any(isinstance(o, str) for o in outs):
            for i, o in enumerate(outs):
                known.setdefault((i, size.text(o)), len(o))
    counts = [known.get((i, o)) for i, o in enumerate(outputs)]
    guessed = sum(c is None for c in counts)
    counts = [c if c is not None else len(size.ckpt.tokenizer.encode_target(o)) for c, o in zip(counts, outputs, strict=True)]
    return counts, f"ids of another row's identical output; {guessed} of {len(outputs)} re-tokenized"


def ratio(entry: dict, base: dict | None) -> float | None:
    """Speed relative to ``base`` (higher is faster): sentences/s, or base p50 / p50 for latency."""
    if base is None:
        return None
    if entry["scenario"] == "latency":
        return base["p50_ms"] / entry["p50_ms"]
    return entry["sentences_per_s"] / base["sentences_per_s"]


def finalize(size: Size, results: Results) -> dict:
    """Fill tokens/s, agreement and ratios into the size's reported entries; returns the pairwise
    agreement of the bulk outputs per beam."""
    chosen = pick_reported(results)
    mine = {k: i for k, i in chosen.items() if k[0] == size.name}
    for k, i in mine.items():
        e = results.entries[i]
        counts, how = token_counts(size, results, i)
        e.update(tokens=sum(counts), tokens_per_s=sum(counts) / e["seconds"], tokens_counted_from=how)
        ref = mine.get((size.name, size.reference, k[2], "bulk"))
        if ref is not None:
            share, n = agreement(size, results.outputs[i], results.outputs[ref])
            e.update(identical_to_reference=share, compared_with_reference=n, reference=size.reference,
                     differences=differences(size, results.outputs[i], results.outputs[ref]))
        for base_row in RATIO_BASES:
            base = mine.get((size.name, base_row, k[2], k[3]))
            e[f"speed_vs_{base_row}"] = ratio(e, results.entries[base] if base is not None else None)
    pairwise: dict[str, dict[str, float]] = {}
    for beam in sorted({k[2] for k in mine}):
        bulk = {k[1]: i for k, i in mine.items() if k[2] == beam and k[3] == "bulk"}
        pairs = {}
        for a, b in itertools.combinations(sorted(bulk), 2):
            share, n = agreement(size, results.outputs[bulk[a]], results.outputs[bulk[b]])
            pairs[f"{a} ~ {b}"] = {"identical": share, "sentences": n}
        pairwise[f"beam {beam}"] = pairs
    return pairwise


# ---- reporting --------------------------------------------------------------------------------------

TABLE_COLUMNS = {
    "bulk": ["sentences (batch)", "sent/s", "tok/s"],
    "serving": ["sentences (clients)", "sent/s", "p50 ms", "p90 ms"],
    "latency": ["sentences", "p50 ms", "p90 ms"],
}


def _fmt_ratio(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}x"


def _scenario_cells(e: dict) -> list:
    s = e["scenario"]
    if s == "bulk":
        return [f"{e['sentences']} ({e['batch']})", e["sentences_per_s"], e["tokens_per_s"]]
    if s == "serving":
        return [f"{e['sentences']} ({e['clients']})", e["sentences_per_s"], e["p50_ms"], e["p90_ms"]]
    return [e["sentences"], e["p50_ms"], e["p90_ms"]]


def tables(entries: list[dict]) -> str:
    """One markdown table per scenario: every reported row of every size and beam."""
    out = []
    sizes = list(dict.fromkeys(e["size"] for e in entries))
    beams = list(dict.fromkeys(e["beam"] for e in entries))
    order = lambda e: (sizes.index(e["size"]), beams.index(e["beam"]), ROWS.index(e["row"]))  # noqa: E731
    for scenario in SCENARIOS:
        rows = sorted((e for e in entries if e.get("reported") and e["scenario"] == scenario), key=order)
        if not rows:
            continue
        header = (["size", "beam", "row", *TABLE_COLUMNS[scenario]] + [f"vs {b}" for b in RATIO_BASES]
                  + ["identical to ref", "load before", "others' CPU"])
        body = []
        for e in rows:
            same = e.get("identical_to_reference")
            row = e["row"] if e["pass"] == "only" else f"{e['row']} ({e['pass']})"
            body.append([e["size"], e["beam"], row, *_scenario_cells(e),
                         *(_fmt_ratio(e.get(f"speed_vs_{b}")) for b in RATIO_BASES),
                         "-" if same is None else f"{100 * same:.1f}% ({e['reference']})",
                         e["load_before"], f"{e['other_processes_cpu_pct']:.0f}%"])
        title = {"bulk": "bulk (speed = sentences/s)", "serving": "serving (speed = sentences/s)",
                 "latency": "latency (speed = reference p50 / p50)"}[scenario]
        out.append(f"### {title}\n\n" + markdown_table(header, body))
    return "\n\n".join(out)


def has_matplotlib() -> bool:
    import importlib.util

    return importlib.util.find_spec("matplotlib") is not None


def chart(entries: list[dict], path: Path) -> str | None:
    """Grouped bars: speed vs CTranslate2 fp32 per scenario and beam, one panel per size."""
    if not has_matplotlib():
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [e for e in entries if e.get("reported") and e.get("speed_vs_ct2") is not None and e["row"] != "ct2"]
    sizes = list(dict.fromkeys(e["size"] for e in shown))
    if not sizes:
        return None
    fig, axes = plt.subplots(len(sizes), 1, figsize=(12, 3.8 * len(sizes)), squeeze=False)
    for ax, size in zip(axes[:, 0], sizes, strict=True):
        mine = [e for e in shown if e["size"] == size]
        beams = list(dict.fromkeys(e["beam"] for e in mine))
        groups = sorted({(e["scenario"], e["beam"]) for e in mine},
                        key=lambda g: (SCENARIOS.index(g[0]), beams.index(g[1])))
        rows = [r for r in ROWS if any(e["row"] == r for e in mine)]
        width = 0.8 / max(1, len(rows))
        for j, row in enumerate(rows):
            values = {(e["scenario"], e["beam"]): e["speed_vs_ct2"] for e in mine if e["row"] == row}
            xs = [g + j * width for g, key in enumerate(groups) if key in values]
            ys = [values[key] for key in groups if key in values]
            bars = ax.bar(xs, ys, width, label=row, color=f"C{ROWS.index(row)}")
            ax.bar_label(bars, fmt="%.2f", fontsize=7)
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_xticks([g + width * (len(rows) - 1) / 2 for g in range(len(groups))],
                      [f"{s}\nbeam {b}" for s, b in groups])
        ax.set_ylabel("speed vs CT2 fp32")
        ax.set_title(f"{size}: higher is faster (latency: CT2 p50 / p50)")
        ax.margins(y=0.12)
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return str(path)


# ---- main -------------------------------------------------------------------------------------------

SETUP = {"demo": setup_demo, "base": setup_base}


def _counts_help() -> str:
    lines = ["sentences per scenario (slow = the pytorch / transformers rows):"]
    for label, table in (("full", COUNTS), ("--quick", QUICK_COUNTS)):
        for name, c in table.items():
            new = f", {c.max_new_tokens} new tokens" if c.max_new_tokens else ""
            lines.append(f"  {label:8s}{name}: bulk {c.bulk} in requests of {c.batch} (slow {c.slow_bulk}), serving "
                         f"{c.serving} with {c.clients} clients, latency {c.latency} (slow {c.slow_latency}){new}")
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    def names(allowed):
        def parse(text: str) -> list[str]:
            items = [x for x in text.split(",") if x]
            bad = [x for x in items if x not in allowed]
            if bad or not items:
                raise argparse.ArgumentTypeError(f"choose from {','.join(allowed)}; got {text!r}")
            return items
        return parse

    ap = argparse.ArgumentParser(description=__doc__, epilog=_counts_help(),
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=names(tuple(SETUP)), default=list(SETUP), help="default: demo,base")
    ap.add_argument("--beams", type=lambda t: [int(x) for x in t.split(",")], default=[4, 1], help="default: 4,1")
    ap.add_argument("--rows", type=names(ROWS), default=list(ROWS), help=f"default: {','.join(ROWS)}")
    ap.add_argument("--quick", action="store_true",
                    help="smoke configuration (~3 min): few sentences, 8 clients, base size with 8 new tokens")
    ap.add_argument("--threads", type=int, default=2, help="intra-op threads of every engine (default 2)")
    ap.add_argument("--omp-wait-policy", default="keep",
                    help="OMP_WAIT_POLICY for PyTorch / CTranslate2 (this process) and the server: PASSIVE, "
                         "ACTIVE, or keep (default: leave the environment as it is)")
    args = ap.parse_args(argv)
    if any(b < 1 for b in args.beams):
        ap.error("--beams: beam sizes must be >= 1")
    return args


def run_sizes(args, results: Results) -> dict:
    counts_of = QUICK_COUNTS if args.quick else COUNTS
    sizes: dict[str, dict] = {}
    for name in args.sizes:
        tmp = Path(tempfile.mkdtemp(prefix=f"nmtserve-compare-{name}-"))
        out = sizes[name] = {"counts": dataclasses.asdict(counts_of[name])}
        try:
            size = SETUP[name](tmp, counts_of[name], set(args.rows))
            out.update(info=size.info, reference=size.reference, not_applicable=size.not_applicable,
                       not_measured={r: "serving: no cross-request batching (it would be the latency scenario "
                                        "run back to back)" for r in SLOW_ROWS
                                     if r in args.rows and r not in size.not_applicable})
            bench_size(size, tmp, args, results)
            out["pairwise_agreement_bulk"] = finalize(size, results)
            out["rows"] = results.what.get(name, {})
            del size
        except Exception as exc:  # noqa: BLE001 - report and go on with the next size
            log.exception("[%s] setup failed", name)
            results.errors.append({"size": name, "row": None, "error": f"{type(exc).__name__}: {exc}",
                                   "traceback": traceback.format_exc()})
        finally:
            gc.collect()
            shutil.rmtree(tmp, ignore_errors=True)
    return sizes


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.omp_wait_policy != "keep":  # before torch / ctranslate2 load their OpenMP runtimes
        os.environ["OMP_WAIT_POLICY"] = args.omp_wait_policy
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    for noisy in ("nmtserve", "transformers", "httpx"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    import torch

    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    info = {"machine": machine(), "versions": versions("torch", "onnxruntime", "ctranslate2", "transformers",
                                                        "nvidia-pytriton", "tritonclient", "numpy"),
            "settings": {"sizes": args.sizes, "beams": args.beams, "rows": args.rows, "quick": args.quick,
                         "threads": args.threads,
                         "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "(unset)"),
                         "engine_max_sentences": MAX_SENTENCES, "length_penalty": 1.0,
                         "ratios": "speed vs the named row, higher is faster: sentences/s ratio (bulk, "
                                   "serving), base p50 / p50 (latency); CT2 figures: better of 2 passes"}}
    results = Results()
    info["sizes"] = run_sizes(args, results)
    info["measurements"] = results.entries
    info["errors"] = results.errors
    info["machine"]["load_average_end"] = load_average()
    info["wall_s"] = round(time.perf_counter() - started, 1)
    default = (args.sizes, args.beams, args.rows, args.threads) == (list(SETUP), [4, 1], list(ROWS), 2)
    name = "compare" + ("-quick" if args.quick else "" if default else "-custom")
    info["chart"] = "the same name with .png (speed vs CT2 fp32)" if has_matplotlib() else "not drawn: no matplotlib"
    path = write_json(name, info)
    png = chart(results.entries, path.with_suffix(".png"))
    if png:
        shutil.copy(png, RESULTS / f"{name}-latest.png")

    m = info["machine"]
    print(f"\n{m['nproc']} CPUs ({m['cpu']}), {m['date_utc']} UTC, load {m['load_average_1_5_15']} -> "
          f"{m['load_average_end']}; {args.threads} threads everywhere, OMP_WAIT_POLICY "
          f"{info['settings']['omp_wait_policy']}; {info['wall_s'] / 60:.1f} min")
    for size_name, s in info["sizes"].items():
        details = s.get("info", {})
        print(f"* {size_name}: {details.get('model', '?')}; max length {details.get('max_length', '?')}; "
              f"export {details.get('export_s', '-')} s, server start {details.get('served_startup_s', '-')} s")
        gate = details.get("quality_gate_int8")
        if gate:
            print(f"  - int8 export {details.get('export_int8_s', '-')} s; quality gate ({gate['sentences']} sentences "
                  f"against {gate['references']}): BLEU {gate['bleu_fp32']} -> {gate['bleu']}, drop {gate['bleu_drop']} "
                  f"(limit {gate['max_bleu_drop']}), {100 * gate['identical']:.1f}% identical to fp32, token "
                  f"agreement {100 * gate['token_agreement']:.1f}%")
        for row, why in [*s.get("not_applicable", {}).items(), *s.get("not_measured", {}).items()]:
            print(f"  - {row}: {why}")
    print()
    print(tables(results.entries))
    for err in results.errors:
        print(f"\nERROR [{err['size']}] {err['row']}: {err['error']}")
    print(f"\nwritten {path}" + (f" and {png}" if png else " (no chart: matplotlib is not installed)"))
    return 1 if results.errors else 0


if __name__ == "__main__":
    sys.exit(main())
