"""Host-side cost of one in-flight batcher step, with a runtime that costs (almost) nothing.

    python bench/host_overhead.py [--sentences 640] [--batch 64] [--beam 4] [--vocab 800] [--profile]
    python bench/host_overhead.py --layers 1 --heads 1 --d-k 8   # the GPU path's host time

On a GPU the decoder step of a small model takes about a millisecond; what the Python engine
spends around it per step (admission, the cache tables, the cross-attention memory restack,
the search) then bounds the throughput. This measures that bound on the machine it runs on:
``InflightBatcher`` over a null runtime that returns candidates drawn from a precomputed bank
(EOS getting likelier with length, so sentences end at varied lengths) and zero K/V. Reports
host milliseconds per step, steps, and the sentences/s ceiling; ``--profile`` adds the top
functions. Results go to bench/results/host-overhead-*.json.

The engine's share leaves out the null runtime's own time (its top-k, which a GPU's decoder graph
does). With the default K/V shape the host also copies each step's K/V into the pool; a GPU makes
those copies on its stream. ``--layers 1 --heads 1 --d-k 8`` shrinks the K/V to nothing, so what
is left is the host's own work on the GPU path (the search, the tables, admission, retirement),
without the real runtime's calls (its uploads of the step's small tables, its enqueue, the
download of the candidates).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time

import numpy as np
from _common import load_average, machine, versions, write_json

from nmtserve.decoding.search import SearchOptions
from nmtserve.engine import InflightBatcher
from nmtserve.runtime.spec import ModelSpec


class NullRuntime:
    """Each hypothesis' best candidates from a bank of random log-probs; K/V zeros. Costs ~0.1 ms per step."""

    def __init__(self, spec: ModelSpec, batch: int, beam: int, seed: int = 0):
        self.spec = spec
        rng = np.random.default_rng(seed)
        bank = rng.standard_normal((8, batch, beam, spec.vocab)).astype(np.float32) * 3
        bank -= np.log(np.exp(bank).sum(-1, keepdims=True))
        bank[..., spec.eos_id] = -np.inf  # EOS is added per step (run_step)
        m = spec.dims.candidates - 1
        self.top_ids = np.argsort(-bank, axis=-1, kind="stable")[..., :m].astype(np.int32)
        self.top = np.take_along_axis(bank, self.top_ids, axis=-1)
        self.calls = 0
        self.seconds = 0.0  # spent in run_step: what a GPU's decoder graph does (its top-k included)
        self.kv = np.zeros((batch, beam, spec.layers, spec.heads, spec.d_k), np.float32)

    def encode(self, src: np.ndarray):
        b, s = src.shape
        spec = self.spec
        return ([np.zeros((b, spec.heads, spec.d_k, s), np.float32)] * spec.layers,
                [np.zeros((b, spec.heads, s, spec.d_k), np.float32)] * spec.layers)

    def run_step(self, feeds: dict) -> dict:
        started = time.perf_counter()
        try:
            return self._run_step(feeds)
        finally:
            self.seconds += time.perf_counter() - started

    def _run_step(self, feeds: dict) -> dict:
        b, k = feeds["input_ids"].shape
        self.calls += 1
        i = self.calls % len(self.top)
        eos = np.broadcast_to((-4.0 + 0.15 * feeds["position"])[:, None, None], (b, k, 1))  # likelier with length
        top = np.concatenate([eos.astype(np.float32), self.top[i, :b, :k]], axis=-1)
        ids = np.concatenate([np.full((b, k, 1), self.spec.eos_id, np.int32), self.top_ids[i, :b, :k]], axis=-1)
        order = np.argsort(-top, axis=-1, kind="stable")
        top, ids = np.take_along_axis(top, order, -1), np.take_along_axis(ids, order, -1)
        kv = self.kv[:b, :k]
        return {"top_log_probs": top, "top_ids": ids, "new_key": kv, "new_value": kv}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sentences", type=int, default=640)
    ap.add_argument("--batch", type=int, default=64, help="running sentences")
    ap.add_argument("--beam", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=800)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--d-k", type=int, default=64)
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args(argv)

    spec = ModelSpec(layers=args.layers, heads=args.heads, d_k=args.d_k, vocab=args.vocab, max_positions=512, pad_id=0, bos_id=1,
                     eos_id=2, unk_id=3, max_batch=args.batch)
    rng = np.random.default_rng(1)
    sources = [[5] * int(rng.integers(4, 30)) + [2] for _ in range(args.sentences)]
    options = SearchOptions(beam_size=args.beam, max_length=80, max_length_a=2.0, max_length_b=10)
    runtime = NullRuntime(spec, args.batch, args.beam)
    engine = InflightBatcher(runtime, max_sentences=args.batch, max_beam=args.beam).start()
    engine.translate(sources, options, timeout=600)  # warm-up: the pool grows to its steady size
    for group in engine._groups.values():  # idle groups keep their pools for the next burst
        group.past_key.fill(0)
        group.past_value.fill(0)
    steps0 = engine.stats["steps"]
    load = load_average()
    runtime.seconds = 0.0
    started = time.perf_counter()
    engine.translate(sources, options, timeout=3600)
    seconds = time.perf_counter() - started
    engine.stop()
    steps = engine.stats["steps"] - steps0
    engine_ms = 1e3 * (seconds - runtime.seconds) / steps
    out = {"machine": machine(), "versions": versions("numpy"), "args": vars(args), "steps": steps,
           "seconds": seconds, "ms_per_step": 1e3 * seconds / steps, "sentences_per_s": len(sources) / seconds,
           "runtime_seconds": runtime.seconds, "engine_ms_per_step": engine_ms, "load_before": load}
    print(f"{steps} steps in {seconds:.2f} s: {out['ms_per_step']:.2f} ms of host time per step, "
          f"{engine_ms:.3f} ms of it the engine's (the rest is the null runtime's own top-k, a GPU graph's work) "
          f"(up to {args.batch} sentences x beam {args.beam}, vocabulary {args.vocab}, {args.layers} layers, "
          f"{args.heads} heads of {args.d_k}); ceiling {out['sentences_per_s']:.0f} sentences/s")
    if args.profile:
        out["profile"] = profile_engine_loop(spec, args, sources, options)
        print(out["profile"])
    print(f"written {write_json('host-overhead', out)}")
    return 0


def profile_engine_loop(spec, args, sources, options) -> str:
    """The engine loop run in this thread under cProfile (``_admit`` / ``_step`` as its thread does)."""
    from nmtserve.engine.batcher import _Request

    engine = InflightBatcher(NullRuntime(spec, args.batch, args.beam), max_sentences=args.batch,
                             max_beam=args.beam)
    done: list = []
    for src in sources:
        engine.pending.append(_Request([src], options, lambda r, e: done.append(r)))
    profiler = cProfile.Profile()
    profiler.enable()
    while len(done) < len(sources):
        engine._admit()
        if engine._groups:
            engine._step()
    profiler.disable()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(12)
    return text.getvalue()


if __name__ == "__main__":
    sys.exit(main())
