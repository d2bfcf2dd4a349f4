"""``nmtserve export``: load -> export ONNX -> lint -> parity -> (TensorRT) -> write repository.

Each stage logs what it did and how long it took; any failure raises ``ExportError`` with the
stage and the reason, and nothing in the repository is replaced until every check passed.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..decoding.search import SearchOptions
from ..model.checkpoint import Checkpoint, CheckpointError, load_checkpoint
from ..runtime.onnxruntime import OnnxModel
from ..runtime.spec import SPEC_FILE, ModelSpec, file_sha256
from .lint import lint_file
from .onnx_export import dims_of, export_decoder, export_encoder
from .parity import ParityReport, check_parity
from .repository import RepositoryOptions, write_repository

log = logging.getLogger(__name__)


class ExportError(RuntimeError):
    """Export failed; the message names the stage and the reason."""


@dataclass(frozen=True)
class ExportOptions:
    repository: Path
    name: str = "translate"
    target: str = "cpu"
    fp16: bool = False
    max_batch: int = 64
    max_source_len: int | None = None  # None: min(256, the model's positions)
    max_target_len: int | None = None  # None: min(256, the model's positions - 1)
    beam_size: int = 4
    parity_sentences: int = 50
    skip_parity: bool = False
    step_backend: str = ""  # how generate runs the graphs; "": the target's default
    graph_models: bool = False  # also serve encoder/decoder as models (RepositoryOptions)


@dataclass
class ExportReport:
    repository: Path
    seconds: dict[str, float] = field(default_factory=dict)
    parity: ParityReport | None = None
    lint: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def summary(self) -> str:
        stages = ", ".join(f"{k} {v:.1f}s" for k, v in self.seconds.items())
        lines = [f"exported to {self.repository} ({stages})"]
        if self.parity:
            lines.append(self.parity.summary())
        return "\n".join(lines + self.notes)


def load_any_checkpoint(path: Path) -> Checkpoint:
    """An nmtserve checkpoint, or a Hugging Face Marian directory (converted on the fly)."""
    config_file = path / "config.json"
    if not path.is_dir():
        raise ExportError(f"{path}: not a directory")
    if not config_file.is_file():
        raise ExportError(f"{path}: no config.json; expected an nmtserve checkpoint or a Hugging Face Marian directory")
    model_type = json.loads(config_file.read_text()).get("model_type", "nmtserve-transformer")
    if model_type == "nmtserve-transformer":
        return load_checkpoint(path)
    if model_type == "marian":
        from ..model.marian import load_marian  # noqa: PLC0415 - optional path

        return load_marian(path)
    raise ExportError(f"{path}: model_type {model_type!r} is not supported (supported: nmtserve-transformer, marian)")


def _parity_sources(ckpt: Checkpoint, n: int, max_len: int) -> list[list[int]]:
    """Held-out sentences when the checkpoint has them, else random ids of varied lengths."""
    test = ckpt.path / "test.en"
    if test.is_file():
        lines = [line for line in test.read_text(encoding="utf-8").splitlines() if line.strip()][:n]
        ids = [ckpt.tokenizer.encode(line)[:max_len] for line in lines]
        if len(ids) >= n:
            return ids
    rng = np.random.default_rng(0)
    cfg = ckpt.config
    return [[*rng.integers(4, cfg.src_vocab_size, size=rng.integers(1, 30)).tolist(), cfg.eos_id] for _ in range(n)]


def export(checkpoint: Path, opts: ExportOptions) -> ExportReport:
    report = ExportReport(repository=opts.repository)

    def stage(name: str, started: float) -> None:
        report.seconds[name] = time.monotonic() - started
        log.info("%s done in %.1f s", name, report.seconds[name])

    try:  # option mistakes fail before any slow stage
        repo_opts = RepositoryOptions(name=opts.name, max_batch=opts.max_batch,
                                      max_beam=max(8, opts.beam_size), target=opts.target,
                                      step_backend=opts.step_backend, graph_models=opts.graph_models)
    except ValueError as exc:
        raise ExportError(f"options: {exc}") from exc
    t = time.monotonic()
    try:
        ckpt = load_any_checkpoint(Path(checkpoint))
    except (CheckpointError, ValueError) as exc:
        raise ExportError(f"load: {exc}") from exc
    model, cfg = ckpt.model, ckpt.config
    opts = dataclasses.replace(
        opts,
        max_source_len=opts.max_source_len or min(256, cfg.max_positions),
        max_target_len=opts.max_target_len or min(256, cfg.max_positions - 1),
    )
    if opts.max_target_len + 1 > cfg.max_positions:
        raise ExportError(f"--max-target-len {opts.max_target_len} exceeds the model's {cfg.max_positions} positions")
    if opts.max_source_len > cfg.max_positions:
        raise ExportError(f"--max-source-len {opts.max_source_len} exceeds the model's {cfg.max_positions} positions")
    stage("load", t)

    with tempfile.TemporaryDirectory(prefix="nmtserve-export-") as tmp_name:
        tmp = Path(tmp_name)
        t = time.monotonic()
        encoder = export_encoder(model, tmp / "encoder.onnx")
        decoder = export_decoder(model, tmp / "decoder.onnx", repo_opts.max_beam)
        stage("onnx", t)

        t = time.monotonic()
        findings = [f"{p.name}: {f}" for p in (encoder, decoder) for f in lint_file(p)]
        report.lint = findings
        if findings:
            raise ExportError("TensorRT lint failed:\n  " + "\n  ".join(findings))
        stage("lint", t)

        d = dims_of(model, repo_opts.max_beam)
        tok = ckpt.tokenizer
        files = {"source": "source.spm"}
        artifacts = {"encoder.onnx": encoder, "decoder.onnx": decoder, "source.spm": tmp / "source.spm"}
        (tmp / "source.spm").write_bytes(tok.source.serialized_model_proto())
        if tok.target is not tok.source:
            (tmp / "target.spm").write_bytes(tok.target.serialized_model_proto())
            artifacts["target.spm"] = tmp / "target.spm"
            files["target"] = "target.spm"
        if tok.vocab is not None:
            (tmp / "vocab.json").write_text(json.dumps(tok.vocab, ensure_ascii=False), encoding="utf-8")
            artifacts["vocab.json"] = tmp / "vocab.json"
            files["vocab"] = "vocab.json"
        spec = ModelSpec(
            layers=d.layers, heads=d.heads, d_k=d.d_k, vocab=d.vocab, max_positions=cfg.max_positions,
            pad_id=cfg.pad_id, bos_id=cfg.bos_id, eos_id=cfg.eos_id, unk_id=cfg.unk_id,
            src_vocab=cfg.src_vocab_size, max_source_len=opts.max_source_len, max_target_len=opts.max_target_len, max_batch=opts.max_batch,
            beam_size=opts.beam_size, tokenizer=files, fp16=opts.fp16, max_beam=repo_opts.max_beam,
            hashes={"encoder.onnx": file_sha256(encoder), "decoder.onnx": file_sha256(decoder)},
        )
        spec.save(tmp / SPEC_FILE)
        artifacts[SPEC_FILE] = tmp / SPEC_FILE

        if not opts.skip_parity:
            t = time.monotonic()
            onnx_model = OnnxModel(encoder, decoder, spec)
            search = SearchOptions(beam_size=opts.beam_size, max_length=min(opts.max_target_len, 128),
                                   max_length_a=spec.max_length_a, max_length_b=spec.max_length_b)
            sources = _parity_sources(ckpt, opts.parity_sentences, opts.max_source_len)
            report.parity = check_parity(model, onnx_model, sources, search)
            stage("parity", t)
            if not report.parity.passed:
                raise ExportError(report.parity.summary())

        t = time.monotonic()
        write_repository(opts.repository, d, artifacts, repo_opts)
        stage("write", t)
    if opts.target == "gpu":
        # Plans are specific to the GPU model and the TensorRT version, so they are not built here.
        report.notes.append(
            "target gpu: the TensorRT plans for encoder/decoder are built for the GPU present when the "
            "container starts (`docker compose up`, see README: GPU deployment)"
        )
    return report
