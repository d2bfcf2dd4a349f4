"""TensorRT plans for a GPU model repository, built when the container starts.

``python -m nmtserve.export.engines --repository /models --cache /cache`` runs in
``docker/entrypoint.sh`` before ``tritonserver``. ``generate`` of
``nmtserve export --target gpu`` runs TensorRT plans of both graphs: each is built from
``generate/1/<graph>.onnx`` by ``tensorrt.build_engine``, with the optimization profile and
precision of the export (``generate/1/model.json``), kept in the cache volume and copied to
``generate/1/<graph>.plan`` (and to ``<graph>/1/model.plan`` when the export also serves the
graphs as TensorRT models, ``--graph-models``).

A plan only runs on the GPU model and the TensorRT version that built it, so the cache has one
folder per GPU and TensorRT version (a volume that moves between machines keeps what it built),
and inside it ``build_engine`` rebuilds a plan whose ONNX, TensorRT, GPU or build options changed
(its JSON sidecar) and keeps a current one. Torch-free: the GPU image has no torch.

fp16 plans pass a quality gate before Triton serves them (``nmtserve.export.quality``): they
translate the held-out sentences the export shipped (``quality_gate.json``) and are compared with
the fp32 translations shipped beside them. Over the BLEU-drop limit (the export's
``--max-bleu-drop`` unless ``--max-bleu-drop`` here says otherwise), ``--fp16-gate fallback``
(default) logs why and builds fp32 plans instead; ``refuse`` stops the start; ``off`` skips the
check. The verdict is kept in the cache folder per pair of ONNX graphs, so a restart reuses it
(``--force`` checks again), and the report lands in the repository's ``quality.json`` as ``fp16``.
"""

from __future__ import annotations

import argparse
import dataclasses
import fcntl
import json
import logging
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from .. import graphs
from ..runtime.spec import ModelSpec, file_sha256
from . import quality
from .tensorrt import (
    BuildOptions,
    TensorRTUnavailable,
    build_engine,
    gpu_identity,
    metadata_path,
)

log = logging.getLogger(__name__)

ARTIFACTS = Path("generate") / "1"  # where the export keeps the graphs and model.json
SPEC_FILE = "model.json"
PLAN_FILE = "model.plan"  # Triton's default file name for a tensorrt_plan model
PRECISIONS = ("export", "fp16", "fp32")  # "export": what `nmtserve export [--precision fp16]` chose
FP16_GATE_MODES = ("fallback", "refuse", "off")
GATE_VERDICT = "fp16-gate.json"  # in the cache folder: the last verdict per pair of ONNX graphs

# The Triton model of each graph and the inputs its optimization profile covers.
GRAPH_INPUTS: dict[str, Callable[[graphs.Dims], list[graphs.Tensor]]] = {
    "encoder": lambda dims: graphs.encoder_inputs(),
    "decoder": graphs.decoder_inputs,
}
_TENSORRT_PLATFORM = re.compile(r'^\s*platform\s*:\s*"tensorrt_plan"', re.MULTILINE)


class EngineSetupError(RuntimeError):
    """The repository or the cache cannot give Triton its plans; the message says what to do."""


@dataclass(frozen=True)
class PlacedPlan:
    model: str
    cached: Path  # the plan in the cache volume
    placed: Path  # <repository>/generate/1/<model>.plan (and copies: plan_destinations)
    built: bool  # built in this run (False: the cached plan was current)
    copied: bool  # copied into the repository in this run (False: an identical copy was there)


def tensorrt_models(repository: Path) -> list[str]:
    """The graph models of ``repository`` whose config asks for a TensorRT plan."""
    out = []
    for model in GRAPH_INPUTS:
        config = repository / model / "config.pbtxt"
        if config.is_file() and _TENSORRT_PLATFORM.search(config.read_text(encoding="utf-8")):
            out.append(model)
    return out


def plans_needed(repository: Path) -> list[str]:
    """The graphs that need plans: all of them when ``generate`` runs on TensorRT (its config
    names ``encoder_plan``) or a graph model is a TensorRT model."""
    config = repository / "generate" / "config.pbtxt"
    generate = config.is_file() and '"encoder_plan"' in config.read_text(encoding="utf-8")
    return list(GRAPH_INPUTS) if generate or tensorrt_models(repository) else []


def plan_destinations(repository: Path, model: str) -> list[Path]:
    """Where a graph's plan goes: ``generate/1/<graph>.plan`` (what generate loads), and the
    graph model's ``1/model.plan`` when it is served as a TensorRT model."""
    out = [repository / ARTIFACTS / f"{model}.plan"]
    if model in tensorrt_models(repository):
        out.append(repository / model / "1" / PLAN_FILE)
    return out


def read_spec(repository: Path) -> ModelSpec:
    """The export's ``model.json``."""
    path = repository / ARTIFACTS / SPEC_FILE
    if not path.is_file():
        raise EngineSetupError(
            f"{path} is missing: {repository} holds no exported model. Export one on the host with "
            "`nmtserve export CHECKPOINT --repository model_repository --target gpu`"
        )
    try:
        return ModelSpec.load(path)
    except json.JSONDecodeError as exc:
        raise EngineSetupError(f"{path} is not valid JSON: {exc}") from exc
    except ValueError as exc:
        raise EngineSetupError(f"{path}: {exc}") from exc


def build_options(spec: ModelSpec, precision: str = "export", workspace_mb: int | None = None) -> BuildOptions:
    """The profile (max batch, the widest beam served, source and target lengths) and precision
    of the export."""
    if precision not in PRECISIONS:
        raise EngineSetupError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    fp16 = spec.fp16 if precision == "export" else precision == "fp16"
    extra = {"workspace_mb": workspace_mb} if workspace_mb else {}
    return BuildOptions(max_batch=spec.max_batch, max_beam=spec.max_beam, max_source_len=spec.max_source_len,
                        max_target_len=spec.max_target_len, fp16=fp16, **extra)


def environment_key() -> str:
    """Cache folder name for the GPU present and the installed TensorRT, e.g. ``nvidia-h100-sm9.0-trt10.5.0``.

    Never raises: where either is missing, the name says "unknown" and ``build_engine`` then
    fails with the reason.
    """
    try:
        gpu = gpu_identity()
        gpu_part = f"{gpu['gpu']}-sm{gpu['compute_capability']}"
    except (TensorRTUnavailable, subprocess.SubprocessError, OSError, ValueError):
        gpu_part = "unknown-gpu"
    from ..runtime.tensorrt import tensorrt_module  # noqa: PLC0415

    trt = tensorrt_module()
    trt_part = f"trt{trt.__version__}" if trt is not None else "trt-unknown"
    return re.sub(r"[^a-z0-9.]+", "-", f"{gpu_part}-{trt_part}".lower()).strip("-")


def place_plan(plan: Path, destination: Path) -> bool:
    """Copy ``plan`` and its metadata to ``destination`` unless an identical copy is there; True if copied.

    A copy, not a symlink: the repository is a bind mount from the host, where a link into the
    cache volume would dangle.
    """
    if destination.is_file() and destination.stat().st_size == plan.stat().st_size and \
            file_sha256(destination) == file_sha256(plan):
        return False
    destination.parent.mkdir(parents=True, exist_ok=True)
    for src, dst in ((plan, destination), (metadata_path(plan), metadata_path(destination))):
        if src.is_file():
            tmp = dst.with_name(dst.name + ".tmp")
            shutil.copyfile(src, tmp)
            tmp.replace(dst)  # atomic: Triton never sees half a plan
    return True


@contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """One builder per cache folder at a time (replicas may share a volume)."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@contextmanager
def _heartbeat(what: str, every: float = 30.0) -> Iterator[None]:
    """Log every ``every`` seconds while a build runs, so `docker compose logs` shows it is alive."""
    done = threading.Event()
    started = time.monotonic()

    def beat() -> None:
        while not done.wait(every):
            log.info("%s: still working (%.0f s)", what, time.monotonic() - started)

    thread = threading.Thread(target=beat, name="nmtserve-engines-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def load_runtime(encoder_plan: Path, decoder_plan: Path, artifacts: Path):
    """The plans as the serving engine runs them (the fp16 gate decodes with it); GPU 0."""
    from ..runtime.tensorrt import TensorRTModel  # noqa: PLC0415 - only when a gate runs

    return TensorRTModel(encoder_plan, decoder_plan, ModelSpec.load(artifacts / SPEC_FILE))


def gate_fp16(repository: Path, placed: list[PlacedPlan], max_bleu_drop: float | None) -> quality.QualityReport | None:
    """Translate the shipped gate set with the placed fp16 plans and compare with fp32; None
    where the export shipped no gate set (then the plans are served unchecked, said in the log)."""
    from ..model.tokenizer import load_tokenizer  # noqa: PLC0415

    artifacts = repository / ARTIFACTS
    gate_file = artifacts / quality.GATE_FILE
    if not gate_file.is_file():
        log.warning("fp16 plans are served unchecked: %s is missing (the export had no held-out sentences; "
                    "re-export with --gate-source FILE)", gate_file)
        return None
    gate = quality.GateSet.load(gate_file)
    plans = {p.model: p.placed for p in placed}
    runtime = load_runtime(plans["encoder"], plans["decoder"], artifacts)
    tokenizer = load_tokenizer(artifacts, runtime.spec)
    options = runtime.spec.search_options()
    limit = gate.max_bleu_drop if max_bleu_drop is None else max_bleu_drop
    log.info("fp16 quality gate: translating %d held-out sentences with the fp16 plans", len(gate.sources))
    report = quality.check(gate, runtime, tokenizer, options, "fp16", limit)
    quality.write_report(artifacts, "fp16", report.to_dict())
    return report


def _verdict_key(spec: ModelSpec) -> str:
    return f"{spec.hashes.get('encoder.onnx', '?')}:{spec.hashes.get('decoder.onnx', '?')}"


def _cached_verdict(folder: Path, spec: ModelSpec) -> dict | None:
    path = folder / GATE_VERDICT
    try:
        verdict = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return verdict if verdict.get("graphs") == _verdict_key(spec) else None


def prepare_plans(repository: Path, cache: Path, *, environment: str, precision: str = "export",
                  workspace_mb: int | None = None, force: bool = False, fp16_gate: str = "fallback",
                  max_bleu_drop: float | None = None) -> list[PlacedPlan]:
    """Build (or reuse) every plan ``repository`` asks for, in ``cache/<environment>``, and place
    it; fp16 plans are placed only if they pass the quality gate (``fp16_gate``, module docstring)."""
    if fp16_gate not in FP16_GATE_MODES:
        raise EngineSetupError(f"fp16 gate must be one of {', '.join(FP16_GATE_MODES)}, got {fp16_gate!r}")
    repository, cache = Path(repository), Path(cache)
    if not repository.is_dir():
        raise EngineSetupError(f"model repository {repository} does not exist (is ./model_repository mounted?)")
    spec = read_spec(repository)
    models = plans_needed(repository)
    if not models:
        log.info("no model in %s asks for a TensorRT plan (exported with --target cpu?): nothing to build",
                 repository)
        return []
    opts = build_options(spec, precision, workspace_mb)
    folder = cache / environment
    with _locked(folder):
        verdict = _cached_verdict(folder, spec) if opts.fp16 and fp16_gate != "off" and not force else None
        if verdict is not None and not verdict["passed"]:
            if fp16_gate == "refuse":
                raise EngineSetupError(f"fp16 plans failed the quality gate earlier: {verdict['summary']}")
            log.error("fp16 plans failed the quality gate earlier (%s): using fp32 plans "
                      "(NMTSERVE_TRT_REBUILD=1 checks again)", verdict["summary"])
            return _build_and_place(repository, folder, models, spec, dataclasses.replace(opts, fp16=False), force)
        placed = _build_and_place(repository, folder, models, spec, opts, force)
        if not opts.fp16 or fp16_gate == "off":
            return placed
        if verdict is not None and not any(p.built for p in placed):
            log.info("fp16 plans passed the quality gate earlier: %s", verdict["summary"])
            return placed
        report = gate_fp16(repository, placed, max_bleu_drop)
        if report is None:
            return placed
        (folder / GATE_VERDICT).write_text(json.dumps({"graphs": _verdict_key(spec), "passed": report.passed,
                                                       "summary": report.summary()}) + "\n", encoding="utf-8")
        if report.passed:
            return placed
        if fp16_gate == "refuse":
            raise EngineSetupError(f"{report.summary()}. The fp16 plans are not served (--fp16-gate refuse): "
                                   "start with NMTSERVE_TRT_PRECISION=fp32, or NMTSERVE_FP16_GATE=fallback")
        log.error("%s: falling back to fp32 plans", report.summary())
        return _build_and_place(repository, folder, models, spec, dataclasses.replace(opts, fp16=False), force)


def _build_and_place(repository: Path, folder: Path, models: list[str], spec: ModelSpec, opts: BuildOptions,
                     force: bool) -> list[PlacedPlan]:
    dims = spec.dims
    log.info("TensorRT plans for %s in %s (%s, max batch %d, beam %d, source %d, target %d tokens)",
             ", ".join(models), folder, "fp16" if opts.fp16 else "fp32", opts.max_batch, opts.max_beam,
             opts.max_source_len, opts.max_target_len)
    placed = []
    for model in models:
        onnx_path = repository / ARTIFACTS / f"{model}.onnx"
        if not onnx_path.is_file():
            raise EngineSetupError(f"{onnx_path} is missing; re-export the model with --target gpu")
        cached = folder / f"{model}.plan"
        before = cached.stat().st_mtime_ns if cached.is_file() else None
        with _heartbeat(f"{model} plan"):
            build_engine(onnx_path, cached, GRAPH_INPUTS[model](dims), opts,
                         timing_cache=folder / "timing.cache", force=force)
        if not cached.is_file():
            raise EngineSetupError(f"building the {model} plan left no file at {cached}")
        built = before is None or cached.stat().st_mtime_ns != before
        destinations = plan_destinations(repository, model)
        copied = [place_plan(cached, d) for d in destinations]
        log.info("%s: %s plan %s -> %s", model, "built" if built else "reused", cached,
                 ", ".join(str(d) if c else f"{d} (already in place)" for d, c in zip(destinations, copied, strict=True)))
        placed.append(PlacedPlan(model, cached, destinations[0], built, any(copied)))
    return placed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m nmtserve.export.engines",
        description="Build the TensorRT plans a GPU model repository asks for (at container start).",
    )
    parser.add_argument("--repository", type=Path, required=True, help="the Triton model repository (/models)")
    parser.add_argument("--cache", type=Path, required=True, help="persistent folder for plans and timing caches")
    parser.add_argument("--precision", choices=PRECISIONS, default="export",
                        help="export: fp16 if the model was exported with --precision fp16 (default); fp16 / fp32: override")
    parser.add_argument("--workspace-mb", type=int, default=None, help="TensorRT builder workspace limit")
    parser.add_argument("--force", action="store_true",
                        help="rebuild even when the cached plans are current (and re-run the fp16 quality gate)")
    parser.add_argument("--fp16-gate", choices=FP16_GATE_MODES, default="fallback",
                        help="fp16 plans that lose more BLEU than allowed: fallback to fp32 plans (default), "
                             "refuse to start, or off (no check)")
    parser.add_argument("--max-bleu-drop", type=float, default=None,
                        help="the fp16 gate's limit (default: the export's --max-bleu-drop)")
    args = parser.parse_args(argv)
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                            format="%(asctime)s nmtserve-engines %(levelname)s %(message)s")
    started = time.monotonic()
    try:
        plans = prepare_plans(args.repository, args.cache, environment=environment_key(), precision=args.precision,
                              workspace_mb=args.workspace_mb, force=args.force, fp16_gate=args.fp16_gate,
                              max_bleu_drop=args.max_bleu_drop)
    except (EngineSetupError, TensorRTUnavailable) as exc:
        log.error("%s", exc)
        return 1
    except Exception as exc:  # a failed TensorRT build: say so in the container log, then stop the start
        log.exception("TensorRT plan build failed: %s", exc)
        return 1
    if plans:
        log.info("plans ready in %.0f s: %s", time.monotonic() - started,
                 ", ".join(f"{p.model} ({'built' if p.built else 'cached'})" for p in plans))
    return 0


if __name__ == "__main__":
    sys.exit(main())
