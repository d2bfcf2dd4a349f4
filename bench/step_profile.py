"""Where a decode step's time goes (issue 49): graph kernels, ONNX Runtime's per-call and per-node
overhead, the search and the cache bookkeeping, the engine loop, and the Triton hops.

    python bench/step_profile.py [--shapes demo,student,base] [--precisions fp32,int8]
                                 [--threads 1] [--batch 64] [--sentences 128] [--json OUT]

Per shape (``demo``: the shipped checkpoint; ``student``: Bergamot's "tiny" student shape,
random weights, ``bench/_marian_base.STUDENT_CONFIG``; ``base``: opus-mt-base's, random weights)
and precision, the shape is exported as served (ONNX Runtime CPU graphs, the fused decoder) and
the served engine (``InflightBatcher``, one decode loop of ``--threads`` ONNX Runtime threads)
decodes, beam 4:

* **one sentence**: ``--sentences`` requests of one sentence, one at a time;
* **full batch**: the same sentences in requests of ``--batch`` (a running batch of up to
  ``--batch`` x 4 rows).

The engine's time is split by instruments around its parts (this script wraps them; the engine
is not changed), each as microseconds per decoder step (a step runs every row of the running
batch once), from a run **without** ONNX Runtime's profiler (the profiler writes an event per
node: it made the demo's one-sentence decode 4x slower, so its kernel times are not used for the
split):

* ``session_run``: the decoder's ``session.run`` wall time, split into
  * ``ort_overhead``: ONNX Runtime's per-call and per-node work (the Python binding's conversion
    of the same feeds, input binding, the executor between nodes, the outputs' allocation),
    measured by replaying every step's feeds through a **no-work twin**: a graph with the
    decoder's inputs and a chain of as many cheap nodes as the optimized decoder runs
    (``Shape`` then ``Add``s on a 2-element tensor), on the same session options;
  * ``kernels``: the rest (``session_run`` less ``ort_overhead``): the graph's arithmetic;
  With the compiled decoder step (fused CPU graphs, fp32 and int8, ``nmtserve_native.DecoderStep``, served
  by default) ``session_run`` is ``NativeDecoder.run_pool`` (the engine's step on its own pools:
  no feeds, the new K/V written in place; ``run_step`` where the engine builds feeds), ``kernels``
  the compiled call inside it (timed around it: the arithmetic, pybind11's argument handling and
  the call's own checks and K/V writes, a few microseconds) and ``ort_overhead`` the wrapper's
  Python around that call; there are no nodes and no twin. Where the engine runs steps with no
  Python between them (``run_steps``, the default with the compiled step; NMTSERVE_NATIVE_LOOP=0
  turns it off for a "before"), the module's own clock (``nmtserve_native.loop_clock``) splits
  each call: its decoder kernels count in ``kernels``, its compiled search step and ancestor
  table in ``search``;
* ``search``: ``BeamBatch.advance`` (candidates, finished hypotheses, the length penalty,
  forced tokens and constraints);
* ``cache``: the step's feeds (``_feeds``: the ancestor table's window, the masks), the new K/V
  into the pool (``_store_new_kv``) and the table's reordering by the parents;
* ``loop``: the rest of the engine's loop (admission, retiring finished sentences, Python
  between the parts);
* ``host`` = everything but ``kernels``: the figure that bounds a GPU;
* ``encoder``: reported apart.

A second, profiled run gives the nodes per run (what the twin copies) and ONNX Runtime's own
kernel sum (``profiled_kernels``, for reference: inflated at small shapes).

**Triton hops**: the same sentences through the real ``tritonserver`` (model ``translate``,
the tokenize -> generate -> detokenize ensemble, gRPC), one sentence at a time and in requests
of ``--batch``, against the bare engine in the server's own CPU layout (``cpu_layout``: two
decode loops of one thread on 2 cores); the difference, per request, is what the ensemble's
Python-backend hops, tokenizing and gRPC cost.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

BEAM = 4
MAX_NEW = 32  # random-weight shapes rarely end: every shape generates at most this many tokens


class Timers:
    """Seconds per part, summed over calls."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)

    def wrap(self, owner, name: str, part: str) -> None:
        original = getattr(owner, name)
        timers = self

        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                timers.seconds[part] += time.perf_counter() - start
                timers.calls[part] += 1

        setattr(owner, name, timed)


def alternating_parser(doc: str) -> argparse.ArgumentParser:
    """The options of the alternating-round benches (bench/native_search.py, bench/native_step.py):
    shapes, precisions, rounds, and the one-sentence and bulk loads."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", default="demo,student")
    parser.add_argument("--precisions", default="fp32,int8")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--one", type=int, default=32, help="one-sentence requests, one at a time")
    parser.add_argument("--sentences", type=int, default=128, help="bulk: sentences in requests of --batch")
    parser.add_argument("--batch", type=int, default=64)
    return parser


def checkpoint_dir(shape: str, tmp: Path) -> Path:
    if shape == "demo":
        return ROOT / "models" / "en-fr-numbers"
    import _marian_base as mb

    config = mb.STUDENT_CONFIG if shape == "student" else mb.BASE_CONFIG
    return mb.build_marian(tmp / shape, config=config)


def sentences(shape: str, n: int) -> list[str]:
    if shape == "demo":
        return (ROOT / "models" / "en-fr-numbers" / "test.en").read_text(encoding="utf-8").splitlines()[:n]
    import _marian_base as mb

    return mb.base_sentences(n)


def export_shape(model_dir: Path, repo: Path, precision: str, texts: list[str]) -> None:
    from nmtserve.export.pipeline import ExportOptions, export

    gate = {}
    if precision == "int8" and model_dir.name != "en-fr-numbers":  # random weights: the gate says nothing
        source = repo.parent / f"gate-{precision}.en"
        source.parent.mkdir(parents=True, exist_ok=True)
        source.write_text("\n".join(texts[:100]) + "\n", encoding="utf-8")
        gate = {"gate_source": source, "max_bleu_drop": 100.0}
    export(model_dir, ExportOptions(repository=repo, skip_parity=True, max_batch=64, max_target_len=200,
                                    max_source_len=200, precision=precision, **gate))


def kernel_seconds(profile: Path, skip_runs: int) -> tuple[float, int, int]:
    """(seconds in the decoder's node kernels, nodes run, model runs) from ONNX Runtime's profile,
    after its first ``skip_runs`` runs (the warm-up)."""
    events = json.loads(profile.read_text())
    runs = sorted((e for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"),
                  key=lambda e: e["ts"])
    if len(runs) <= skip_runs:
        return 0.0, 0, 0
    since = runs[skip_runs]["ts"]
    kernels = [e for e in events if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time")
               and e["ts"] >= since]
    return sum(e["dur"] for e in kernels) / 1e6, len(kernels), len(runs) - skip_runs


def no_work_twin(decoder: Path, nodes: int, threads: int):
    """A session with the decoder's inputs and a chain of ``nodes`` nodes that do no work (``Shape``
    of ``input_ids``, then ``Add``s of a 2-element tensor), on the served session options: what
    ONNX Runtime costs per call and per node, whatever the graph computes."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper

    import nmtserve.runtime.onnxruntime as ortrt

    graph = onnx.load(str(decoder), load_external_data=False).graph
    names = [i.name for i in graph.input]
    chain = [helper.make_node("Shape", ["input_ids"], ["n0"])]
    chain += [helper.make_node("Add", [f"n{i}", f"n{i}"], [f"n{i + 1}"]) for i in range(max(nodes - 1, 0))]
    out = helper.make_tensor_value_info(chain[-1].output[0], TensorProto.INT64, [2])
    model = helper.make_model(helper.make_graph(chain, "twin", list(graph.input), [out]),
                              opset_imports=[helper.make_opsetid("", 17)])
    so = ortrt.session_options(threads)
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # keep every node
    session = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    assert set(names) == {i.name for i in session.get_inputs()}
    return session, out.name


def profile_engine(art: Path, ids: list[list[int]], batch: int, threads: int, ort_profile: bool,
                   workdir: Path, workers: int = 1, capture: bool = False) -> dict:
    """Decode ``ids`` in requests of ``batch`` on a fresh engine with every part timed (with
    ``workers`` > 1: an ``EnginePool``, the server's layout, wall time only). ``capture``: keep
    every decoder step's feeds (``out["feeds"]``) for the no-work twin."""
    import nmtserve.runtime.onnxruntime as ortrt
    from nmtserve.decoding import native as native_module
    from nmtserve.decoding import search as search_module
    from nmtserve.decoding.search import SearchOptions
    from nmtserve.engine import EnginePool, InflightBatcher
    from nmtserve.engine import batcher as batcher_module
    from nmtserve.runtime.spec import ModelSpec

    spec = ModelSpec.load(art / "model.json")
    timers = Timers()
    original_options = ortrt.session_options

    def profiled_options(n=None):
        so = original_options(n)
        if ort_profile:
            so.enable_profiling = True
            so.profile_file_prefix = str(workdir / f"ort-{time.monotonic_ns()}")
        return so

    ortrt.session_options = profiled_options
    try:
        model = ortrt.OnnxModel(art / "encoder.onnx", art / "decoder.onnx", spec, threads=threads)
    finally:
        ortrt.session_options = original_options
    # ONNX Runtime's encoder only where it serves (its int8 session is refused where its sums are not exact)
    encoder_run = model.encoder.run if model.native_encoder is None else None
    captured: list[dict] = []

    class Session:  # ort.InferenceSession's run is read-only on the object: stand in for it
        def __init__(self, run, part):
            self.run = run
            timers.wrap(self, "run", part)

    class Compiled:  # DecoderStep's methods are read-only on the object: stand in for it
        def __init__(self, step):
            self.run, self.run_pool, self.run_steps = step.run, step.run_pool, step.run_steps
            timers.wrap(self, "run", "kernels")
            timers.wrap(self, "run_pool", "kernels")

    native = model.native_step
    if native is not None:
        # The compiled step (fp32): ``session_run`` is NativeDecoder.run_step (the feeds made
        # contiguous, the call, the outputs picked); ``kernels`` is DecoderStep.run inside it
        # (the kernels and pybind11's argument handling, a few microseconds).
        # The engine calls ``run_pool`` (``OnnxModel.pool_step``: the step on the engine's own pools,
        # no feeds built, the new K/V written in place) where it can: wrapped the same way.
        timers.wrap(native, "run_step", "session_run")
        timers.wrap(native, "run_pool", "session_run")
        model.pool_step = native.run_pool
        # ... and its runs of steps with no Python between them (``run_steps``: the decoder, the
        # compiled search, the ancestor table; NMTSERVE_NATIVE_LOOP=0 turns them off): the call is
        # timed here, its kernels and the rest (search and table) by the module's own clock.
        timers.wrap(native, "run_steps", "session_run")
        model.pool_steps = native.run_steps
        native.step = Compiled(native.step)
    else:
        decoder_run = model.decoder.run

        def keep(names, feeds):
            captured.append(dict(feeds))
            return decoder_run(names, feeds)

        model.decoder_session = model.decoder
        model.decoder = Session(keep if capture else decoder_run, "session_run")
    if encoder_run is not None:
        model.encoder_session = model.encoder
        model.encoder = Session(encoder_run, "encoder")
    else:  # the compiled encoder serves (runtime/native_step.py): time it
        timers.wrap(model.native_encoder, "encode", "encoder")
    saved = {}
    if workers == 1:
        for owner, name, part in ((search_module.BeamBatch, "advance", "search"),
                                  (batcher_module.InflightBatcher, "_feeds", "cache"),
                                  (batcher_module.InflightBatcher, "_store_new_kv", "cache"),
                                  (batcher_module.InflightBatcher, "_advance", "advance_all"),
                                  (batcher_module.InflightBatcher, "_step", "step")):
            saved[(owner, name)] = getattr(owner, name)
            timers.wrap(owner, name, part)
    engine = (InflightBatcher(model, max_sentences=64, max_beam=BEAM) if workers == 1 else
              EnginePool(model, workers, max_sentences=64, max_beam=BEAM)).start()
    options = SearchOptions(beam_size=BEAM, max_length=MAX_NEW)
    try:
        engine.translate(ids[:batch], options, timeout=600)  # warm-up: arenas, first-run kernels
        timers.seconds.clear()
        timers.calls.clear()
        captured.clear()
        clock = native_module.module.loop_clock if native is not None and native_module.module else None
        if clock is not None:
            clock(reset=True)
        steps_before = engine.stats["steps"] if workers == 1 else 0
        start = time.perf_counter()
        for at in range(0, len(ids), batch):
            engine.translate(ids[at:at + batch], options, timeout=600)
        wall = time.perf_counter() - start
        steps = engine.stats["steps"] - steps_before if workers == 1 else 0
    finally:
        engine.stop()
        for (owner, name), fn in saved.items():
            setattr(owner, name, fn)
    out: dict = {"wall_s": round(wall, 3), "steps": steps, "requests": -(-len(ids) // batch)}
    if workers > 1:
        return out
    seconds = dict(timers.seconds)
    out["native"] = native is not None
    if native is not None:
        looped = clock(reset=True) if clock is not None else {"calls": 0, "steps": 0, "kernels_ns": 0, "total_ns": 0}  # run_steps: its kernels; the rest is the search and the table
        rest = (looped["total_ns"] - looped["kernels_ns"]) / 1e9
        seconds["session_run"] = seconds.get("session_run", 0.0) - rest
        seconds["search"] = seconds.get("search", 0.0) + rest
        seconds["advance_all"] = seconds.get("advance_all", 0.0) + rest  # cache = advance_all - search: unchanged
        out["native_kernels_s"] = seconds.get("kernels", 0.0) + looped["kernels_ns"] / 1e9
        out["compiled_loop"] = {"calls": looped["calls"], "steps": looped["steps"]}
    elif ort_profile:
        path = Path(model.decoder_session.end_profiling())
        kernels, nodes, runs = kernel_seconds(path, steps_before)
        out["nodes_per_run"] = round(nodes / max(runs, 1), 1)
        out["profiled_kernels_us_per_step"] = round(1e6 * kernels / max(steps, 1), 1)
    run_s = seconds.get("session_run", 0.0)
    per_step = {"session_run": run_s, "search": seconds.get("search", 0.0)}
    # _advance holds the search's advance and the table's reordering
    per_step["cache"] = seconds.get("cache", 0.0) + seconds.get("advance_all", 0.0) - seconds.get("search", 0.0)
    per_step["encoder"] = seconds.get("encoder", 0.0)
    per_step["loop"] = wall - run_s - per_step["search"] - per_step["cache"] - per_step["encoder"]
    out["us_per_step"] = {k: round(1e6 * v / max(steps, 1), 1) for k, v in per_step.items()}
    out["sentences_per_s"] = round(len(ids) / wall, 1)
    if capture:
        out["feeds"] = list(captured)
    return out


def split_kernels(entry: dict, twin, twin_output: str) -> None:
    """Replay every captured step's feeds through the no-work twin: ``ort_overhead``, ``kernels``
    (the decoder's run less it) and ``host`` (everything but the kernels) per step."""
    feeds = entry.pop("feeds")
    us = entry["us_per_step"]
    if entry.pop("native"):  # the compiled step: its call timed inside (profile_engine)
        kernels = 1e6 * entry.pop("native_kernels_s") / max(entry["steps"], 1)
        us["kernels"] = round(kernels, 1)
        us["ort_overhead"] = round(us["session_run"] - kernels, 1)  # the wrapper's Python, not ONNX Runtime
        us["host"] = round(us["ort_overhead"] + us["search"] + us["cache"] + us["loop"], 1)
        return
    for f in feeds[:3]:
        twin.run([twin_output], f)  # warm-up
    start = time.perf_counter()
    for f in feeds:
        twin.run([twin_output], f)
    overhead = 1e6 * (time.perf_counter() - start) / max(entry["steps"], 1)
    us["ort_overhead"] = round(overhead, 1)
    us["kernels"] = round(us["session_run"] - overhead, 1)
    us["host"] = round(us["ort_overhead"] + us["search"] + us["cache"] + us["loop"], 1)


def triton_wall(repo: Path, texts: list[str], batch: int) -> float:
    """Seconds for ``texts`` through the served ``translate`` model, requests of ``batch``."""
    import tritonclient.grpc as grpcclient

    from nmtserve.server.launcher import ServerConfig, TritonServer

    def inputs(chunk):
        text = grpcclient.InferInput("TEXT", [len(chunk)], "BYTES")
        text.set_data_from_numpy(np.array([t.encode() for t in chunk], dtype=np.object_))
        length = grpcclient.InferInput("MAX_LENGTH", [1], "INT32")
        length.set_data_from_numpy(np.array([MAX_NEW], dtype=np.int32))
        return [text, length]

    with TritonServer(ServerConfig.on_free_ports(repo)) as server:
        client = grpcclient.InferenceServerClient(server.urls.grpc_address)
        client.infer("translate", inputs(texts[:batch]))  # warm-up
        start = time.perf_counter()
        for at in range(0, len(texts), batch):
            client.infer("translate", inputs(texts[at:at + batch]))
        return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", default="demo,student,base")
    parser.add_argument("--precisions", default="fp32,int8")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--sentences", type=int, default=128)
    parser.add_argument("--one", type=int, default=32, help="one-sentence requests")
    parser.add_argument("--no-triton", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    from nmtserve.model.tokenizer import load_tokenizer
    from nmtserve.runtime.spec import ModelSpec

    report: dict = {"cpu_flags": _cpu_flags(), "threads": args.threads, "beam": BEAM, "max_new_tokens": MAX_NEW}
    with tempfile.TemporaryDirectory(prefix="nmtserve-step-profile-") as name:
        tmp = Path(name)
        for shape in args.shapes.split(","):
            model_dir = checkpoint_dir(shape, tmp)
            texts = sentences(shape, max(args.sentences, args.one))
            for precision in args.precisions.split(","):
                repo = tmp / f"{shape}-{precision}" / "model_repository"
                started = time.perf_counter()
                export_shape(model_dir, repo, precision, texts)
                art = repo / "generate" / "1"
                spec = ModelSpec.load(art / "model.json")
                tok = load_tokenizer(art, spec)
                ids = [tok.encode(t) for t in texts]
                entry: dict = {"export_s": round(time.perf_counter() - started, 1)}
                for load, batch, n in (("one_sentence", 1, args.one), ("full_batch", args.batch, args.sentences)):
                    workdir = tmp / f"{shape}-{precision}-{load}"
                    workdir.mkdir()
                    profiled = profile_engine(art, ids[:n], batch, args.threads, True, workdir)
                    result = profile_engine(art, ids[:n], batch, args.threads, False, workdir, capture=True)
                    if profiled["native"]:  # the compiled decoder step: no graph nodes, no twin
                        split_kernels(result, None, "")
                        result["decoder_step"] = "compiled"
                    else:
                        nodes = int(profiled["nodes_per_run"])
                        twin, twin_output = no_work_twin(art / "decoder.onnx", nodes, args.threads)
                        split_kernels(result, twin, twin_output)
                        result["nodes_per_run"] = nodes
                        result["profiled_kernels_us_per_step"] = profiled["profiled_kernels_us_per_step"]
                        result["decoder_step"] = "onnxruntime"
                    entry[load] = result
                    if not args.no_triton:
                        from nmtserve.server.triton_models import cpu_layout

                        workers, threads = cpu_layout("inprocess")
                        served = triton_wall(repo, texts[:n], batch)
                        bare = profile_engine(art, ids[:n], batch, threads or 1, False, workdir, workers=workers)
                        result["triton_wall_s"] = round(served, 3)
                        result["engine_wall_s_server_layout"] = bare["wall_s"]
                        result["hops_ms_per_request"] = round(1000 * (served - bare["wall_s"]) / result["requests"], 2)
                report[f"{shape}/{precision}"] = entry
                print(f"{shape}/{precision}", json.dumps(entry, indent=1), flush=True)
    print(_table(report))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


def _cpu_flags() -> str:
    try:
        flags = next(line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags"))
    except (OSError, StopIteration):
        return ""
    wanted = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_int8")
    return " ".join(f for f in wanted if f" {f}" in flags)


def _table(report: dict) -> str:
    parts = ("kernels", "ort_overhead", "search", "cache", "loop", "host")  # unprofiled
    lines = ["| shape / precision / load | steps | " + " | ".join(f"{p} us/step" for p in parts)
             + " | encoder us/step | decoder step | nodes/run | Triton hops ms/request |",
             "|---" * (len(parts) + 6) + "|"]
    for key, entry in report.items():
        if "/" not in key:
            continue
        for load in ("one_sentence", "full_batch"):
            e = entry[load]
            us = e["us_per_step"]
            lines.append(f"| {key} / {load} | {e['steps']} | " + " | ".join(str(us[p]) for p in parts)
                         + f" | {us['encoder']} | {e.get('decoder_step', '')} | {e.get('nodes_per_run', '')} | {e.get('hops_ms_per_request', '')} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
