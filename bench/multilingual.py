"""nmtserve against CTranslate2 on an NLLB-200-distilled-600M-shaped model, one run (the issue's item 6).

    python bench/multilingual.py --size 600m --workdir DIR   # the real run, the machine to itself
    python bench/multilingual.py --size small                # a dry run of the whole pipeline, ~3 min

(One job in ~850 lines: the run from the model it builds to the targets' table, every part used
once; CTranslate2's own process is ``_ct2_process.py``, the memory readings ``_memory.py``.)

600m: ~14 min with one round (setup ~5 min: each export ~80 s at a peak of ~3.8 GB, 1.6x the
checkpoint); 1.3b: about twice that. ``--workdir`` keeps the checkpoint, repositories and CT2
models and reuses every finished one on the next run (a temporary directory, removed at the end,
without it).

The model is built here, no downloads: transformers' ``M2M100ForConditionalGeneration`` (NLLB-200's
class) with seeded random weights and tied embeddings, written with ``save_pretrained`` beside a
tiny real NLLB tokenizer (``tests/multilingual_fixtures.write_nllb``: NLLB's 202 language codes,
a sentencepiece model of 240 pieces; its ids are all small, the model's vocabulary is the full
size and a random model emits ids past the tokenizer's, which is fine for speed). Shapes:

* ``600m``:  d_model 1024, 12+12 layers, 16 heads, FFN 4096, vocabulary 256,206 (615M parameters);
* ``1.3b``:  d_model 1024, 24+24 layers, 16 heads, FFN 8192, vocabulary 256,206 (1.37B, 5.5 GB in fp32:
  NLLB-200-1.3B's shape; its export and both engines must fit a 24 GB machine);
* ``small``: d_model 256, 3+3 layers, 4 heads, FFN 1024, vocabulary 32,000 (14M), its graphs' weights
  forced into external data files as the larger graphs' are. At this size fixed
  costs dominate (the server's five processes, ~300 MB idle): its ratios say little about 600m.

Two changes to the random weights make both engines do the same, comparable work:

* EOS's row of the shared embedding (= its output row) is zero: its logit is 0 while the best of
  the vocabulary's are several units up, so no hypothesis ever ends and every sentence decodes the
  full 32 tokens (pad's row is zero already: ``padding_idx``);
* the decoder's last LayerNorm gets zero-mean random gains (x8). With the default gains of 1 the
  logits are dominated by the fed-back token's own embedding (tied weights: a token is most like
  itself) and every output repeats one token; zero-mean gains remove that self-similarity, so the
  outputs vary along the sentence and between sentences, with clear margins between candidates
  (agreement between engines then means something).

Engines, both from the same directory, 2 threads each, beam 4, 32 new tokens, English -> French:

* ``served`` (fp32 / int8): ``nmtserve.export.pipeline.export`` (parity on 4 sentences; int8 with
  the quality gate on 8 generated sentences, eng_Latn -> fra_Latn, its BLEU limit off
  (``max_bleu_drop`` 100): a random model's near-ties make any precision change flip tokens, so a
  BLEU drop says nothing here), the real ``tritonserver`` with the served decode laid out on the 2
  threads as the server lays out 2 cores (2 decode loops x 1 thread, compare.py's
  ``served_layout``), requests through ``nmtserve.client.Translator`` with ``source_lang`` /
  ``target_lang`` and ``max_length=32``;
* ``ct2`` (fp32 / int8): CTranslate2's own ``TransformersConverter`` on the directory (int8:
  ``quantization="int8"``, loaded with ``compute_type="int8"``), ``translate_batch`` with
  ``target_prefix=[[fra_Latn]]``, ``max_decoding_length=32``, in a process of its own that imports
  nothing but ctranslate2 (so that its RSS is CT2's). Layouts as compare.py: 1 worker x 2 threads
  for bulk and latency, 2 workers x 1 thread for the concurrent clients (its best layout there).

Lengths match exactly: nmtserve's ``MAX_LENGTH`` counts generated tokens including the forced
language token (as transformers' ``max_new_tokens`` with ``forced_bos_token_id``); CT2's
``max_decoding_length`` counts the target prefix too. Both answers are ``[fra_Latn, 31 tokens]``;
the run checks it. CT2's converter pads the vocabulary to the model's size itself
(``madeupword<i>`` for ids past the tokenizer's 444), so CT2 token i is id i; the run checks that
too.

Scenarios: ``bulk`` (sentences in requests of 16, one request at a time, after an untimed
warm-up request), ``serving`` (16 concurrent clients, one sentence per request, each sending its
next when answered; compare.py's ``run_serving``), ``latency`` (one sentence at a time, p50/p90),
the engine's memory under load (sampled every 0.5 s during the scenarios: VmRSS summed over the
tritonserver process group (server + Python stubs) or the CT2 process; PSS beside it, which does
not count shared pages twice) and the repository's size on disk (``du``) against the checkpoint
directory's. Source sentences: generated text of 20-30 tokens (language token and EOS included).

Method. Rounds (``--rounds``, default 2) of fp32: ct2, served; int8: ct2, served, so each engine
runs twice with the other in between (the machine's speed drifts); each figure is the better of
an engine's passes, both passes are in the JSON. Correctness: served answers are text and a
random model's ids mostly lie past the tiny tokenizer's, so the served ids are fetched through
the same repository's ``tokenize`` + ``generate`` models (untimed, first pass of each precision)
and compared token for token with CT2's; the translate text is checked against the
detokenized ids.

Output: bench/results/multilingual-<size>-<UTC>.json (+ ``-latest``), server logs under
results/logs/, and on stdout the per-engine table and issue 34's targets, each marked met or not:
int8 bulk >= 1.5x CT2 int8; serving >= 1.5x CT2 int8; server RSS <= 1.2x CT2's at the same
precision; fp32 repository on disk <= 1.1x the checkpoint; int8 repository <= 1.2x CT2's int8
model; the export's peak RSS <= 2x the checkpoint on disk.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
from _ct2_process import Ct2Process  # noqa: E402
from _memory import MemorySampler, breakdown, disk_usage, hwm_mb, pss_mb, rss_mb  # noqa: E402

ROOT = BENCH.parent

BEAM = 4
MAX_LENGTH = 32  # generated tokens, the forced language token included
THREADS = 2
SOURCE_LANG, TARGET_LANG = "eng_Latn", "fra_Latn"
MAX_SENTENCES = 64  # the export's max_batch: the served engine's running batch (compare.py's)
SEED = 0
FINAL_NORM_GAIN = 8.0  # std of the decoder's last LayerNorm gains (zero mean; see the docstring)
GATE_SENTENCES = 8
PARITY_SENTENCES = 4
TARGETS = {  # issue 34's
    "int8 bulk vs CT2 int8": (">=", 1.5),
    "serving vs CT2 int8": (">=", 1.5),
    "server RSS vs CT2 (same precision)": ("<=", 1.2),
    "repository fp32 on disk vs checkpoint": ("<=", 1.1),
    "repository int8 on disk vs CT2 int8 model": ("<=", 1.2),
    "export peak RSS vs checkpoint on disk": ("<=", 2.0),
}


# ---- the CTranslate2 worker: first, so that its process imports nothing else --------------------





sys.path.insert(0, str(ROOT / "tests"))  # multilingual_fixtures (the NLLB tokenizer files)

from _common import (  # noqa: E402
    OtherLoad,
    load_average,
    machine,
    markdown_table,
    own_cpu_seconds,
    percentile,
    process_cpu_seconds,
    process_group_pids,
    versions,
    write_json,
)

# ---- sizes ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Shape:
    """A model size and the sentence counts of its scenarios."""

    name: str
    d_model: int
    layers: int  # encoder and decoder each
    heads: int
    ffn: int
    vocab: int
    bulk: int  # sentences, in requests of `batch`; also the agreement check's sentences
    batch: int
    warmup: int  # sentences of the untimed request before bulk (and 1 before latency)
    clients: int
    serving: int  # sentences over the `clients` concurrent clients
    latency: int
    # ExportOptions.external_data_bytes; None: nmtserve's default. The 600m graphs pass 2 GB (the
    # exporter counts the whole model's weights for each graph), so their weights go to
    # <graph>.onnx.data; the dry run forces the same path.
    external_data_bytes: int | None = None

    def need(self) -> int:
        return max(self.bulk, self.serving, self.latency)


SHAPES = {
    # The warm-up is short at 600m: a full request of 16 is a minute at fp32, per pass.
    "600m": Shape("600m", 1024, 12, 16, 4096, 256_206, bulk=32, batch=16, warmup=4, clients=16, serving=16,
                  latency=3),
    # NLLB-200-1.3B's shape (1.37B parameters, 5.5 GB in fp32): the export must fit this 24 GB machine.
    "1.3b": Shape("1.3b", 1024, 24, 16, 8192, 256_206, bulk=16, batch=16, warmup=2, clients=16, serving=16,
                  latency=2),
    "small": Shape("small", 256, 3, 4, 1024, 32_000, bulk=32, batch=16, warmup=16, clients=16, serving=32,
                   latency=4, external_data_bytes=1),
}


# ---- setup, each heavy step in a child process (its peak memory is its own) ---------------------------


def in_child(fn: Callable[..., dict], *args) -> dict:
    """``fn(*args)`` in a fresh (spawned) process; its result, with the child's wall time and peak RSS."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    started = time.perf_counter()
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        out = pool.submit(_measured, fn, *args).result()
    out["wall_s"] = round(time.perf_counter() - started, 1)
    return out


def _measured(fn: Callable[..., dict], *args) -> dict:
    import logging

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    for noisy in ("transformers", "httpx"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    out = fn(*args)
    out["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    return out


def build_checkpoint(directory: str, shape: dict) -> dict:
    """The random NLLB-shaped directory: tokenizer files, config, weights (see the module docstring)."""
    import torch
    from multilingual_fixtures import write_nllb
    from transformers import M2M100Config, M2M100ForConditionalGeneration

    from nmtserve.model.hf_tokenizer import MultilingualTokenizer

    path = Path(directory)
    write_nllb(path)
    tok = MultilingualTokenizer.from_directory(path)
    config = M2M100Config(
        vocab_size=shape["vocab"], d_model=shape["d_model"], encoder_layers=shape["layers"],
        decoder_layers=shape["layers"], encoder_attention_heads=shape["heads"],
        decoder_attention_heads=shape["heads"], encoder_ffn_dim=shape["ffn"], decoder_ffn_dim=shape["ffn"],
        max_position_embeddings=1024, activation_function="relu", scale_embedding=True,
        pad_token_id=tok.pad_id, bos_token_id=tok.bos_id, eos_token_id=tok.eos_id,
        decoder_start_token_id=tok.eos_id, tie_word_embeddings=True)  # NLLB-200-distilled-600M's settings
    torch.manual_seed(SEED)
    model = M2M100ForConditionalGeneration(config).eval()
    if model.lm_head.weight is not model.model.shared.weight:
        raise RuntimeError("expected the output projection tied to the shared embedding (as NLLB-200)")
    generator = torch.Generator().manual_seed(SEED + 1)
    with torch.no_grad():
        norm = model.model.decoder.layer_norm
        norm.weight.copy_(FINAL_NORM_GAIN * torch.randn(norm.weight.shape, generator=generator))
        norm.bias.zero_()
        model.model.shared.weight[tok.eos_id] = 0.0
    model.save_pretrained(path)
    return {"parameters": sum(p.numel() for p in model.parameters()), "tokenizer_vocab": tok.vocab_size,
            "language_ids": {SOURCE_LANG: tok.language_id(SOURCE_LANG), TARGET_LANG: tok.language_id(TARGET_LANG)}}


def export_repository(checkpoint: str, repo: str, precision: str, gate_source: str,
                      external_data_bytes: int | None) -> dict:
    """``nmtserve export`` (Python API). fp32 with a short parity check; int8 with the quality gate
    (limit off, see the module docstring) and without parity (the same fp32 graphs passed it)."""
    from nmtserve.export.pipeline import ExportOptions, export

    common = {"repository": Path(repo), "max_target_len": MAX_LENGTH, "max_batch": MAX_SENTENCES}
    if external_data_bytes is not None:
        common["external_data_bytes"] = external_data_bytes
    options = ExportOptions(**common, parity_sentences=PARITY_SENTENCES)
    if precision == "int8":
        options = ExportOptions(**common, precision="int8", skip_parity=True, gate_source=Path(gate_source),
                                gate_source_lang=SOURCE_LANG, gate_target_lang=TARGET_LANG,
                                gate_sentences=GATE_SENTENCES, max_bleu_drop=100.0)
    report = export(Path(checkpoint), options)
    out = {"stages_s": {k: round(v, 1) for k, v in report.seconds.items()}, "summary": report.summary()}
    if precision in report.quality:
        out["quality_gate"] = {k: v for k, v in report.quality[precision].items() if k != "worst"}
    return out


def convert_ct2(checkpoint: str, out_dir: str, quantization: str | None) -> dict:
    from ctranslate2.converters import TransformersConverter

    TransformersConverter(checkpoint).convert(out_dir, quantization=quantization, force=True)
    return {}


def sentences(tokenizer, n: int, seed: int = SEED) -> list[str]:
    """n generated sentences of 20-30 source tokens (language token and EOS included)."""
    import random

    from multilingual_fixtures import _WORDS

    rng = random.Random(seed)
    out: list[str] = []
    while len(out) < n:
        goal, words = rng.randint(20, 30), []
        while len(tokenizer.encode(" ".join(words), SOURCE_LANG)) < goal:
            words.append(rng.choice(_WORDS))
        if len(tokenizer.encode(" ".join(words), SOURCE_LANG)) <= 30:
            out.append(" ".join(words))
    return out




# ---- memory of a process tree ---------------------------------------------------------------------














# ---- engines --------------------------------------------------------------------------------------


@dataclass
class Runner:
    """One engine ready to decode: ``decode(items)`` is thread-safe (the serving clients share it)."""

    engine: str  # "served" | "ct2"
    precision: str
    layout: str
    decode: Callable[[list], list]  # texts (served) or source id lists (ct2) -> texts / id lists
    pids: Callable[[], set[int]]
    texts: bool
    thread_setup: Callable[[], object] = dict
    info: dict = field(default_factory=dict)




@contextmanager
def ct2_runner(ctx: Context, precision: str, inter: int, intra: int) -> Iterator[Runner]:
    vocab = ctx.ct2_vocab
    index = {token: i for i, token in enumerate(vocab)}
    worker = Ct2Process(ctx.ct2_dirs[precision], "int8" if precision == "int8" else "float32", inter, intra,
                        ctx.log_dir / f"ct2-multilingual-{ctx.shape.name}-{precision}.log",
                        prefix=TARGET_LANG, beam=BEAM, max_length=MAX_LENGTH)

    def decode(batch: list[list[int]]) -> list[list[int]]:
        return [[index[t] for t in hyp] for hyp in worker.translate([[vocab[i] for i in ids] for ids in batch])]

    try:
        yield Runner("ct2", precision, f"{inter} worker(s) x {intra} thread(s)", decode, lambda: {worker.proc.pid},
                     texts=False, info={"load_s": worker.ready["load_s"], "version": worker.ready["version"]})
    finally:
        worker.close()


@contextmanager
def served_runner(ctx: Context, precision: str) -> Iterator[Runner]:
    from nmtserve.client import Translator
    from nmtserve.server.launcher import ServerConfig, TritonServer

    env = {"OMP_WAIT_POLICY": os.environ["OMP_WAIT_POLICY"]} if "OMP_WAIT_POLICY" in os.environ else {}
    server = TritonServer(ServerConfig.on_free_ports(
        ctx.repos[precision], log_file=ctx.log_dir / f"tritonserver-multilingual-{ctx.shape.name}-{precision}.log",
        env=env, startup_timeout_s=1800))
    started = time.perf_counter()
    server.start()
    local, clients = threading.local(), []

    def client() -> Translator:
        if not hasattr(local, "client"):  # one client (one gRPC channel) per client thread
            local.client = Translator(server.urls.grpc_address, timeout=None, max_retries=0,
                                      batch_size=ctx.shape.batch, concurrency=1)
            clients.append(local.client)
        return local.client

    def decode(texts: list[str]) -> list[str]:
        got = client().translate(texts, source_lang=SOURCE_LANG, target_lang=TARGET_LANG, beam_size=BEAM,
                                 max_length=MAX_LENGTH)
        return [t.text for t in got]

    try:
        server.wait_until_ready(1800)
        yield Runner("served", precision, ctx.served_layout, decode, lambda: process_group_pids(server.pid),
                     texts=True, thread_setup=client,
                     info={"startup_s": round(time.perf_counter() - started, 1), "server": server})
    finally:
        for c in clients:
            c.close()
        server.stop()


def served_ids(server, texts: list[str], batch: int) -> list[list[int]]:
    """The served model's token ids for ``texts``: the repository's own ``tokenize`` then
    ``generate`` models (what ``translate`` chains), called with the stock tritonclient."""
    import numpy as np
    import tritonclient.grpc as grpcclient

    from nmtserve import contract as c

    def tensor(name: str, array: np.ndarray, dtype: str):
        t = grpcclient.InferInput(name, list(array.shape), dtype)
        t.set_data_from_numpy(array)
        return t

    def strings(values: list[str]) -> np.ndarray:
        return np.array([v.encode("utf-8") for v in values], dtype=np.object_)

    client = grpcclient.InferenceServerClient(server.urls.grpc_address)
    out: list[list[int]] = []
    try:
        for start in range(0, len(texts), batch):
            chunk = texts[start : start + batch]
            tok = client.infer("tokenize", [tensor(c.TEXT, strings(chunk), "BYTES"),
                                            tensor(c.SOURCE_LANG, strings([SOURCE_LANG]), "BYTES"),
                                            tensor(c.TARGET_LANG, strings([TARGET_LANG]), "BYTES")])
            inputs = [tensor(t.name, tok.as_numpy(t.name), "INT32") for t in (*c.SOURCE_TENSORS, *c.FORCED_TENSORS)]
            inputs += [tensor(c.BEAM_SIZE, np.array([BEAM], np.int32), "INT32"),
                       tensor(c.MAX_LENGTH, np.array([MAX_LENGTH], np.int32), "INT32")]
            gen = client.infer("generate", inputs)
            ids, lengths = gen.as_numpy(c.OUT_IDS), gen.as_numpy(c.OUT_LEN)
            out += [ids[i, 0, : lengths[i, 0]].tolist() for i in range(len(chunk))]
    finally:
        client.close()
    return out


# ---- scenarios ------------------------------------------------------------------------------------


@dataclass
class Context:
    shape: Shape
    work: Path
    log_dir: Path
    texts: list[str]
    sources: list[list[int]]  # the same sentences as nmtserve's tokenizer encodes them ([lang] X </s>)
    tokenizer: object
    repos: dict[str, Path]
    ct2_dirs: dict[str, Path]
    ct2_vocab: list[str]
    served_layout: str
    entries: list[dict] = field(default_factory=list)
    outputs: dict[tuple, list] = field(default_factory=dict)  # (engine, precision, pass, scenario) -> outputs
    ids: dict[str, list[list[int]]] = field(default_factory=dict)  # "served-fp32" -> generate's ids
    errors: list[dict] = field(default_factory=list)


def cpu_of(pids: set[int]) -> float:
    procs = process_cpu_seconds()
    return sum(procs[p][0] for p in pids if p in procs)


def measure(ctx: Context, runner: Runner, scenario: str, pass_no: int) -> None:
    from _compare_runners import run_serving

    s = ctx.shape
    n = {"bulk": s.bulk, "serving": s.serving, "latency": s.latency}[scenario]
    items = (ctx.texts if runner.texts else ctx.sources)[:n]
    entry = {"engine": runner.engine, "precision": runner.precision, "pass": pass_no, "scenario": scenario,
             "sentences": n, "layout": runner.layout, "load_before": load_average()}
    if scenario == "bulk":
        runner.decode(items[: s.warmup])
    elif scenario == "latency":
        runner.decode(items[:1])
    others = OtherLoad(lambda: own_cpu_seconds() + cpu_of(runner.pids()), runner.pids).start()
    latencies: list[float] = []
    with MemorySampler(runner.pids) as memory:
        if scenario == "bulk":
            started, outputs = time.perf_counter(), []
            for i in range(0, n, s.batch):
                outputs += runner.decode(items[i : i + s.batch])
            seconds = time.perf_counter() - started
            entry["batch"] = s.batch
        elif scenario == "serving":
            outputs, seconds, latencies = run_serving(runner.decode, items, s.clients, runner.thread_setup)
            entry["clients"] = s.clients
        else:
            outputs = []
            for item in items:
                started = time.perf_counter()
                outputs += runner.decode([item])
                latencies.append(time.perf_counter() - started)
            seconds = sum(latencies)
    entry.update(seconds=round(seconds, 3), sentences_per_s=n / seconds, peak_rss_mb=round(memory.rss),
                 peak_rss_by_process_mb=memory.at_peak, peak_pss_mb=round(memory.pss), other_processes_cpu_pct=round(others.stop(), 1),
                 other_processes_top=others.top, load_after=load_average())
    if latencies:
        entry.update(p50_ms=1000 * percentile(latencies, 50), p90_ms=1000 * percentile(latencies, 90))
    print(f"  [{runner.engine}-{runner.precision} pass {pass_no}] {scenario:8s} {n:3d} sentences: "
          f"{entry['sentences_per_s']:7.3f} sent/s" + (f", p50 {entry['p50_ms']:.0f} ms" if latencies else "")
          + f"; peak RSS {memory.rss:.0f} MB (PSS {memory.pss:.0f}); load {entry['load_before']}; "
          f"others {entry['other_processes_cpu_pct']:.0f}% CPU", flush=True)
    ctx.entries.append(entry)
    ctx.outputs[(runner.engine, runner.precision, pass_no, scenario)] = outputs


def startup(ctx: Context, runner: Runner, pass_no: int, seconds: float) -> None:
    """Start-to-ready time and the idle memory, per process."""
    pids = runner.pids()
    ctx.entries.append({"engine": runner.engine, "precision": runner.precision, "pass": pass_no, "scenario": "startup",
                        "seconds": seconds, "idle_rss_mb": round(rss_mb(pids)), "idle_pss_mb": round(pss_mb(pids)),
                        "idle_rss_by_process_mb": breakdown(pids)})


def peak_since_start(ctx: Context, runner: Runner, pass_no: int) -> None:
    """The processes' own peak RSS since they started (loading included), summed."""
    ctx.entries.append({"engine": runner.engine, "precision": runner.precision, "pass": pass_no, "scenario": "hwm",
                        "layout": runner.layout, "hwm_mb": round(hwm_mb(runner.pids()))})


def run_pass(ctx: Context, engine: str, precision: str, pass_no: int) -> None:
    """Every scenario of one engine at one precision (CT2: two processes, one per layout)."""
    print(f"[{engine}-{precision} pass {pass_no}] load {load_average()}", flush=True)
    try:
        if engine == "served":
            with served_runner(ctx, precision) as runner:
                startup(ctx, runner, pass_no, runner.info["startup_s"])
                for scenario in ("bulk", "serving", "latency"):
                    measure(ctx, runner, scenario, pass_no)
                peak_since_start(ctx, runner, pass_no)
                key = f"served-{precision}"
                if key not in ctx.ids:  # untimed: the served ids for the agreement check
                    started = time.perf_counter()
                    ctx.ids[key] = served_ids(runner.info["server"], ctx.texts[: ctx.shape.bulk], ctx.shape.batch)
                    print(f"  [{key}] ids of {ctx.shape.bulk} sentences via tokenize + generate in "
                          f"{time.perf_counter() - started:.0f} s (untimed)", flush=True)
        else:
            workers = min(2, THREADS)  # compare.py's CT2 layouts: 1 x 2 alone, 2 x 1 for concurrent clients
            with ct2_runner(ctx, precision, 1, THREADS) as runner:
                startup(ctx, runner, pass_no, runner.info["load_s"])
                for scenario in ("bulk", "latency"):
                    measure(ctx, runner, scenario, pass_no)
                peak_since_start(ctx, runner, pass_no)
            with ct2_runner(ctx, precision, workers, max(1, THREADS // workers)) as runner:
                measure(ctx, runner, "serving", pass_no)
                peak_since_start(ctx, runner, pass_no)
    except Exception as exc:  # noqa: BLE001 - record, go on with the next pass
        traceback.print_exc()
        ctx.errors.append({"engine": engine, "precision": precision, "pass": pass_no,
                           "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()})


# ---- results --------------------------------------------------------------------------------------


def best(ctx: Context) -> dict[tuple[str, str, str], dict]:
    """(engine, precision, scenario) -> the reported entry: the better pass (sent/s; latency: p50)."""
    out: dict[tuple[str, str, str], dict] = {}
    for e in ctx.entries:
        if e["scenario"] in ("startup", "hwm"):
            continue
        key = (e["engine"], e["precision"], e["scenario"])
        old = out.get(key)
        better = (old is None or (e["p50_ms"] < old["p50_ms"] if e["scenario"] == "latency"
                                  else e["sentences_per_s"] > old["sentences_per_s"]))
        if better:
            out[key] = e
    for e in ctx.entries:
        e["reported"] = any(e is chosen for chosen in out.values())
    return out


def peak_memory(ctx: Context, engine: str, precision: str) -> tuple[int, int]:
    """Peak RSS and PSS (MB) over every pass and scenario of an engine (the conservative figure)."""
    mine = [e for e in ctx.entries if e["engine"] == engine and e["precision"] == precision and "peak_rss_mb" in e]
    return max((e["peak_rss_mb"] for e in mine), default=0), max((e["peak_pss_mb"] for e in mine), default=0)


def compare_ids(a: list[list[int]], b: list[list[int]]) -> dict:
    """Share of identical outputs and of identical tokens (position by position) over the common sentences."""
    n = min(len(a), len(b))
    if n == 0:
        return {"sentences": 0}
    same_tokens = sum(x == y for s, t in zip(a[:n], b[:n], strict=True) for x, y in zip(s, t, strict=False))
    total = sum(max(len(s), len(t)) for s, t in zip(a[:n], b[:n], strict=True))
    first = next((i for i in range(n) if a[i] != b[i]), None)
    return {"sentences": n, "identical": sum(s == t for s, t in zip(a[:n], b[:n], strict=True)) / n,
            "tokens_identical": same_tokens / total, "first_difference": first}


def agreement(ctx: Context) -> dict:
    lang = ctx.tokenizer.language_id(TARGET_LANG)
    out: dict = {}
    ct2 = {p: ctx.outputs.get(("ct2", p, 1, "bulk")) for p in ("fp32", "int8")}
    served = {p: ctx.ids.get(f"served-{p}") for p in ("fp32", "int8")}
    pairs = {"served-fp32 ~ ct2-fp32": (served["fp32"], ct2["fp32"]),
             "served-int8 ~ ct2-int8": (served["int8"], ct2["int8"]),
             "served-int8 ~ served-fp32": (served["int8"], served["fp32"]),
             "ct2-int8 ~ ct2-fp32": (ct2["int8"], ct2["fp32"])}
    out["pairs"] = {name: compare_ids(a, b) for name, (a, b) in pairs.items() if a and b}
    # Every output: the language token first, then MAX_LENGTH - 1 more (no EOS: see the docstring).
    lengths = {}
    for name, outputs in {**{f"served-{p}": v for p, v in served.items()},
                          **{f"ct2-{p}": v for p, v in ct2.items()}}.items():
        if outputs:
            lengths[name] = {"lengths": sorted({len(o) for o in outputs}),
                             "starts_with_target_language": all(o[:1] == [lang] for o in outputs),
                             "ends_with_eos": sum(o[-1:] == [ctx.tokenizer.eos_id] for o in outputs),
                             "distinct_outputs": len({tuple(o) for o in outputs}),
                             "mean_distinct_tokens": sum(len(set(o)) for o in outputs) / len(outputs)}
    out["outputs"] = lengths
    # The served translate texts are the detokenized generate ids (the ensemble chains the same models).
    text_checks = {}
    for p in ("fp32", "int8"):
        texts, ids = ctx.outputs.get(("served", p, 1, "bulk")), served[p]
        if texts and ids:
            text_checks[f"served-{p}"] = sum(t == ctx.tokenizer.decode(i) for t, i in zip(texts, ids, strict=False)) / len(ids)
    out["translate_text_equals_detokenized_ids"] = text_checks
    # The same engine answers the same sentence alike in every scenario and pass (batching invariance).
    invariance = {}
    for engine in ("ct2", "served"):
        for p in ("fp32", "int8"):
            runs = {k: v for k, v in ctx.outputs.items() if k[0] == engine and k[1] == p}
            ref = runs.get((engine, p, 1, "bulk"))
            if ref:
                same = [all(o == ref[i] for i, o in enumerate(v)) for v in runs.values()]
                invariance[f"{engine}-{p}"] = f"{sum(same)} of {len(same)} runs identical to pass 1 bulk"
    out["across_scenarios_and_passes"] = invariance
    return out


def met(op: str, value: float | None, limit: float) -> str:
    if value is None:
        return "?"
    return "yes" if (value >= limit if op == ">=" else value <= limit) else "NO"


def targets(ctx: Context, chosen: dict, sizes: dict, steps: dict) -> list[dict]:
    def rate(engine: str, precision: str, scenario: str) -> float | None:
        e = chosen.get((engine, precision, scenario))
        return e["sentences_per_s"] if e else None

    def ratio(a: float | None, b: float | None) -> float | None:
        return a / b if a and b else None

    rows = []
    for name, (engine_p, scenario) in {"int8 bulk vs CT2 int8": ("int8", "bulk"),
                                       "serving vs CT2 int8": ("int8", "serving")}.items():
        op, limit = TARGETS[name]
        a, b = rate("served", engine_p, scenario), rate("ct2", "int8", scenario)
        rows.append({"target": f"{name} (served int8)" if scenario == "serving" else name,
                     "measured": f"{a or 0:.3g} vs {b or 0:.3g} sent/s", "ratio": ratio(a, b),
                     "limit": f"{op} {limit}x", "met": met(op, ratio(a, b), limit)})
    a, b = rate("served", "fp32", "serving"), rate("ct2", "int8", "serving")
    rows.append({"target": "(serving, served fp32 vs CT2 int8)", "measured": f"{a or 0:.3g} vs {b or 0:.3g} sent/s",
                 "ratio": ratio(a, b), "limit": "-", "met": "-"})
    op, limit = TARGETS["server RSS vs CT2 (same precision)"]
    for p in ("fp32", "int8"):
        (rs, ps), (rc, pc) = peak_memory(ctx, "served", p), peak_memory(ctx, "ct2", p)
        rows.append({"target": f"server RSS vs CT2 RSS, {p}", "measured": f"{rs} vs {rc} MB (PSS {ps} vs {pc})",
                     "ratio": ratio(rs, rc), "limit": f"{op} {limit}x", "met": met(op, ratio(rs, rc), limit)})
    checkpoint = sizes["checkpoint"]["bytes_on_disk"]
    for p, (name, other, other_name) in {
            "fp32": ("repository fp32 on disk vs checkpoint", checkpoint, "checkpoint"),
            "int8": ("repository int8 on disk vs CT2 int8 model", sizes["ct2-int8"]["bytes_on_disk"], "CT2 int8")}.items():
        op, limit = TARGETS[name]
        repo = sizes[f"repository-{p}"]["bytes_on_disk"]
        rows.append({"target": name, "measured": f"{repo / 1e6:.0f} vs {other / 1e6:.0f} MB ({other_name})",
                     "ratio": repo / other, "limit": f"{op} {limit}x", "met": met(op, repo / other, limit)})
    op, limit = TARGETS["export peak RSS vs checkpoint on disk"]
    for p in ("fp32", "int8"):
        peak = steps.get(f"export {p}", {}).get("peak_rss_mb")
        value = peak * 2**20 / checkpoint if peak else None
        rows.append({"target": f"export {p} peak RSS vs checkpoint on disk",
                     "measured": f"{peak or 0} MB vs {checkpoint / 2**20:.0f} MiB", "ratio": value,
                     "limit": f"{op} {limit}x", "met": met(op, value, limit)})
    return rows


def tokens_per_sentence(ctx: Context, engine: str, precision: str) -> float:
    """Mean generated tokens (language token and any EOS included) of the engine's bulk outputs."""
    outputs = ctx.ids.get(f"served-{precision}") if engine == "served" else ctx.outputs.get(("ct2", precision, 1, "bulk"))
    return sum(map(len, outputs)) / len(outputs) if outputs else float("nan")


def speed_vs(mine: dict | None, other: dict | None) -> str:
    """Speed relative to ``other`` (higher is faster): sentences/s, or other's p50 / p50 for latency."""
    if not mine or not other:
        return "-"
    if mine["scenario"] == "latency":
        return f"{other['p50_ms'] / mine['p50_ms']:.2f}x"
    return f"{mine['sentences_per_s'] / other['sentences_per_s']:.2f}x"


def engine_table(ctx: Context, chosen: dict) -> str:
    header = ["engine", "bulk sent/s", "bulk tok/s", "serving sent/s", "serving p50 / p90 ms", "latency p50 / p90 ms",
              "vs CT2 same precision (bulk / serving / latency)", "peak RSS MB (PSS)", "others' CPU (max)"]
    scenarios = ("bulk", "serving", "latency")
    rows = []
    for p in ("fp32", "int8"):
        for engine in ("served", "ct2"):
            bulk, serving, latency = (chosen.get((engine, p, s)) for s in scenarios)
            versus = " / ".join(speed_vs(chosen.get((engine, p, s)), chosen.get(("ct2", p, s))) for s in scenarios)
            rss, pss = peak_memory(ctx, engine, p)
            found = [e for e in (bulk, serving, latency) if e]
            rows.append([
                f"{engine} {p}",
                bulk["sentences_per_s"] if bulk else "-",
                bulk["sentences_per_s"] * tokens_per_sentence(ctx, engine, p) if bulk else "-",
                serving["sentences_per_s"] if serving else "-",
                f"{serving['p50_ms']:.0f} / {serving['p90_ms']:.0f}" if serving else "-",
                f"{latency['p50_ms']:.0f} / {latency['p90_ms']:.0f}" if latency else "-",
                versus if engine == "served" else "-",
                f"{rss} ({pss})",
                f"{max((e['other_processes_cpu_pct'] for e in found), default=0):.0f}%",
            ])
    return markdown_table(header, rows)


# ---- main -----------------------------------------------------------------------------------------


def setup(shape: Shape, work: Path, info: dict) -> Context:
    from _compare_runners import served_layout

    from nmtserve.model.hf_tokenizer import MultilingualTokenizer

    checkpoint = work / "checkpoint"
    steps = info["setup"] = {}

    def once(name: str, done: Path, fn: Callable[..., dict], *args) -> None:
        marker = done.with_name(done.name + ".bench-done")  # beside: a repository holds models only
        if marker.is_file():  # --workdir reuse
            steps[name] = json.loads(marker.read_text())
            steps[name]["reused"] = True
            print(f"setup: {name} reused from {done}", flush=True)
            return
        print(f"setup: {name} ... (load {load_average()})", flush=True)
        shutil.rmtree(done, ignore_errors=True)
        steps[name] = in_child(fn, *args)
        marker.write_text(json.dumps(steps[name]))
        print(f"setup: {name} done in {steps[name]['wall_s']} s, peak RSS {steps[name]['peak_rss_mb']} MB", flush=True)

    once("checkpoint", checkpoint, build_checkpoint, str(checkpoint), asdict(shape))
    tokenizer = MultilingualTokenizer.from_directory(checkpoint)
    texts = sentences(tokenizer, shape.need())
    gate = work / "gate.en"
    gate.write_text("\n".join(texts[:GATE_SENTENCES]) + "\n", encoding="utf-8")
    repos = {p: work / f"repository-{p}" for p in ("fp32", "int8")}
    ct2_dirs = {p: work / f"ct2-{p}" for p in ("fp32", "int8")}
    for p in ("fp32", "int8"):
        once(f"export {p}", repos[p], export_repository, str(checkpoint), str(repos[p]), p, str(gate),
             shape.external_data_bytes)
    for p in ("fp32", "int8"):
        once(f"ct2 convert {p}", ct2_dirs[p], convert_ct2, str(checkpoint), str(ct2_dirs[p]),
             "int8" if p == "int8" else None)
    layout = ""
    for p in ("fp32", "int8"):
        layout = served_layout(repos[p], THREADS)
    # CT2's vocabulary: the tokenizer's entries at their ids, then its converter's fillers up to the
    # model's size, so that CT2 token i is id i for every id either engine can produce.
    vocab = json.loads((ct2_dirs["fp32"] / "shared_vocabulary.json").read_text(encoding="utf-8"))
    from tokenizers import Tokenizer

    backend = Tokenizer.from_file(str(checkpoint / "tokenizer.json"))
    wrong = [i for i in range(tokenizer.vocab_size) if backend.id_to_token(i) != vocab[i]]
    if len(vocab) != shape.vocab or wrong:
        raise RuntimeError(f"CT2 vocabulary: {len(vocab)} entries (model {shape.vocab}); ids whose token differs "
                           f"from the tokenizer's: {wrong[:10]}")
    info["ct2_vocabulary"] = (f"{len(vocab)} entries: the tokenizer's {tokenizer.vocab_size} at their ids, then "
                              f"CTranslate2's own fillers {vocab[tokenizer.vocab_size]!r}...{vocab[-1]!r} (its converter "
                              "pads the vocabulary to the model's size; nothing to do in the bench)")
    log_dir = BENCH / "results" / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    return Context(shape, work, log_dir, texts, [tokenizer.encode(t, SOURCE_LANG) for t in texts], tokenizer, repos,
                   ct2_dirs, vocab, served_layout=layout)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    counts = "\n".join(f"  {s.name}: bulk {s.bulk} in requests of {s.batch} (warm-up {s.warmup}), serving {s.serving} "
                       f"with {s.clients} clients, latency {s.latency}" for s in SHAPES.values())
    ap = argparse.ArgumentParser(description=__doc__, epilog=f"sentences per scenario and pass:\n{counts}",
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", choices=list(SHAPES), required=True, help="600m: the real run; small: a dry run")
    ap.add_argument("--rounds", type=int, default=2, help="passes of each engine, alternating (default 2)")
    ap.add_argument("--workdir", type=Path, default=None,
                    help="keep the built checkpoint, repositories and CT2 models here and reuse them on the next "
                         "run (default: a temporary directory, removed at the end)")
    args = ap.parse_args(argv)
    if args.rounds < 1:
        ap.error("--rounds must be >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    shape = SHAPES[args.size]
    started = time.perf_counter()
    work = args.workdir or Path(tempfile.mkdtemp(prefix=f"nmtserve-multilingual-{shape.name}-"))
    work.mkdir(parents=True, exist_ok=True)
    info: dict = {"machine": machine(),
                  "versions": versions("torch", "onnxruntime", "ctranslate2", "transformers", "nvidia-pytriton",
                                       "tritonclient", "numpy"),
                  "settings": {"size": asdict(shape), "beam": BEAM, "max_length": MAX_LENGTH, "threads": THREADS,
                               "languages": f"{SOURCE_LANG} -> {TARGET_LANG}", "rounds": args.rounds,
                               "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "(unset)"),
                               "final_norm_gain": FINAL_NORM_GAIN, "export_max_batch": MAX_SENTENCES,
                               "reported": "the better pass of each engine (sent/s; latency: p50); memory: the peak "
                                           "over every pass"}}
    ctx = None
    try:
        ctx = setup(shape, work, info)
        info["sizes_on_disk"] = sizes = {"checkpoint": disk_usage(work / "checkpoint"),
                                         **{f"repository-{p}": disk_usage(ctx.repos[p]) for p in ("fp32", "int8")},
                                         **{f"ct2-{p}": disk_usage(ctx.ct2_dirs[p]) for p in ("fp32", "int8")}}
        info["served_layout"] = ctx.served_layout
        info["source_tokens"] = {"min": min(map(len, ctx.sources)), "max": max(map(len, ctx.sources)),
                                 "mean": sum(map(len, ctx.sources)) / len(ctx.sources)}
        for r in range(1, args.rounds + 1):
            for precision in ("fp32", "int8"):
                for engine in ("ct2", "served"):
                    run_pass(ctx, engine, precision, r)
        chosen = best(ctx)
        info["agreement"] = agreement(ctx)
        info["targets"] = targets(ctx, chosen, sizes, info["setup"])
        info["measurements"] = ctx.entries
        info["errors"] = ctx.errors
    finally:
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)
    info["wall_s"] = round(time.perf_counter() - started, 1)
    info["bench_process_peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    info["machine"]["load_average_end"] = load_average()
    path = write_json(f"multilingual-{shape.name}", info)

    m = info["machine"]
    params = info["setup"]["checkpoint"]["parameters"]
    print(f"\n{shape.name}: M2M100 (NLLB-shaped) d_model {shape.d_model}, {shape.layers}+{shape.layers} layers, "
          f"{shape.heads} heads, FFN {shape.ffn}, vocabulary {shape.vocab:,} ({params / 1e6:.0f}M parameters, random); "
          f"beam {BEAM}, {MAX_LENGTH} new tokens, {THREADS} threads; {m['nproc']} CPUs ({m['cpu']}), "
          f"load {m['load_average_1_5_15']} -> {m['load_average_end']}; {info['wall_s'] / 60:.1f} min")
    for name, step in info["setup"].items():
        print(f"* {name}: {step['wall_s']} s, peak RSS {step['peak_rss_mb']} MB" + (" (reused)" if step.get("reused") else ""))
    gate = info["setup"].get("export int8", {}).get("quality_gate")
    if gate:
        print(f"* int8 quality gate ({gate.get('sentences')} sentences, limit off; it compares texts, and most ids of a "
              f"random model detokenize to nothing with this tokenizer: see the ids below): "
              f"{100 * gate.get('identical', 0):.0f}% identical to fp32, token agreement "
              f"{100 * gate.get('token_agreement', 0):.0f}%")
    for engine in ("served", "ct2"):
        for p in ("fp32", "int8"):
            ups = [e for e in ctx.entries if (e["engine"], e["precision"], e["scenario"]) == (engine, p, "startup")]
            hwm = max((e["hwm_mb"] for e in ctx.entries
                       if (e["engine"], e["precision"], e["scenario"]) == (engine, p, "hwm")), default=0)
            if ups:
                print(f"* {engine} {p}: ready in {', '.join(str(e['seconds']) for e in ups)} s; idle RSS "
                      f"{ups[0]['idle_rss_mb']} MB ({', '.join(f'{k} {v}' for k, v in ups[0]['idle_rss_by_process_mb'].items())}); "
                      f"peak RSS since start (VmHWM summed) {hwm} MB")
    print(f"* served: {ctx.served_layout}; CT2: 1 x {THREADS} (bulk, latency), 2 x {THREADS // 2} (serving)")
    print(f"* {info['ct2_vocabulary']}")
    print()
    print(engine_table(ctx, chosen))
    agree = info["agreement"]
    print("\nOutputs (bulk sentences, token ids):")
    for name, a in agree["pairs"].items():
        print(f"* {name}: {100 * a['identical']:.1f}% identical ({a['sentences']} sentences), "
              f"{100 * a['tokens_identical']:.1f}% of tokens")
    for name, o in agree["outputs"].items():
        print(f"* {name}: lengths {o['lengths']}, language token first: {o['starts_with_target_language']}, "
              f"{o['distinct_outputs']} distinct outputs, {o['mean_distinct_tokens']:.1f} distinct tokens per output")
    print(f"* translate text == detokenized generate ids: {agree['translate_text_equals_detokenized_ids']}")
    print(f"* the same outputs in every scenario and pass: {agree['across_scenarios_and_passes']}")
    print("\nTargets:\n")
    print(markdown_table(["target", "measured", "ratio", "limit", "met"],
                         [[t["target"], t["measured"], "-" if t["ratio"] is None else f"{t['ratio']:.2f}x", t["limit"],
                           t["met"]] for t in info["targets"]]))
    for err in ctx.errors:
        print(f"\nERROR {err['engine']}-{err['precision']} pass {err['pass']}: {err['error']}")
    print(f"\nwritten {path}")
    return 1 if ctx.errors else 0


if __name__ == "__main__":
    sys.exit(main())
