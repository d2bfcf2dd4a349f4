"""``nmtserve export``: load -> export ONNX -> lint -> parity -> (TensorRT) -> write repository.

Each stage logs what it did and how long it took; any failure raises ``ExportError`` with the
stage and the reason, and nothing in the repository is replaced until every check passed.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .. import contract, graphs
from ..coverage import usual_length_ratio, usual_score_floor
from ..decoding.search import SearchOptions
from ..languages import LanguageError, resolve
from ..model.checkpoint import Checkpoint, CheckpointError
from ..model.tokenizer import tokenizer_files
from ..runtime import vocabulary
from ..runtime.native_step import FP32_LARGEST_D_MODEL
from ..runtime.onnxruntime import OnnxModel
from ..runtime.spec import SPEC_FILE, ModelSpec, graph_sha256
from . import markup, quality
from .cpu_graph import UnsupportedModel, build_cpu_decoder, build_cpu_encoder
from .lint import lint_file
from .onnx_export import EXTERNAL_DATA_BYTES, dims_of, export_decoder, export_encoder
from .parity import ParityReport, compare, record_reference
from .quantize import parse_keep, quantize_int8
from .repository import GENERATE_BACKENDS, RepositoryOptions, check_layout, write_repository
from .weights import SharedWeights, graph_files, rewrite, tensor_threshold

log = logging.getLogger(__name__)


class ExportError(RuntimeError):
    """Export failed; the message names the stage and the reason. ``unreadable``: the checkpoint
    itself cannot be imported (a format or options nmtserve does not read: the user's input)."""

    def __init__(self, message: str, *, unreadable: bool = False):
        super().__init__(message)
        self.unreadable = unreadable


# fp32: the graphs as exported. int8: CPU graphs with int8 weights (ONNX Runtime dynamic
# quantization), served only if they pass the quality gate. fp16: TensorRT plans built in fp16
# when the GPU container starts, gated there against the fp32 translations shipped here.
PRECISIONS = ("fp32", "int8", "fp16")
# The decoder graph a repository serves. portable: standard ONNX as torch.onnx exports it (what
# TensorRT builds). fused: the same step for ONNX Runtime's CPU provider (nmtserve.export.cpu_graph).
DECODER_GRAPHS = ("fused", "portable")


@dataclass(frozen=True)
class ExportOptions:
    repository: Path
    name: str = contract.DEFAULT_MODEL
    target: str = "cpu"
    precision: str = "fp32"  # PRECISIONS
    max_batch: int = ModelSpec.max_batch
    max_source_len: int | None = None  # None: min(256, the model's positions)
    max_target_len: int | None = None  # None: min(256, the model's positions - 1)
    beam_size: int = ModelSpec.beam_size
    parity_sentences: int = 50
    skip_parity: bool = False
    step_backend: str = ""  # how generate runs the graphs; "": the target's default
    graph_models: bool = False  # also serve encoder/decoder as models (RepositoryOptions)
    text_in_generate: bool = True  # the ensemble as one step: text in and out of generate (RepositoryOptions)
    generate_backend: str = ""  # GENERATE_BACKENDS: the Triton backend generate runs on; "": chosen (served_generate_backend)
    decoder_graph: str = ""  # DECODER_GRAPHS; "": fused on the cpu target, portable on the gpu target
    pair: str = ""  # "en-fr": add the model to the repository under its language pair (RepositoryOptions)
    tokenizer: Path | None = None  # the sentencepiece model of a checkpoint that does not record one
    # The quality gate of a reduced precision (nmtserve.export.quality).
    max_bleu_drop: float = quality.DEFAULT_MAX_BLEU_DROP
    gate_source: Path | None = None  # None: the checkpoint's test.en (and its test.<tgt> references)
    gate_reference: Path | None = None
    # A multilingual model's gate languages (its codes or ISO codes: "eng_Latn" / "en").
    gate_source_lang: str | None = None
    gate_target_lang: str | None = None
    gate_sentences: int = quality.DEFAULT_GATE_SENTENCES
    int8_keep_fp32: tuple[str, ...] = ()  # nmtserve.export.quantize.KEEP_GROUPS left in fp32
    # Opt-in restricted target vocabularies (runtime/vocabulary.py): (target language or None for a
    # bilingual model's one, a file of that language's text), each tokenized into the repository.
    restrict_vocabulary: tuple[tuple[str | None, Path], ...] = ()
    # Weights of a graph from this size on go to one external data file beside it (over 2 GB: must).
    external_data_bytes: int = EXTERNAL_DATA_BYTES
    # Serving limits written into the repository (RepositoryOptions; None: its defaults).
    limits: dict = field(default_factory=dict)

    def served_generate_backend(self) -> str:
        """The Triton backend ``generate`` runs on: the one asked for, else nmtserve's own (in the
        server's process: demo served p50 ~6% sooner, 64 one-sentence clients ~10% more
        sentences/s, bench/RESULTS.md "Session 31") wherever it can serve this export (CPU target,
        text in generate, graphs in process) and nmtserve_native here has it (built where
        libpython was found; the CPU image's has it), else the Python backend."""
        if self.generate_backend:
            return self.generate_backend
        if not self.in_process_servable():
            return "python"
        from ..decoding.native import triton_backend_library

        return "nmtserve" if triton_backend_library() is not None else "python"

    def in_process_servable(self) -> bool:
        """Whether the nmtserve backend can serve this export's ``generate``: the CPU target, the
        text in generate (not --three-step-ensemble), the graphs run in process."""
        return self.target == "cpu" and self.text_in_generate and self.step_backend in ("", "inprocess")

    def check(self) -> None:
        """Option mistakes, found before any slow stage."""
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {self.precision!r}")
        if self.precision == "fp16" and self.target != "gpu":
            raise ValueError("fp16 is built into the TensorRT plans of --target gpu; on a CPU use --precision int8")
        if self.precision == "int8" and self.target != "cpu":
            raise ValueError("int8 graphs are for ONNX Runtime on a CPU (--target cpu); on a GPU use --precision fp16")
        if self.generate_backend not in ("", *GENERATE_BACKENDS):
            raise ValueError(f"generate backend must be one of {', '.join(GENERATE_BACKENDS)}, got {self.generate_backend!r}")
        if self.generate_backend == "nmtserve" and not self.text_in_generate:
            raise ValueError("the nmtserve backend serves generate with the text in it: not with --three-step-ensemble")
        if self.generate_backend == "nmtserve" and self.target != "cpu":
            raise ValueError("the nmtserve backend serves the CPU target (--target gpu: --generate-backend python)")
        if self.generate_backend == "nmtserve" and self.step_backend not in ("", "inprocess"):
            raise ValueError(f"the nmtserve backend runs the graphs in process: not with --step-backend {self.step_backend}")
        if self.decoder_graph not in ("", *DECODER_GRAPHS):
            raise ValueError(f"decoder graph must be one of {', '.join(DECODER_GRAPHS)}, got {self.decoder_graph!r}")
        if self.decoder_graph == "fused" and self.target != "cpu":
            raise ValueError("the fused decoder graph is for ONNX Runtime on a CPU (--target cpu); TensorRT builds the portable one")
        if self.gate_reference is not None and self.gate_source is None:
            raise ValueError("--gate-reference needs --gate-source (the source lines it translates)")
        if not self.max_bleu_drop >= 0:
            raise ValueError(f"--max-bleu-drop must be >= 0, got {self.max_bleu_drop}")
        if self.gate_sentences < 1:
            raise ValueError(f"--gate-sentences must be >= 1, got {self.gate_sentences}")
        parse_keep(self.int8_keep_fp32)
        if self.restrict_vocabulary and (self.target != "cpu" or self.decoder_graph == "portable"):
            raise ValueError("--restrict-vocabulary is applied by the compiled CPU decoder step, which serves the "
                             "fused graph of --target cpu (a GPU's TensorRT plans decode the whole vocabulary)")


@dataclass
class ExportReport:
    repository: Path
    seconds: dict[str, float] = field(default_factory=dict)
    parity: ParityReport | None = None
    quality: dict = field(default_factory=dict)  # what the repository's quality.json holds
    lint: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    decoder_graph: str = ""  # the graph the repository serves, and its node count beside the portable one's
    # Whether the model carries inline placeholders (measured on the gate set; none: not measured).
    markup: markup.MarkupProbe = field(default_factory=lambda: markup.MarkupProbe(0, 0))

    def summary(self) -> str:
        stages = ", ".join(f"{k} {v:.1f}s" for k, v in self.seconds.items())
        lines = [f"exported to {self.repository} ({stages})"]
        if self.parity:
            lines.append(self.parity.summary())
        if "fp32" in self.quality:
            q = self.quality["fp32"]
            bleu = f": BLEU {q['bleu']:.2f}, exact match {100 * q['exact_match']:.1f}%" if "bleu" in q else ""
            lines.append(f"quality gate set: {q['sentences']} sentences of {q['origin']}{bleu} (fp32)")
        for name, q in self.quality.items():
            if name != "fp32":
                lines.append(quality.QualityReport(**{k: v for k, v in q.items() if k in _REPORT_FIELDS}).summary())
        lines.append(self.markup.summary())
        if self.decoder_graph:
            lines.append(self.decoder_graph)
        return "\n".join(lines + self.notes)


_REPORT_FIELDS = {f.name for f in dataclasses.fields(quality.QualityReport)}


def _generate_backend_note(opts: ExportOptions, backend: str) -> str:
    """The summary's line on where ``generate`` runs, and why when it was chosen."""
    if backend == "nmtserve":
        return ("generate runs in the tritonserver process (the nmtserve backend; --generate-backend python for a "
                "stub process of its own)")
    if opts.generate_backend or not opts.in_process_servable():
        return "generate runs on the Python backend (a stub process of its own)"
    return ("generate runs on the Python backend: nmtserve_native here has no nmtserve backend (built without "
            "libpython), which would run it in the server's process")


def load_any_checkpoint(path: Path, tokenizer: Path | None = None) -> Checkpoint:
    """A checkpoint of any format the importer registry reads (``nmtserve.model.importers``)."""
    from ..model.importers import load_any
    from ..model.importers.base import ImportOptions

    return load_any(path, ImportOptions(tokenizer=tokenizer))


def _tokenizer_artifacts(tok, tmp: Path, checkpoint: Path) -> tuple[dict, dict[str, Path]]:
    """The tokenizer files the repository ships (``ModelSpec.tokenizer`` and the artifacts):
    sentencepiece models (and Marian's vocab.json), or a multilingual checkpoint's own tokenizer
    files as they are, in a ``tokenizer/`` folder."""
    if getattr(tok, "languages", None):
        folder = "tokenizer"
        files = {"kind": "multilingual", "family": tok.family, "folder": folder}
        return files, {f"{folder}/{name}": checkpoint / name for name in tok.files()}
    files = {"source": "source.spm"}
    artifacts = {"source.spm": tmp / "source.spm"}
    (tmp / "source.spm").write_bytes(tok.source.serialized_model_proto())
    if tok.target is not tok.source:
        (tmp / "target.spm").write_bytes(tok.target.serialized_model_proto())
        artifacts["target.spm"] = tmp / "target.spm"
        files["target"] = "target.spm"
    if tok.vocab is not None:
        (tmp / "vocab.json").write_text(json.dumps(tok.vocab, ensure_ascii=False), encoding="utf-8")
        artifacts["vocab.json"] = tmp / "vocab.json"
        files["vocab"] = "vocab.json"
    if tok.target_vocab is not tok.vocab:
        (tmp / "target_vocab.json").write_text(json.dumps(tok.target_vocab, ensure_ascii=False), encoding="utf-8")
        artifacts["target_vocab.json"] = tmp / "target_vocab.json"
        files["target_vocab"] = "target_vocab.json"
    files.update(tokenizer_files(tok))
    return files, artifacts


def _parity_sources(ckpt: Checkpoint, n: int, max_len: int) -> list[list[int]]:
    """Held-out sentences when the checkpoint has them, else random ids of varied lengths."""
    test = ckpt.path / "test.en"
    if test.is_file() and not getattr(ckpt.tokenizer, "languages", None):
        lines = [line for line in test.read_text(encoding="utf-8").splitlines() if line.strip()][:n]
        ids = [ckpt.tokenizer.encode(line)[:max_len] for line in lines]
        if len(ids) >= n:
            return ids
    rng = np.random.default_rng(0)
    cfg = ckpt.config
    return [[*rng.integers(4, cfg.src_vocab_size, size=rng.integers(1, 30)).tolist(), cfg.eos_id] for _ in range(n)]


def _restrictions(tokenizer, dims: graphs.Dims, eos_id: int, unk_id: int,
                  opts: ExportOptions) -> list[vocabulary.Restriction]:
    """``opts.restrict_vocabulary`` built: each file's lines tokenized with the model's target
    tokenizer (a multilingual model's text pieces, with the language's token); ExportError names
    what is wrong (checked before the slow stages)."""
    codes = list(getattr(tokenizer, "languages", None) or ())
    restrictions = []
    for language, path in opts.restrict_vocabulary:
        try:
            lines = Path(path).read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise ExportError(f"--restrict-vocabulary: cannot read {path}: {exc}") from exc
        try:
            if codes:
                if language is None:
                    raise ValueError(f"this model is multilingual: name the target language ({codes[0]}={path})")
                code = resolve(language, codes)
                built = vocabulary.build(lines, tokenizer.encode_text, (eos_id, unk_id), dims.vocab, code,
                                         tokenizer.language_id(code), Path(path).name)
            else:
                if language is not None:
                    raise ValueError(f"this model has one target language: give the file alone ({path}), not "
                                     f"{language}={path}")
                built = vocabulary.build(lines, tokenizer.encode_target, (eos_id, unk_id), dims.vocab,
                                         source=Path(path).name)
        except (ValueError, LanguageError) as exc:
            raise ExportError(f"--restrict-vocabulary: {exc}") from exc
        if len(built.ids) < dims.candidates:
            raise ExportError(f"--restrict-vocabulary: {path} uses {len(built.ids)} tokens, fewer than the decoder "
                              f"step's {dims.candidates} candidates: give more of the language's text")
        restrictions.append(built)
    if len({r.language for r in restrictions}) != len(restrictions):
        raise ExportError("--restrict-vocabulary: one file per target language")
    width = dims.heads * dims.d_k
    if opts.precision == "fp32" and width > FP32_LARGEST_D_MODEL:
        log.warning("--restrict-vocabulary: at d_model %d an fp32 export is served by ONNX Runtime, which decodes the "
                    "whole vocabulary; the restriction applies with --precision int8 (or NMTSERVE_NATIVE_STEP=1)", width)
    return restrictions


def export(checkpoint: Path, opts: ExportOptions) -> ExportReport:
    report = ExportReport(repository=opts.repository)

    def stage(name: str, started: float) -> None:
        report.seconds[name] = time.monotonic() - started
        log.info("%s done in %.1f s", name, report.seconds[name])

    try:  # option mistakes fail before any slow stage
        opts.check()
        repo_opts = RepositoryOptions(name=opts.name, max_batch=opts.max_batch,
                                      max_beam=max(graphs.DEFAULT_MAX_BEAM, opts.beam_size), target=opts.target,
                                      step_backend=opts.step_backend, graph_models=opts.graph_models,
                                      text_in_generate=opts.text_in_generate, generate_backend=opts.served_generate_backend(),
                                      pair=opts.pair, **opts.limits)
        check_layout(opts.repository, repo_opts)
    except (ValueError, TypeError) as exc:
        raise ExportError(f"options: {exc}") from exc
    report.notes.append(_generate_backend_note(opts, repo_opts.generate_backend))
    t = time.monotonic()
    try:
        ckpt = load_any_checkpoint(Path(checkpoint), opts.tokenizer)
    except (CheckpointError, ValueError) as exc:
        raise ExportError(f"load: {exc}", unreadable=True) from exc
    model, cfg = ckpt.model, ckpt.config
    languages = tuple(getattr(ckpt.tokenizer, "languages", None) or ())
    repo_opts = dataclasses.replace(repo_opts, named_pair=named_pair(ckpt.path))
    if languages:
        try:
            repo_opts = dataclasses.replace(repo_opts, languages=languages)
        except ValueError as exc:
            raise ExportError(f"options: {exc}") from exc
    opts = dataclasses.replace(
        opts,
        max_source_len=opts.max_source_len or min(256, cfg.max_positions),
        max_target_len=opts.max_target_len or min(256, cfg.max_positions - 1, ckpt.decoding.max_length or 256),
    )
    if opts.max_target_len + 1 > cfg.max_positions:
        raise ExportError(f"--max-target-len {opts.max_target_len} exceeds the model's {cfg.max_positions} positions")
    if opts.max_source_len > cfg.max_positions:
        raise ExportError(f"--max-source-len {opts.max_source_len} exceeds the model's {cfg.max_positions} positions")
    gate = _gate_set(ckpt, opts)
    restrictions = (_restrictions(ckpt.tokenizer, dims_of(model, repo_opts.max_beam), cfg.eos_id, cfg.unk_id, opts)
                    if opts.restrict_vocabulary else [])
    stage("load", t)

    with tempfile.TemporaryDirectory(prefix="nmtserve-export-") as tmp_name:
        tmp = Path(tmp_name)
        t = time.monotonic()
        graph = opts.decoder_graph or ("fused" if opts.target == "cpu" else "portable")
        built = _built_graphs(model, tmp, repo_opts.max_beam, opts, report) if graph == "fused" else None
        if built is None:  # torch.onnx.export: the standard ONNX that TensorRT builds
            encoder = export_encoder(model, tmp / "encoder.onnx", opts.external_data_bytes)
            decoder = export_decoder(model, tmp / "decoder.onnx", repo_opts.max_beam, opts.external_data_bytes)
        else:
            encoder, decoder = built
        stage("onnx", t)

        if built is None:  # the graphs TensorRT may build
            t = time.monotonic()
            findings = [f"{p.name}: {f}" for p in (encoder, decoder) for f in lint_file(p)]
            report.lint = findings
            if findings:
                raise ExportError("TensorRT lint failed:\n  " + "\n  ".join(findings))
            stage("lint", t)

        d = dims_of(model, repo_opts.max_beam)
        files, artifacts = _tokenizer_artifacts(ckpt.tokenizer, tmp, ckpt.path)
        artifacts.update({f.name: f for f in (*graph_files(encoder), *graph_files(decoder))})
        spec = ModelSpec(
            layers=d.layers, heads=d.heads, d_k=d.d_k, vocab=d.vocab, max_positions=cfg.max_positions,
            pad_id=cfg.pad_id, bos_id=cfg.bos_id, eos_id=cfg.eos_id, unk_id=cfg.unk_id,
            src_vocab=cfg.src_vocab_size, max_source_len=opts.max_source_len, max_target_len=opts.max_target_len, max_batch=opts.max_batch,
            beam_size=opts.beam_size, tokenizer=files, fp16=opts.precision == "fp16", max_beam=repo_opts.max_beam,
            beam_rule=ckpt.decoding.rule, length_penalty=ckpt.decoding.length_penalty, min_length=ckpt.decoding.min_length,
            max_length_a=ckpt.decoding.max_length_a, max_length_b=ckpt.decoding.max_length_b,
            hashes={"encoder.onnx": graph_sha256(encoder, graph_files(encoder)[1:]),
                    "decoder.onnx": graph_sha256(decoder, graph_files(decoder)[1:])},
        )
        spec.save(tmp / SPEC_FILE)
        artifacts[SPEC_FILE] = tmp / SPEC_FILE

        reference = None
        if not opts.skip_parity:  # the PyTorch side first, so that the model is freed before ONNX Runtime loads
            t = time.monotonic()
            search = spec.search_options(max_length=min(opts.max_target_len, 128))
            sources = _parity_sources(ckpt, opts.parity_sentences, opts.max_source_len)
            reference = record_reference(model, sources, search, tmp / "parity")
            stage("parity reference", t)
        del model
        ckpt.release_model()
        fp32 = _Fp32(encoder, decoder, spec)
        if reference is not None:
            t = time.monotonic()
            report.parity = compare(reference, fp32.get())
            shutil.rmtree(reference.folder)
            stage("parity", t)
            if not report.parity.passed:
                raise ExportError(report.parity.summary())

        if gate is not None:
            spec, repo_opts = _quality_gate(gate, ckpt, spec, opts, tmp, artifacts, report, repo_opts, stage, fp32,
                                            laid_out=built is not None)
        else:  # the markup probe needs held-out sentences of its own
            held = _held_out(ckpt, opts, 2 * markup.PROBE_SENTENCES, strict=False)
            if held is not None:
                repo_opts = _probe_markup(held, fp32.get(), ckpt, spec.search_options(), opts, report, repo_opts, stage)
        fp32.close()

        if built is None:  # written graphs are laid out as they are written
            spec = _lay_out_weights(artifacts, spec, tmp, opts.external_data_bytes)
        if restrictions:  # after the gate: it measures the precision, not the restriction
            artifacts[vocabulary.FILE] = vocabulary.save(tmp, restrictions)
            report.notes += [f"vocabulary restricted for {r.language or 'the target language'}: {len(r.ids):,} of "
                             f"{spec.vocab:,} tokens (from {r.lines:,} lines of {r.source})" for r in restrictions]
        t = time.monotonic()
        write_repository(opts.repository, d, artifacts, repo_opts)
        stage("write", t)
    if opts.target == "gpu" and gate is None:
        report.notes.append(
            "no quality gate set (the checkpoint has no test.en; --gate-source names one): an fp16 build at "
            "container start cannot be checked against fp32 and is used unchecked")
    if opts.target == "gpu":
        # Plans are specific to the GPU model and the TensorRT version, so they are not built here.
        report.notes.append(
            "target gpu: the TensorRT plans for encoder/decoder are built for the GPU present when the "
            "container starts (`docker compose up`, see README: GPU deployment)"
        )
    return report


def _lay_out_weights(artifacts: dict[str, Path], spec: ModelSpec, tmp: Path, external_bytes: int) -> ModelSpec:
    """The served graphs' weights as ``nmtserve.export.weights`` lays them out: once the graphs'
    weights reach ``external_bytes``, every large tensor in a data file beside its graph at an
    aligned offset (mapped by ONNX Runtime, not copied), and a tensor both graphs hold (a shared
    vocabulary table) in the encoder's file only. Updates ``artifacts``; the spec with the new hashes."""
    names = ("encoder.onnx", "decoder.onnx")
    files = {name: graph_files(artifacts[name]) for name in names}
    if sum(f.stat().st_size for fs in files.values() for f in fs) < external_bytes:
        return spec
    (tmp / "served").mkdir()
    shared = SharedWeights()
    min_bytes = tensor_threshold(external_bytes)
    for name in names:
        graph = artifacts[name]
        for f in files[name]:
            artifacts.pop(f.name, None)
        artifacts.update({f.name: f for f in graph_files(rewrite(graph, tmp / "served" / name, shared, min_bytes))})
    hashes = {name: graph_sha256(artifacts[name], graph_files(artifacts[name])[1:]) for name in names}
    spec = dataclasses.replace(spec, hashes=hashes)
    spec.save(artifacts[SPEC_FILE])
    return spec


def _built_graphs(model, tmp: Path, max_beam: int, opts: ExportOptions, report: ExportReport) -> tuple[Path, Path] | None:
    """The CPU graphs written from the weights (``nmtserve.export.cpu_graph``; checked by the
    parity stage like any other), laid out as served, the decoder pointing at the encoder's copy
    of a shared table; or None with a note when the builder does not cover the model (then the
    torch exports are served)."""
    import onnx  # noqa: PLC0415 - export-only dependency

    folder = tmp / "graphs"
    folder.mkdir()
    shared = SharedWeights()
    try:
        encoder = build_cpu_encoder(model, folder / "encoder.onnx", opts.external_data_bytes, shared)
        decoder = build_cpu_decoder(model, folder / "decoder.onnx", max_beam, opts.external_data_bytes, shared)
    except UnsupportedModel as exc:
        report.notes.append(f"graphs: torch.onnx exports (the CPU graph builder does not cover this model: {exc})")
        shutil.rmtree(folder)
        return None
    nodes = len(onnx.load(str(decoder), load_external_data=False).graph.node)
    report.decoder_graph = (f"decoder graph: fused for ONNX Runtime's CPU provider ({nodes} nodes; "
                            "--decoder-graph portable serves the torch export)")
    return encoder, decoder


class _Fp32:
    """The fp32 graphs under ONNX Runtime, opened once for every stage that reads them (parity, the
    gate's fp32 decode, the markup probe) and closed before the int8 graphs open."""

    def __init__(self, encoder: Path, decoder: Path, spec: ModelSpec):
        self.encoder, self.decoder, self.spec = encoder, decoder, spec
        self._model: OnnxModel | None = None

    def get(self) -> OnnxModel:
        if self._model is None:
            self._model = OnnxModel(self.encoder, self.decoder, self.spec)
        return self._model

    def close(self) -> None:
        self._model = None


def _gate_set(ckpt: Checkpoint, opts: ExportOptions) -> quality.GateSet | None:
    """The sentences a reduced precision is checked on: the user's file, or the checkpoint's test set.

    Needed for int8 (checked here) and for the gpu target (fp16 plans are checked at container
    start against the fp32 translations shipped in the repository)."""
    if opts.precision != "int8" and opts.target != "gpu":
        return None
    gate = _held_out(ckpt, opts, opts.gate_sentences, strict=True)
    if gate is None and opts.precision == "int8":
        raise ExportError(
            f"quality gate: {ckpt.path} has no held-out test.en / test.<tgt> pair to check int8 against fp32 on; "
            "give the sentences with --gate-source FILE (and their translations with --gate-reference FILE)")
    return gate


def named_pair(checkpoint: Path) -> str:
    """The language pair a checkpoint names: its held-out ``test.<src>`` / ``test.<tgt>`` files
    (nmtserve's), else a Marian tokenizer's ``source_lang`` / ``target_lang``; "unknown" for a side
    it does not name."""
    unknown = contract.UNKNOWN_LANGUAGE
    tests = sorted(p.suffix[1:] for p in Path(checkpoint).glob("test.*"))
    if len(tests) == 2 and "en" in tests:
        other = next(t for t in tests if t != "en")
        return f"en-{other}"
    try:
        config = json.loads((Path(checkpoint) / "tokenizer_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        config = {}
    source, target = config.get("source_lang"), config.get("target_lang")
    return f"{source or unknown}-{target or unknown}"


def _held_out(ckpt: Checkpoint, opts: ExportOptions, limit: int, strict: bool) -> quality.GateSet | None:
    """The user's --gate-source or the checkpoint's held-out test set, with a multilingual model's
    languages resolved; None when there is none (or, not ``strict``, when its languages are not given)."""
    try:
        if opts.gate_source is not None:
            gate = quality.read_gate_set(opts.gate_source, opts.gate_reference, limit)
        else:
            gate = quality.checkpoint_gate_set(ckpt.path, limit)
    except quality.GateError as exc:
        raise ExportError(f"quality gate: {exc}") from exc
    codes = list(getattr(ckpt.tokenizer, "languages", None) or ())
    if gate is not None and codes:
        from ..languages import LanguageError, resolve  # noqa: PLC0415

        if not (opts.gate_source_lang and opts.gate_target_lang):
            if not strict:
                return None
            raise ExportError("quality gate: a multilingual model translates the gate set between two of its "
                              f"{len(codes)} languages: give --gate-source-lang and --gate-target-lang")
        try:
            gate.source_lang = resolve(opts.gate_source_lang, codes)
            gate.target_lang = resolve(opts.gate_target_lang, codes)
        except LanguageError as exc:
            raise ExportError(f"quality gate: {exc}") from exc
    return gate


def _probe_markup(held: quality.GateSet, fp32: OnnxModel, ckpt: Checkpoint, options: SearchOptions,
                  opts: ExportOptions, report: ExportReport, repo_opts: RepositoryOptions, stage) -> RepositoryOptions:
    """Measure whether the model carries inline placeholders (``markup.probe``) on the fp32 graphs;
    the repository options with the verdict."""
    t = time.monotonic()
    report.markup = markup.probe(held, fp32, ckpt.tokenizer, options, opts.max_batch)
    stage("markup probe", t)
    return dataclasses.replace(repo_opts, inline_markup=report.markup.mode)


def _quality_gate(gate: quality.GateSet, ckpt: Checkpoint, spec: ModelSpec, opts: ExportOptions, tmp: Path,
                  artifacts: dict[str, Path], report: ExportReport, repo_opts: RepositoryOptions, stage, fp32: _Fp32,
                  laid_out: bool):
    """Translate the gate set with the fp32 graphs (shipped for the GPU's fp16 check) and, for int8,
    quantize, translate again and refuse on a BLEU drop over the limit. Updates ``artifacts``.
    ``laid_out``: the graphs are as served (the int8 ones are written the same way, sharing a table)."""
    t = time.monotonic()
    options = spec.search_options()
    report.quality["fp32"] = quality.baseline(gate, fp32.get(), ckpt.tokenizer, options, opts.max_batch)
    stage("fp32 gate decode", t)
    # What the served WARNING takes as this model's usual length and lowest score (nmtserve.coverage).
    spec = dataclasses.replace(spec, length_ratio=usual_length_ratio(gate.sources, gate.fp32 or []),
                               score_floor=usual_score_floor(gate.fp32_scores or []))
    spec.save(artifacts[SPEC_FILE])
    repo_opts = _probe_markup(gate, fp32.get(), ckpt, options, opts, report, repo_opts, stage)
    fp32.close()
    if opts.precision == "int8":
        t = time.monotonic()
        keep = parse_keep(opts.int8_keep_fp32)
        (tmp / "int8").mkdir()
        tables = (ckpt.config.src_vocab_size, ckpt.config.tgt_vocab_size)
        shared = SharedWeights() if laid_out else None
        quantized = {name: quantize_int8(artifacts[name], tmp / "int8" / name, keep, tables, shared,
                                         tensor_threshold(opts.external_data_bytes))
                     for name in ("encoder.onnx", "decoder.onnx")}
        stage("quantize", t)
        t = time.monotonic()
        int8 = OnnxModel(quantized["encoder.onnx"].path, quantized["decoder.onnx"].path,
                         dataclasses.replace(spec, precision="int8"))  # refused where ONNX Runtime's int8 is inexact
        checked = quality.check(gate, int8, ckpt.tokenizer, options, "int8", opts.max_bleu_drop,
                                seconds_fp32=report.quality["fp32"]["seconds"], max_sentences=opts.max_batch)
        del int8
        stage("int8 gate", t)
        report.quality["int8"] = {**checked.to_dict(), "kept_fp32": list(keep),
                                  "weight_matmuls_int8": sum(q.quantized for q in quantized.values()),
                                  "tables_int8": sum(q.tables for q in quantized.values())}
        if not checked.passed:
            raise ExportError(_gate_failure(checked, keep))
        for name in ("encoder.onnx", "decoder.onnx"):
            for f in graph_files(artifacts[name]):
                artifacts.pop(f.name, None)
        for q in quantized.values():
            artifacts.update({f.name: f for f in graph_files(q.path)})
        spec = dataclasses.replace(spec, precision="int8", hashes={name: graph_sha256(q.path, graph_files(q.path)[1:])
                                                                   for name, q in quantized.items()})
        spec.save(artifacts[SPEC_FILE])
        repo_opts = dataclasses.replace(repo_opts, precision="int8", quality=checked.summary())
    elif opts.precision == "fp16":
        repo_opts = dataclasses.replace(repo_opts, precision="fp16 (TensorRT plans, checked at container start)")
    gate.max_bleu_drop = opts.max_bleu_drop
    gate.save(tmp / quality.GATE_FILE)
    for name, entry in report.quality.items():
        quality.write_report(tmp, name, entry)
    artifacts[quality.GATE_FILE] = tmp / quality.GATE_FILE
    artifacts[quality.REPORT_FILE] = tmp / quality.REPORT_FILE
    return spec, repo_opts


def _gate_failure(checked: quality.QualityReport, keep: tuple[str, ...]) -> str:
    lines = [f"{checked.summary()}", f"int8 loses {checked.bleu_drop:.2f} BLEU, more than --max-bleu-drop "
             f"{checked.max_bleu_drop:g}: the repository was not written. Worst sentences:"]
    for w in checked.worst[:3]:
        lines += [f"  [{w['index']}] source: {w['source']}", f"      fp32: {w['fp32']}", f"      int8: {w['int8']}"]
    more = [g for g in ("output", "embeddings", "attention", "ffn") if g not in keep]
    tries = []
    if more:
        tries.append(f"keep the most sensitive weights in fp32 (--int8-keep-fp32 {','.join([*keep, more[0]])})")
    tries += ["export fp32 (--precision fp32)",
              f"or accept the loss explicitly (--max-bleu-drop {max(checked.bleu_drop, 0) + 0.1:.1f})"]
    lines.append("What to try: " + "; ".join(tries) + ".")
    return "\n".join(lines)
