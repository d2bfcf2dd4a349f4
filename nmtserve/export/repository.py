"""Writes the Triton model repository: config.pbtxt and a thin model.py per model, artifacts.

Layout (``--name translate``)::

    translate/         ensemble: tokenize -> generate -> detokenize
    translate_document/ Python: a document (plain, Markdown, HTML) cut into sentences, all of them
                       sent to `translate` as one request (BLS), put back together
    tokenize/          Python: sentencepiece
    generate/          Python, non-decoupled, answers through response senders: the in-flight
      1/               batcher over encoder.onnx decoder.onnx (model.json source.spm [target.spm vocab.json])
    detokenize/        Python: sentencepiece
    encoder/ decoder/  the graphs themselves, for users who run their own loop (``graph_models``;
                       on the gpu target as TensorRT plan models)

``target="gpu"``: ``generate`` runs TensorRT plans itself (``step_backend: tensorrt``, one
instance per GPU, its cache pool on the GPU) from ``generate/1/encoder.plan`` and
``decoder.plan``, built for the GPU present when the container starts
(``nmtserve.export.engines``); with ``graph_models`` the same plans are also served as TensorRT
models ``encoder`` / ``decoder`` (``platform: "tensorrt_plan"``, ``1/model.plan``).

Every model.py is a one-line hand-over to ``nmtserve.server.triton_models`` (the BLS front doors:
``front_doors``); artifacts live
once, in ``generate/1``, and the other models point at them with an ``artifacts``
parameter.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from .. import contract, defaults, graphs
from ..runtime import vocabulary
from ..runtime.spec import STEP_BACKENDS, ModelSpec
from .quality import GATE_FILE, REPORT_FILE

ARTIFACTS_MODEL = "generate"
GENERATE_BACKENDS = ("python", "nmtserve")  # RepositoryOptions.generate_backend
GRAPH_MODELS = ("encoder", "decoder")
# Artifacts an export writes only sometimes: one left by an earlier export is removed.
OPTIONAL_ARTIFACTS = (REPORT_FILE, GATE_FILE, "encoder.onnx.data", "decoder.onnx.data", vocabulary.FILE)
TARGETS = ("cpu", "gpu")
DEFAULT_STEP_BACKEND = {"cpu": "inprocess", "gpu": "tensorrt"}
# generate's plans on the gpu target: the ones Triton's TensorRT backend serves as encoder/decoder.
# generate's plans on the gpu target, in its own folder (built there at container start): the
# engine deserializes them itself, so Triton loads the `encoder`/`decoder` plan models only when
# the export asks for them (--graph-models), not a second copy of every engine by default.
PLAN_PARAMS = {"encoder_plan": "encoder.plan", "decoder_plan": "decoder.plan"}
_TRITON_TYPES = {"int32": "TYPE_INT32", "int64": "TYPE_INT64", "bool": "TYPE_BOOL", "float32": "TYPE_FP32",
                 "float16": "TYPE_FP16"}


@dataclass(frozen=True)
class RepositoryOptions:
    name: str = contract.DEFAULT_MODEL
    max_batch: int = ModelSpec.max_batch  # the most sentences in the running decode batch
    # Sentences decoding together; 0: chosen at load (nmtserve.server.triton_models.running_batch:
    # 12 per core on CPU up to max_batch, max_batch on a GPU).
    running_batch: int = 0
    max_beam: int = graphs.DEFAULT_MAX_BEAM
    # CPU decode loops and ONNX Runtime threads per call; 0: chosen at load for the cores present
    # (nmtserve.server.triton_models.cpu_layout: 2 loops x cores // 2 threads).
    workers: int = 0
    intra_op_threads: int = 0
    # How generate runs the graphs (nmtserve.runtime.spec.STEP_BACKENDS); "": the
    # target's default ("inprocess" ONNX Runtime on cpu, measured faster than "bls"; "tensorrt" on gpu).
    step_backend: str = ""
    target: str = "cpu"  # "gpu": TensorRT encoder/decoder models, and generate on those plans
    # Serve the graphs themselves as `encoder` / `decoder` models on CPU (custom decode loops;
    # the `bls` step backend needs them). Off by default: each is a process holding a copy of
    # the weights (opus-mt-base: ~700 MB for the two) that the translation path never uses.
    graph_models: bool = False
    # The ensemble as one step: generate tokenizes and detokenizes in its own process, no
    # tokenize/detokenize hops (contract.TEXT_IN_GENERATE_PARAMETER): a one-sentence request's
    # p50 ~10% sooner, bulk and concurrent clients the same (bench/hops.py --against, RESULTS.md).
    # False: the three-step ensemble tokenize -> generate -> detokenize. Either way the tokenize
    # and detokenize models are there for callers that use them directly.
    text_in_generate: bool = True
    # The Triton backend generate runs on (GENERATE_BACKENDS): "python", the Python backend (a stub
    # process; every request and response through shared memory), or "nmtserve", nmtserve_native's
    # backend (native/triton/backend.cpp: the same model code in the server process). Same answers
    # (tests/test_inprocess.py); served demo p50 ~6% sooner, 64 clients ~10% more (bench/RESULTS.md).
    generate_backend: str = "python"
    # Shown in the ensemble's config parameters (what `GET /v2/models/<name>/config` returns):
    # the graphs' precision and the quality gate's one-line verdict (nmtserve.export.quality).
    precision: str = "fp32"
    quality: str = ""
    # "keep": documents send inline placeholders to the model; "drop": it is not trusted with them
    # (nmtserve.export.markup measures which; unmeasured exports drop).
    inline_markup: str = contract.INLINE_MARKUP_DROP
    # Limits (0: none). tokenize: sentences per request, characters per sentence; generate:
    # sentences waiting to decode, seconds a request may wait (overload answers UNAVAILABLE).
    max_request_sentences: int = defaults.MAX_REQUEST_SENTENCES
    max_sentence_chars: int = defaults.MAX_SENTENCE_CHARS
    max_queued_sentences: int = defaults.MAX_QUEUED_SENTENCES
    queue_timeout_s: float = defaults.QUEUE_TIMEOUT_S
    # translate_document: characters per document (its sentences go to `translate` in requests of
    # at most max_request_sentences).
    max_document_chars: int = defaults.MAX_DOCUMENT_CHARS
    # A language pair ("en-fr"): the models get the pair's suffix (translate_en_fr, tokenize_en_fr,
    # generate_en_fr, ...), and `translate` / `translate_document` route by SOURCE_LANG /
    # TARGET_LANG to every pair in the repository (exports of other pairs add theirs). "": one
    # model, no routing (the default layout).
    pair: str = ""
    # A multilingual model's language codes (NLLB's "fra_Latn", ...): its ensemble and tokenize take
    # SOURCE_LANG / TARGET_LANG, and the ensemble lists them in its `languages` parameter.
    languages: tuple[str, ...] = ()
    # The language pair the checkpoint names ("en-fr"; "unknown" for a side it does not name):
    # the one-model ensemble's `pair` parameter, which `nmtserve pairs` lists.
    named_pair: str = ""

    def __post_init__(self) -> None:
        if self.target not in TARGETS:
            raise ValueError(f"target must be one of {', '.join(TARGETS)}, got {self.target!r}")
        if not self.step_backend:
            object.__setattr__(self, "step_backend", DEFAULT_STEP_BACKEND[self.target])
        if self.step_backend not in STEP_BACKENDS:
            raise ValueError(f"step_backend must be one of {', '.join(STEP_BACKENDS)}, got {self.step_backend!r}")
        if self.target == "cpu" and self.step_backend in ("tensorrt", "onnxruntime-cuda"):
            raise ValueError(f"step_backend {self.step_backend!r} needs a GPU: use it with target 'gpu'")
        if self.pair:
            side = contract.PAIR_PATTERN
            if not re.fullmatch(f"{side}-{side}", self.pair):
                raise ValueError(f"pair must be SOURCE-TARGET language codes like en-fr or pt_BR-en, got {self.pair!r}")
            if self.target == "gpu":
                raise ValueError("language pairs are served on the cpu target only so far (the GPU container "
                                 "builds plans for one model): export each pair to its own repository")
            if self.languages:
                raise ValueError("a multilingual model serves every language it knows from one export: "
                                 "leave --pair out")

    @property
    def suffix(self) -> str:
        return contract.pair_suffix(self.pair)


def _tensor(name: str, dtype: str, dims: list[int], optional: bool = False) -> str:
    opt = " optional: true" if optional else ""
    return f'  {{ name: "{name}" data_type: {dtype} dims: [ {", ".join(map(str, dims))} ]{opt} }}'


def _io(kind: str, tensors: list[str]) -> str:
    return f"{kind} [\n" + ",\n".join(tensors) + "\n]\n"


def _quoted(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ")


def _params(params: dict[str, str]) -> str:
    return "".join(
        f'parameters {{ key: "{k}" value: {{ string_value: "{_quoted(v)}" }} }}\n' for k, v in params.items()
    )


def _python_model(name: str, inputs: list[str], outputs: list[str], *, params: dict[str, str] | None = None,
                  kind: str = "KIND_CPU", backend: str = "python") -> str:
    text = f'name: "{name}"\nbackend: "{backend}"\nmax_batch_size: 0\n'
    text += _io("input", inputs) + _io("output", outputs)
    text += f"instance_group [ {{ count: 1 kind: {kind} }} ]\n"
    return text + _params(params or {})


def _tensorrt_model(name: str, inputs: list[str], outputs: list[str]) -> str:
    """A TensorRT plan model; max_batch_size 0: the batch axis is an ordinary dynamic dim of the graph."""
    text = f'name: "{name}"\nplatform: "tensorrt_plan"\nmax_batch_size: 0\n'
    return text + _io("input", inputs) + _io("output", outputs) + "instance_group [ { count: 1 kind: KIND_GPU } ]\n"


def _graph_tensors(tensors: list[graphs.Tensor], float_dtype: str = "float32") -> list[str]:
    return [
        _tensor(t.name, _TRITON_TYPES[graphs.resolve_dtype(t, float_dtype)], [a if isinstance(a, int) else -1 for a in t.axes])
        for t in tensors
    ]


def _tensors(tensors: list[contract.Tensor]) -> list[str]:
    return [_tensor(t.name, t.triton_type, list(t.dims), optional=t.optional) for t in tensors]


def _ensemble(name: str, params: dict[str, str], sfx: str = "", multilingual: bool = False,
              text_in_generate: bool = False) -> str:
    def step(model: str, inputs: dict[str, str], outputs: dict[str, str]) -> str:
        ins = "".join(f'      input_map {{ key: "{k}" value: "{v}" }}\n' for k, v in inputs.items())
        outs = "".join(f'      output_map {{ key: "{k}" value: "{v}" }}\n' for k, v in outputs.items())
        return f'    {{\n      model_name: "{model}"\n      model_version: -1\n{ins}{outs}    }}'

    c = contract
    tokenize_inputs = c.MULTILINGUAL_TOKENIZE_INPUTS if multilingual else c.TOKENIZE_INPUTS
    sources = [t.name for t in (*c.SOURCE_TENSORS, *c.FORCED_TENSORS, *c.TERM_TENSORS)]
    layout = [t.name for t in c.LAYOUT_TENSORS]
    generated = (c.OUT_IDS, c.OUT_LEN, c.OUT_SCORE, c.OUT_ALIGN, c.OUT_LOGPROB)
    internal = {n: n.lower() for n in (*sources, *layout, *generated)}
    options = {n: n for n in c.OPTION_INPUTS}
    inputs = c.LANGUAGE_INPUTS if multilingual else c.TRANSLATE_INPUTS
    answers = {t.name: t.name for t in c.TRANSLATE_OUTPUTS}
    if text_in_generate:  # one step: generate takes the text and answers it
        steps = [step("generate" + sfx, {t.name: t.name for t in inputs}, answers)]
    else:
        steps = [
            step("tokenize" + sfx, {t.name: t.name for t in tokenize_inputs}, {n: internal[n] for n in (*sources, *layout)}),
            step("generate" + sfx, {**{n: internal[n] for n in sources}, **options},
                 {n: internal[n] for n in generated}),
            step("detokenize" + sfx, {**{n: internal[n] for n in (*generated, *layout,
                                                                 c.SRC_IDS, c.SRC_LEN)}, c.TEXT: c.TEXT, c.TERMS: c.TERMS,
                                      **({t.name: t.name for t in c.LANGUAGES} if multilingual else {})}, answers),
        ]
    text = f'name: "{name}"\nplatform: "ensemble"\nmax_batch_size: 0\n'
    text += _io("input", _tensors(inputs)) + _io("output", _tensors(c.TRANSLATE_OUTPUTS))
    text += "ensemble_scheduling {\n  step [\n" + ",\n".join(steps) + "\n  ]\n}\n"
    return text + _params(params)


_MODEL_PY = '''"""Triton model `{model}` of nmtserve: the logic lives in nmtserve.server.{module}.{cls}."""

from nmtserve.server.{module} import {cls} as TritonPythonModel  # noqa: F401
'''
# The module of each model class: the ensemble's steps, or the BLS front doors beside it.
MODEL_MODULES = {"DocumentModel": "front_doors", "PairRouterModel": "front_doors"}


def model_configs(dims: graphs.Dims, opts: RepositoryOptions,
                  pairs: tuple[str, ...] = ()) -> dict[str, tuple[str, str | None]]:
    """model name -> (config.pbtxt text, model.py class; None for the ensemble and TensorRT models).

    With ``opts.pair``, ``pairs`` is every pair the repository will serve (the router's list)."""
    sfx = opts.suffix
    art = {"artifacts": f"../../{ARTIFACTS_MODEL}{sfx}/1"}
    graph_io = {
        "encoder": (_graph_tensors(graphs.encoder_inputs()), _graph_tensors(graphs.encoder_outputs(dims))),
        "decoder": (_graph_tensors(graphs.decoder_inputs(dims)), _graph_tensors(graphs.decoder_outputs(dims))),
    }
    engine_params = {"artifacts": ".", "max_batch": str(opts.max_batch), "running_batch": str(opts.running_batch),
                     "max_beam": str(opts.max_beam),
                     "workers": str(opts.workers), "intra_op_threads": str(opts.intra_op_threads),
                     "step_backend": opts.step_backend, "max_queued_sentences": str(opts.max_queued_sentences),
                     "queue_timeout_s": f"{opts.queue_timeout_s:g}"}
    tokenize_params = {**art, "max_request_sentences": str(opts.max_request_sentences),
                       "max_sentence_chars": str(opts.max_sentence_chars)}
    # The engine's device: a GPU backend gets one instance per GPU (Triton passes the device id).
    engine_kind = "KIND_GPU" if opts.step_backend in ("tensorrt", "onnxruntime-cuda") else "KIND_CPU"
    if opts.step_backend == "tensorrt":
        engine_params.update(PLAN_PARAMS)
    graph_models: dict[str, tuple[str, str | None]]
    # TensorRT plans unless the GPU engine was asked to run without TensorRT (onnxruntime-cuda):
    # then nothing in the repository needs a plan and the container builds none.
    if not (opts.graph_models or opts.step_backend == "bls"):
        graph_models = {}
    elif opts.target == "gpu" and opts.step_backend != "onnxruntime-cuda":
        graph_models = {name: (_tensorrt_model(name, *io), None) for name, io in graph_io.items()}
    else:
        graph_models = {
            name + sfx: (_python_model(name + sfx, *io, params={**art, "graph": f"{name}.onnx"}), "OnnxGraphModel")
            for name, io in graph_io.items()
        }
    unknown = f"{contract.UNKNOWN_LANGUAGE}-{contract.UNKNOWN_LANGUAGE}"
    ensemble_params = {"precision": opts.precision, **({"quality": opts.quality} if opts.quality else {}),
                       **({contract.LANGUAGES_PARAMETER: ",".join(opts.languages)} if opts.languages else
                          {contract.PAIR_PARAMETER: opts.pair or opts.named_pair or unknown})}
    document = opts.name + contract.DOCUMENT_MODEL_SUFFIX
    multilingual = bool(opts.languages)
    tokenize_inputs = contract.MULTILINGUAL_TOKENIZE_INPUTS if multilingual else contract.TOKENIZE_INPUTS
    generate_io = (_tensors(contract.GENERATE_INPUTS), _tensors(contract.GENERATE_OUTPUTS))
    if opts.text_in_generate:  # tokenize's and detokenize's parameters go to generate too
        languages = list(contract.LANGUAGES) if multilingual else []
        generate_io = (_tensors([*contract.TEXT_GENERATE_INPUTS, *languages]), _tensors(contract.TEXT_GENERATE_OUTPUTS))
        engine_params.update({k: v for k, v in tokenize_params.items() if k != "artifacts"})
        engine_params[contract.TEXT_IN_GENERATE_PARAMETER] = "1"
        engine_params[contract.PAIR_PARAMETER] = ensemble_params.get(contract.PAIR_PARAMETER, "")
    models = {
        opts.name + sfx: (_ensemble(opts.name + sfx, ensemble_params, sfx, multilingual, opts.text_in_generate), None),
        "tokenize" + sfx: (_python_model("tokenize" + sfx, _tensors(tokenize_inputs),
                                         _tensors(contract.TOKENIZE_OUTPUTS), params=tokenize_params), "TokenizeModel"),
        ARTIFACTS_MODEL + sfx: (_python_model(ARTIFACTS_MODEL + sfx, *generate_io, params=engine_params,
                                              kind=engine_kind, backend=opts.generate_backend), "GenerateModel"),
        "detokenize" + sfx: (_python_model("detokenize" + sfx, _tensors(contract.DETOKENIZE_INPUTS),
                                           _tensors(contract.DETOKENIZE_OUTPUTS),
                                           params={**art, contract.PAIR_PARAMETER: ensemble_params.get(contract.PAIR_PARAMETER, "")}),
                          "DetokenizeModel"),
        document: (
            _python_model(document, _tensors(contract.DOCUMENT_INPUTS), _tensors(contract.DOCUMENT_OUTPUTS),
                          params={"translate_model": opts.name, "max_document_chars": str(opts.max_document_chars),
                                  contract.INLINE_MARKUP_PARAMETER: opts.inline_markup,
                                  contract.ALIGNMENTS_PARAMETER: "1",
                                  "max_request_sentences": str(opts.max_request_sentences),
                                  "routed": "1" if opts.pair or multilingual else "0"}),
            "DocumentModel"),
        **graph_models,
    }
    if opts.pair:
        listed = ",".join(sorted({*pairs, opts.pair}))
        models[opts.name] = (
            _python_model(opts.name, _tensors(contract.ROUTER_INPUTS), _tensors(contract.TRANSLATE_OUTPUTS),
                          params={contract.PAIRS_PARAMETER: listed}), "PairRouterModel")
    return models


def _write(path: Path, data: str | bytes) -> None:
    """Atomic write, so a re-export never leaves a half-written file for a running server."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data.encode() if isinstance(data, str) else data)
    tmp.replace(path)


def write_repository(repository: Path, dims: graphs.Dims, artifacts: dict[str, Path], opts: RepositoryOptions) -> list[Path]:
    """Write configs, model.py files and artifacts; returns the files written."""
    written = []
    configs = model_configs(dims, opts, repository_pairs(repository, opts.name))
    for model in (g + opts.suffix for g in GRAPH_MODELS):  # left by an earlier export that served them
        if model not in configs and (repository / model / "config.pbtxt").is_file():
            shutil.rmtree(repository / model)
    for model, (config, cls) in configs.items():
        _write(repository / model / "config.pbtxt", config)
        written.append(repository / model / "config.pbtxt")
        version = repository / model / "1"
        version.mkdir(parents=True, exist_ok=True)
        if cls:
            _write(version / "model.py", _MODEL_PY.format(model=model, cls=cls,
                                                          module=MODEL_MODULES.get(cls, "triton_models")))
            written.append(version / "model.py")
        else:  # a model.py left by an export for the other target would be misleading
            (version / "model.py").unlink(missing_ok=True)
    target = repository / (ARTIFACTS_MODEL + opts.suffix) / "1"
    for name in OPTIONAL_ARTIFACTS:
        if name not in artifacts:
            (target / name).unlink(missing_ok=True)
    for name, src in artifacts.items():
        dst = target / name
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.resolve() != dst.resolve():
            tmp = dst.with_name(dst.name + ".tmp")
            shutil.copyfile(src, tmp)
            tmp.replace(dst)
        written.append(dst)
    return written


_PAIRS_LINE = re.compile(r'key: "' + contract.PAIRS_PARAMETER + r'" value: \{ string_value: "([^"]*)" \}')


def repository_pairs(repository: Path, name: str = contract.DEFAULT_MODEL) -> tuple[str, ...]:
    """The pairs the repository's router serves now (none: no router there)."""
    config = repository / name / "config.pbtxt"
    if not config.is_file():
        return ()
    text = config.read_text(encoding="utf-8")
    found = _PAIRS_LINE.search(text)
    return tuple(p for p in found.group(1).split(",") if p) if found else ()


def check_layout(repository: Path, opts: RepositoryOptions) -> None:
    """Refuse to mix the one-model layout and the pair layout in one repository."""
    config = repository / opts.name / "config.pbtxt"
    if not config.is_file():
        return
    router = bool(repository_pairs(repository, opts.name))
    if opts.pair and not router:
        raise ValueError(f"{repository} serves one model without a language pair ({opts.name} is its ensemble): "
                         f"export every model with --pair SRC-TGT into a new repository")
    if not opts.pair and router:
        pairs = ", ".join(repository_pairs(repository, opts.name))
        raise ValueError(f"{repository} serves language pairs ({pairs}): give --pair SRC-TGT for this model")
