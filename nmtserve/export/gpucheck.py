"""``nmtserve gpu-check``: the TensorRT path of an exported GPU repository, checked inside the image.

    docker compose run --rm triton nmtserve gpu-check --repository /models [--cache /cache]
    python -m nmtserve.export.gpucheck --repository model_repository --cache /tmp/plans

Torch-free (the GPU image has no torch): the reference is the exported ONNX graphs on ONNX
Runtime's CPU provider (in the image; the export checked them against PyTorch). For each
precision (fp32, fp16) it builds the plans with the container's own builder
(``engines.build_engine``, the export's optimization profile), then

* **steps**: the plans (``TensorRTModel``, outputs downloaded) and ONNX Runtime run in lockstep
  at every step of whole beam-search decodes of the repository's held-out sentences
  (``quality_gate.json``), the search following ONNX Runtime; reported: max |delta log-prob| over
  every entry and over the entries a beam can reach (reference log-prob >= -10), and how many
  sentences decode to other tokens when the plans decode alone;
* **engine**: the served in-flight engine over the plans (cache pool on the GPU, one request per
  sentence) against the same engine over ONNX Runtime CPU: sentences with other tokens, and
  sentences/s of both.

A pass: fp32 within ``--fp32-tolerance`` (default 1e-3) of ONNX Runtime on every entry with
identical tokens everywhere; fp16 within ``--fp16-tolerance`` (0.05) on the reachable entries
with at most ``--fp16-mismatch`` (5%) of the sentences decoding differently (whether that costs
quality is the fp16 quality gate's question, asked at container start). One summary table;
exit status 0 when every check passed, 1 when one failed, 2 when it cannot run here (no
TensorRT or no GPU: it says which).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from .. import graphs
from ..runtime.lockstep import HostView, Lockstep, Stats


@dataclass
class Result:
    name: str
    status: str  # PASS / FAIL / SKIP
    detail: str


def compare_steps(reference, candidate, sources: list[list[int]], options, spec, batch_size: int) -> Stats:
    """``candidate`` against ``reference`` (both with ``step_model(src, beam, max_steps)``)."""
    from ..decoding.search import beam_search

    stats = Stats()
    for start in range(0, len(sources), batch_size):
        batch = sources[start : start + batch_size]
        lengths = [len(s) for s in batch]
        src = graphs.pad_batch(batch, spec.pad_id)
        max_steps = max(options.max_length_for(n) for n in lengths)
        lockstep = Lockstep(reference.step_model(src, options.beam_size, max_steps),
                            candidate.step_model(src, options.beam_size, max_steps), stats)
        want = beam_search(lockstep, len(batch), lengths, options, bos_id=spec.bos_id, eos_id=spec.eos_id)
        started = time.perf_counter()
        alone = beam_search(candidate.step_model(src, options.beam_size, max_steps), len(batch), lengths, options,
                            bos_id=spec.bos_id, eos_id=spec.eos_id)
        stats.decode_seconds += time.perf_counter() - started
        stats.mismatched += sum([h.tokens for h in w] != [h.tokens for h in g] for w, g in zip(want, alone, strict=True))
        stats.sentences += len(batch)
    return stats


def run_engine(runtime, sources: list[list[int]], options, max_sentences: int) -> tuple[list, float]:
    """Every sentence as its own request into one in-flight batcher (as the server does); tokens, seconds."""
    from ..engine import InflightBatcher

    engine = InflightBatcher(runtime, max_sentences=max_sentences, max_beam=max(options.beam_size,
                                                                               runtime.spec.max_beam)).start()
    try:
        engine.translate(sources[:2], options, timeout=600)  # warm-up: first-call allocations
        results: list = [None] * len(sources)
        done = threading.Semaphore(0)
        errors: list = []

        def callback_for(i):
            def callback(res, err):
                if err is not None:
                    errors.append(err)
                else:
                    results[i] = res[0]
                done.release()
            return callback

        started = time.perf_counter()
        for i, src in enumerate(sources):
            engine.submit([src], options, callback_for(i))
        for _ in sources:
            if not done.acquire(timeout=600):
                raise TimeoutError("the engine did not finish in 600 s")
        seconds = time.perf_counter() - started
    finally:
        engine.stop()
    if errors:
        raise errors[0]
    return [[h.tokens for h in r] for r in results], seconds


@dataclass(frozen=True)
class CheckOptions:
    precisions: tuple[str, ...] = ("fp32", "fp16")
    sentences: int = 32
    batch: int = 16
    fp32_tolerance: float = 1e-3
    fp16_tolerance: float = 0.05
    fp16_mismatch: float = 0.05


def check_repository(repository: Path, cache: Path, opts: CheckOptions = CheckOptions()) -> list[Result]:
    """Build each precision's plans for ``repository`` into ``cache`` and check them (module docstring)."""
    from ..model.tokenizer import load_tokenizer
    from ..runtime.onnxruntime import OnnxModel
    from ..runtime.spec import ModelSpec
    from . import engines, quality

    artifacts = repository / engines.ARTIFACTS
    spec = ModelSpec.load(artifacts / engines.SPEC_FILE)
    gate_file = artifacts / quality.GATE_FILE
    if not gate_file.is_file():
        raise engines.EngineSetupError(f"{gate_file} is missing: export with a held-out set (the checkpoint's "
                                       "test.en, or --gate-source FILE) so there are sentences to check on")
    tokenizer = load_tokenizer(artifacts, spec)
    gate = quality.GateSet.load(gate_file)
    sources = quality.encode_sources(tokenizer, gate.sources[: opts.sentences], spec, gate.source_lang)
    options = spec.search_options()
    batch = min(opts.batch, spec.max_batch)
    reference = OnnxModel(artifacts / "encoder.onnx", artifacts / "decoder.onnx", spec)
    want, ref_seconds = run_engine(reference, sources, options, batch)
    print(f"{len(sources)} held-out sentences, beam {options.beam_size}; reference: ONNX Runtime CPU fp32 "
          f"({len(sources) / ref_seconds:.1f} sent/s in the engine)", flush=True)
    dims = spec.dims
    results: list[Result] = []
    for precision in opts.precisions:
        fp16 = precision == "fp16"
        build = engines.build_options(spec, precision)
        folder = Path(cache) / f"gpu-check-{precision}"
        name = f"tensorrt {precision}"
        print(f"-- {name}: building plans in {folder}", flush=True)
        folder.mkdir(parents=True, exist_ok=True)
        try:
            plans = {model: engines.build_engine(artifacts / f"{model}.onnx", folder / f"{model}.plan",
                                                 engines.GRAPH_INPUTS[model](dims), build,
                                                 timing_cache=folder / "timing.cache")
                     for model in engines.GRAPH_INPUTS}
            runtime = engines.load_runtime(plans["encoder"], plans["decoder"], artifacts)
        except Exception as exc:  # a failed build is a failed check; the other precision still runs
            results.append(Result(name, "FAIL", f"build/load error: {type(exc).__name__}: {exc}"))
            continue
        tol = opts.fp16_tolerance if fp16 else opts.fp32_tolerance
        try:
            stats = compare_steps(reference, HostView(runtime), sources, options, spec, batch)
            got, seconds = run_engine(runtime, sources, options, batch)
        except Exception as exc:
            results.append(Result(name, "FAIL", f"error: {type(exc).__name__}: {exc}"))
            continue
        measured = stats.max_relevant if fp16 else stats.max_all
        allowed = int(opts.fp16_mismatch * len(sources)) if fp16 else 0
        ok = measured <= tol and stats.mismatched <= allowed
        results.append(Result(f"{name} steps", "PASS" if ok else "FAIL",
                              f"max|dlogp| {stats.max_all:.1e} (reachable {stats.max_relevant:.1e}, tol {tol:.0e}) "
                              f"over {stats.steps} steps; tokens differ {stats.mismatched}/{stats.sentences} "
                              f"(allowed {allowed})"))
        differ = sum(g != w for g, w in zip(got, want, strict=True))
        results.append(Result(f"{name} engine", "PASS" if differ <= allowed else "FAIL",
                              f"tokens differ {differ}/{len(sources)} from the ONNX Runtime engine (allowed "
                              f"{allowed}); {len(sources) / seconds:.1f} sent/s vs {len(sources) / ref_seconds:.1f}"))
    return results


def table(results: list[Result]) -> str:
    width = max(len(r.name) for r in results)
    return "\n".join(f"{r.name:<{width}}  {r.status:<4}  {r.detail}" for r in results)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="nmtserve gpu-check", description=__doc__.split("\n\n")[0])
    parser.add_argument("--repository", type=Path, required=True, help="an exported repository (--target gpu)")
    parser.add_argument("--cache", type=Path, default=None, help="where to build the plans (default: a temp folder)")
    parser.add_argument("--precision", default="fp32,fp16", help="comma-separated: fp32, fp16 (default: both)")
    parser.add_argument("--sentences", type=int, default=CheckOptions.sentences)
    parser.add_argument("--batch", type=int, default=CheckOptions.batch)
    parser.add_argument("--fp32-tolerance", type=float, default=CheckOptions.fp32_tolerance)
    parser.add_argument("--fp16-tolerance", type=float, default=CheckOptions.fp16_tolerance)
    parser.add_argument("--fp16-mismatch", type=float, default=CheckOptions.fp16_mismatch)
    args = parser.parse_args(argv)
    from ..runtime.tensorrt import tensorrt_module
    from .engines import EngineSetupError
    from .tensorrt import TensorRTUnavailable, gpu_identity

    precisions = tuple(p.strip() for p in args.precision.split(",") if p.strip())
    if not set(precisions) <= {"fp32", "fp16"}:
        parser.error(f"--precision takes fp32 and/or fp16, got {args.precision!r}")
    if tensorrt_module() is None:
        print("nmtserve gpu-check: SKIP: TensorRT is not installed here (run it in the GPU image)", file=sys.stderr)
        return 2
    try:
        gpu = gpu_identity()
    except TensorRTUnavailable as exc:
        print(f"nmtserve gpu-check: SKIP: {exc}", file=sys.stderr)
        return 2
    print(f"GPU 0: {gpu['gpu']} (compute capability {gpu['compute_capability']}); TensorRT "
          f"{tensorrt_module().__version__}")
    opts = CheckOptions(precisions=precisions, sentences=args.sentences, batch=args.batch,
                        fp32_tolerance=args.fp32_tolerance, fp16_tolerance=args.fp16_tolerance,
                        fp16_mismatch=args.fp16_mismatch)
    with tempfile.TemporaryDirectory(prefix="nmtserve-gpu-check-") as tmp:
        try:
            results = check_repository(args.repository, args.cache or Path(tmp), opts)
        except EngineSetupError as exc:
            print(f"nmtserve gpu-check: error: {exc}", file=sys.stderr)
            return 1
    print(table(results))
    failed = [r for r in results if r.status == "FAIL"]
    print("gpu-check: " + (f"{len(failed)} check(s) FAILED" if failed else "every check passed"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
