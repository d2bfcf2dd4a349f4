"""The Triton Python-backend models behind ``model_repository/*/1/model.py``.

``translate`` (ensemble) = ``tokenize`` -> ``generate`` -> ``detokenize``.

``generate`` is a plain (non-decoupled) model, so unary gRPC/HTTP infer on the ensemble works
with stock clients; it owns the in-flight batcher (``engine.py``) and answers each request
through its response sender when the request's sentences are done, so its ``execute`` returns
at once and concurrent requests share one running batch in one process.

``encoder`` and ``decoder`` expose the graphs themselves for users who drive their own loop.

Every model: the config is parsed once in ``initialize`` (a bad config fails the load with a
message), ``execute`` returns exactly one response per request, and a bad request gets an
``INVALID_ARG`` error naming the problem instead of failing the batch.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from .. import contract as c
from .. import defaults
from ..decoding.search import SearchOptions
from . import drain as drain_handshake
from .protocol import (
    InputError,
    decode_strings,
    decode_texts,
    parse_languages,
    parse_prefixes,
    parse_search_options,
    parse_sources,
    results_to_arrays,
    tokenize_request,
)
from .step_runtimes import step_runtime

log = logging.getLogger("nmtserve.server")

try:  # only importable inside the Triton Python backend stub
    import triton_python_backend_utils as pb_utils
except ImportError:  # pragma: no cover - unit tests import this module outside Triton
    pb_utils = None


def _error(message: str, invalid: bool = True):
    code = pb_utils.TritonError.INVALID_ARG if invalid else pb_utils.TritonError.INTERNAL
    return pb_utils.TritonError(message, code)


def _engine_error(prefix: str, exc: BaseException):
    """An engine failure as the status a client can act on: UNAVAILABLE while the server shuts
    down or is overloaded (retry later or elsewhere), CANCELLED for a cancelled request, INVALID_ARG for a request the
    engine refuses, INTERNAL otherwise."""
    from ..engine import EngineBusy, EngineStopped, RequestCancelled

    errors = pb_utils.TritonError
    if isinstance(exc, (EngineStopped, EngineBusy)):
        code = getattr(errors, "UNAVAILABLE", errors.INTERNAL)
    elif isinstance(exc, RequestCancelled):
        code = getattr(errors, "CANCELLED", errors.INTERNAL)
    elif isinstance(exc, ValueError):  # refused at submit (a limit of the engine)
        code = errors.INVALID_ARG
    else:
        code = errors.INTERNAL
    return pb_utils.TritonError(f"{prefix}{exc}", code)


def _input(request, name: str) -> np.ndarray | None:
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return None if tensor is None else tensor.as_numpy()


def _search_options(request, spec, max_beam: int) -> SearchOptions:
    """The request's optional decoding inputs, validated (InputError names a bad one)."""
    return parse_search_options({name: _input(request, name) for name in c.OPTION_INPUTS}, spec, max_beam)


def _parameters(args: dict) -> tuple[dict, Path]:
    config = json.loads(args["model_config"])
    params = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
    version_dir = Path(args["model_repository"]) / args["model_version"]
    return params, version_dir


def _artifacts(params: dict, version_dir: Path) -> Path:
    """Folder holding the exported artifacts (ONNX, model.json, sentencepiece models)."""
    return (version_dir / params.get("artifacts", ".")).resolve()


def queue_limits(params: dict):
    """generate's ``max_queued_sentences`` / ``queue_timeout_s`` parameters (0: no limit)."""
    from ..engine import QueueLimits

    default = QueueLimits()
    queued = int(params.get("max_queued_sentences", default.max_queued or 0))
    timeout = float(params.get("queue_timeout_s", default.timeout_s or 0))
    return QueueLimits(max_queued=queued or None, timeout_s=timeout or None)


class TokenizeModel:
    """TEXT [n] (UTF-8 bytes) -> SRC_IDS [n, S] int32 (padded), SRC_LEN [n] int32.

    Refuses (INVALID_ARG) a request of more than ``max_request_sentences`` sentences and a
    sentence of more than ``max_sentence_chars`` characters before tokenizing anything
    (parameters; defaults in protocol.RequestLimits), and a sentence of more tokens than the
    export's max_source_len."""

    def initialize(self, args: dict) -> None:
        from ..model.tokenizer import load_tokenizer
        from ..runtime.spec import SPEC_FILE, ModelSpec
        from .protocol import RequestLimits

        params, version_dir = _parameters(args)
        folder = _artifacts(params, version_dir)
        self.spec = ModelSpec.load(folder / SPEC_FILE)
        self.tokenizer = load_tokenizer(folder, self.spec)
        self.codes = list(getattr(self.tokenizer, "languages", None) or ())  # a multilingual model's
        self.limits = RequestLimits.from_params(params)

    def execute(self, requests: list) -> list:
        return [self._one(r) for r in requests]

    def _one(self, request):
        try:
            texts = decode_texts(_input(request, c.TEXT))
            self.limits.check(texts)
            prefixes = decode_strings(c.TARGET_PREFIX, _input(request, c.TARGET_PREFIX), len(texts), per_sentence=True)
            languages = None
            if self.codes:
                languages = parse_languages(_input(request, c.SOURCE_LANG), _input(request, c.TARGET_LANG),
                                            len(texts), self.codes)
            arrays = tokenize_request(self.tokenizer, texts, self.spec, prefixes=prefixes, languages=languages)
        except InputError as exc:
            return pb_utils.InferenceResponse(error=_error(str(exc)))
        return pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(n, a) for n, a in arrays.items()])


class DetokenizeModel:
    """OUT_IDS [n, k, T], OUT_LEN [n, k], OUT_SCORE [n, k] -> TRANSLATION, SCORE, NBEST_*."""

    def initialize(self, args: dict) -> None:
        from ..model.tokenizer import load_tokenizer
        from ..runtime.spec import SPEC_FILE, ModelSpec

        params, version_dir = _parameters(args)
        folder = _artifacts(params, version_dir)
        self.tokenizer = load_tokenizer(folder, ModelSpec.load(folder / SPEC_FILE))

    def execute(self, requests: list) -> list:
        out = []
        for request in requests:
            ids, lengths, scores = _input(request, c.OUT_IDS), _input(request, c.OUT_LEN), _input(request, c.OUT_SCORE)
            if (ids is None or lengths is None or scores is None or ids.ndim != 3 or lengths.ndim != 2
                    or ids.shape[:2] != lengths.shape or scores.shape != lengths.shape
                    or (lengths.size and not 0 <= lengths.min() <= lengths.max() <= ids.shape[2])):
                out.append(pb_utils.InferenceResponse(error=_error(
                    "OUT_IDS [n, k, T], OUT_LEN [n, k] (0..T) and OUT_SCORE [n, k] are required")))
                continue
            n, k = lengths.shape
            texts = np.empty((n, k), dtype=np.object_)
            for i in range(n):
                for j in range(k):
                    texts[i, j] = self.tokenizer.decode(ids[i, j, : int(lengths[i, j])].tolist()).encode("utf-8")
            out.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor(c.TRANSLATION, texts[:, 0].copy()),
                pb_utils.Tensor(c.SCORE, scores[:, 0].astype(np.float32)),
                pb_utils.Tensor(c.NBEST_TRANSLATION, texts),
                pb_utils.Tensor(c.NBEST_SCORE, scores.astype(np.float32)),
            ]))
        return out


class GenerateModel:
    """The decoder: SRC_IDS/SRC_LEN -> OUT_IDS/OUT_LEN/OUT_SCORE, by the in-flight batcher that
    runs in this process.

    A plain (non-decoupled) model, so unary gRPC/HTTP infer on the ensemble works, that answers
    through each request's response sender (Triton >= 24.06): ``execute`` validates and queues its
    requests and returns at once, and the engine thread sends each response when its sentences
    are done. So one instance serves any number of concurrent requests, they decode in one
    running batch, and nothing waits for an instance to free up (the step before was a front of
    16 instances, a process each, forwarding to a decoupled engine model).
    """

    def initialize(self, args: dict) -> None:
        from ..engine import EnginePool, InflightBatcher
        from ..runtime.spec import SPEC_FILE, ModelSpec

        params, version_dir = _parameters(args)
        folder = _artifacts(params, version_dir)
        self.spec = ModelSpec.load(folder / SPEC_FILE)
        self.max_beam = int(params.get("max_beam", self.spec.max_beam))
        backend = params.get("step_backend", "inprocess")
        workers, threads = cpu_layout(backend, int(params.get("workers", "0")), int(params.get("intra_op_threads", "0")))
        runtime = step_runtime(params, version_dir, folder, self.spec, threads,
                                device_id=int(args.get("model_instance_device_id") or 0))
        max_sentences = int(params.get("max_batch", self.spec.max_batch))
        limits = queue_limits(params)
        self.engine = (EnginePool(runtime, workers, max_sentences=max_sentences, max_beam=self.max_beam, limits=limits)
                       if workers > 1 else
                       InflightBatcher(runtime, max_sentences=max_sentences, max_beam=self.max_beam, limits=limits)).start()
        self._final = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        self._waiting: dict[int, tuple] = {}  # id -> (response sender, cancel event)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._metrics = _EngineMetrics(args.get("model_name", "generate"))
        # Cancellation and metrics are IPC round trips: twice a second, not per step.
        self._poller = threading.Thread(target=self._poll, name="nmtserve-poll", daemon=True)
        self._poller.start()
        flag = drain_handshake.flag_from_environment()
        if flag is not None:
            threading.Thread(target=self._drain_on, args=(flag,), name="nmtserve-drain", daemon=True).start()
        log.info("generate ready (%s, %d decode loop(s) x %s intra-op thread(s)): %s", backend, workers,
                 threads or "default", self.spec)

    def execute(self, requests: list) -> None:
        for request in requests:
            sender = request.get_response_sender()
            try:  # inputs are copied out here: they are freed when execute returns
                sources = parse_sources(_input(request, c.SRC_IDS), _input(request, c.SRC_LEN), self.spec)
                options = _search_options(request, self.spec, self.max_beam)
                prefixes = parse_prefixes(_input(request, c.FORCED_IDS), _input(request, c.FORCED_LEN),
                                          _input(request, c.PROMPT_LEN), len(sources), self.spec)
            except InputError as exc:
                sender.send(pb_utils.InferenceResponse(error=_error(str(exc))), flags=self._final)
                continue
            cancel = threading.Event()
            key = id(cancel)
            with self._lock:
                self._waiting[key] = (sender, cancel)
            try:
                self.engine.submit(sources, options, self._responder(key, sender, options.num_hypotheses),
                                   cancelled=cancel.is_set, prefixes=prefixes)
            except Exception as exc:  # shutting down, or a limit the checks above did not cover
                with self._lock:
                    self._waiting.pop(key, None)
                sender.send(pb_utils.InferenceResponse(error=_engine_error("", exc)), flags=self._final)
        return None

    def _responder(self, key: int, sender, nbest: int):
        def respond(results, error) -> None:  # runs in the engine thread
            with self._lock:
                self._waiting.pop(key, None)
            if error is not None:
                response = pb_utils.InferenceResponse(error=_engine_error("decoding failed: ", error))
            else:
                arrays = results_to_arrays(results, nbest, self.spec.pad_id)
                response = pb_utils.InferenceResponse(
                    output_tensors=[pb_utils.Tensor(name, a) for name, a in arrays.items()])
            try:
                sender.send(response, flags=self._final)
            except Exception:  # the client went away; the engine carries on
                log.exception("could not send a response")
        return respond

    def _poll(self) -> None:
        while not self._stop.wait(0.5):
            try:
                self._metrics.report(self.engine)
            except Exception:  # metrics must never take the model down
                log.exception("could not report metrics")
            # Under the lock: a response is sent only after its entry left ``_waiting`` (also under
            # the lock), and asking a completed sender whether it was cancelled crashes the server.
            with self._lock:
                for sender, cancel in self._waiting.values():
                    if not cancel.is_set() and sender.is_cancelled():
                        cancel.set()

    def _drain_on(self, flag: Path) -> None:
        """When ``flag`` appears (the launcher is stopping the server), stop the engine: what is
        running or queued gets UNAVAILABLE ("shutting down", the client retries it elsewhere or
        later) now, so Triton's wait for in-flight requests ends at once."""
        while not self._stop.wait(0.05):
            if flag.exists():
                log.info("server stopping: answering %d running and %d queued sentences with UNAVAILABLE",
                         self.engine.running, self.engine.queued)
                self.engine.stop()
                drain_handshake.acknowledge(flag)  # the launcher signals Triton now
                return

    def finalize(self) -> None:
        self._stop.set()
        self.engine.stop()


class _EngineMetrics:
    """The batcher's figures on Triton's metrics endpoint (``/metrics``, custom metrics API)."""

    GAUGES = {
        "nmtserve_sentences_running": "Sentences decoding in the in-flight batch",
        "nmtserve_sentences_queued": "Sentences waiting to join the in-flight batch",
        "nmtserve_batch_peak_sentences": "Largest in-flight batch since the previous report (every 0.5 s)",
        "nmtserve_batch_occupancy": "Sentences decoding / the batch's capacity (0..1)",
    }
    COUNTERS = {
        "nmtserve_decode_steps_total": ("steps", "Decoder steps run (one per step of the whole in-flight batch)"),
        "nmtserve_sentences_total": ("sentences", "Sentences decoded"),
        "nmtserve_generated_tokens_total": ("tokens", "Tokens of the best hypotheses returned, EOS included"),
        "nmtserve_requests_total": ("requests", "Requests answered (a request split over decode loops counts per part)"),
        "nmtserve_request_seconds_total": ("request_seconds",
                                           "Queue + decode seconds of the answered requests, summed (average: "
                                           "rate of this / rate of nmtserve_requests_total)"),
    }

    def __init__(self, model: str):
        labels = {"model": model}
        # A family must outlive its metrics: Triton deletes a family's metrics with it.
        self.families = {name: pb_utils.MetricFamily(name=name, description=text, kind=pb_utils.MetricFamily.GAUGE)
                         for name, text in self.GAUGES.items()}
        self.families.update({name: pb_utils.MetricFamily(name=name, description=text, kind=pb_utils.MetricFamily.COUNTER)
                              for name, (_, text) in self.COUNTERS.items()})
        self.gauges = {name: self.families[name].Metric(labels=labels) for name in self.GAUGES}
        self.counters = {name: (key, self.families[name].Metric(labels=labels)) for name, (key, _) in self.COUNTERS.items()}
        self.reported = {key: 0 for key, _ in self.counters.values()}

    def report(self, engine) -> None:
        stats, peak = engine.stats, engine.take_peak()
        self.gauges["nmtserve_sentences_running"].set(engine.running)
        self.gauges["nmtserve_sentences_queued"].set(engine.queued)
        self.gauges["nmtserve_batch_peak_sentences"].set(peak)
        self.gauges["nmtserve_batch_occupancy"].set(engine.running / max(1, engine.capacity))
        for key, metric in self.counters.values():
            value = stats[key]
            if value > self.reported[key]:
                metric.increment(value - self.reported[key])
                self.reported[key] = value


def cpu_layout(backend: str, workers: int = 0, threads: int = 0, cores: int | None = None) -> tuple[int, int | None]:
    """(decode loops, intra-op threads per call) for a step backend; 0 means choose.

    On CPU (``inprocess``) two loops with ``cores // 2`` threads each by default: measured on 2
    cores, ONNX Runtime's intra-op workers only pay when they spin, and spinning workers fight the
    loops' Python threads (DESIGN.md), while two single-threaded loops keep both cores busy. GPU
    backends run one loop (one execution context); ``bls`` calls other models, one loop.
    """
    if backend != "inprocess":
        return 1, threads or None
    cores = cores or len(os.sched_getaffinity(0))
    workers = workers or min(2, cores)
    return workers, threads or max(1, cores // workers)


class OnnxGraphModel:
    """``encoder`` / ``decoder`` on CPU: one ONNX Runtime session behind Triton (the onnxruntime
    backend is not in the nvidia-pytriton wheel). Inputs and outputs are the graph's own."""

    def initialize(self, args: dict) -> None:
        import onnxruntime as ort

        from ..runtime.onnxruntime import session_options

        params, version_dir = _parameters(args)
        path = _artifacts(params, version_dir) / params["graph"]
        self.session = ort.InferenceSession(str(path), session_options(), providers=["CPUExecutionProvider"])
        self.inputs = [i.name for i in self.session.get_inputs()]
        self.outputs = [o.name for o in self.session.get_outputs()]

    def execute(self, requests: list) -> list:
        out = []
        for request in requests:
            feeds = {}
            for name in self.inputs:
                value = _input(request, name)
                if value is None:
                    out.append(pb_utils.InferenceResponse(error=_error(f"missing input {name}")))
                    break
                feeds[name] = value
            else:
                try:
                    results = self.session.run(self.outputs, feeds)
                except Exception as exc:  # ORT names the input; only its InvalidArgument is the caller's fault
                    out.append(pb_utils.InferenceResponse(
                        error=_error(str(exc), invalid=type(exc).__name__ == "InvalidArgument")))
                    continue
                out.append(pb_utils.InferenceResponse(
                    output_tensors=[pb_utils.Tensor(n, r) for n, r in zip(self.outputs, results, strict=True)]
                ))
        return out


class DocumentModel:
    """``translate_document``: DOCUMENT [1] (+ FORMAT, decoding options) -> TRANSLATION [1], SENTENCES [1].

    Cuts the document into sentences (``nmtserve.documents``: plain, Markdown, HTML), sends all
    of them to the ``translate`` ensemble as one request (BLS; more than
    ``max_request_sentences`` go as several, one after another), and puts the translations back
    into the document. Non-decoupled, answering through response senders from a thread pool (as
    ``generate`` does), so documents in flight decode in generate's one running batch and a
    long document does not hold up a short one.
    """

    WORKERS = 8  # documents in flight at once in this model; more wait in the pool's queue

    def initialize(self, args: dict) -> None:
        params, _ = _parameters(args)
        self.translate_model = params.get("translate_model", c.DEFAULT_MODEL)
        self.max_chars = int(params.get("max_document_chars", defaults.MAX_DOCUMENT_CHARS)) or None
        self.chunk = int(params.get("max_request_sentences", defaults.MAX_REQUEST_SENTENCES)) or defaults.MAX_REQUEST_SENTENCES
        # "1": `translate_model` is the pair router, which takes SOURCE_LANG/TARGET_LANG.
        self.routed = params.get("routed", "0") == "1"
        self._final = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        self._pool = ThreadPoolExecutor(self.WORKERS, thread_name_prefix="nmtserve-document")

    def execute(self, requests: list) -> None:
        for request in requests:
            sender = request.get_response_sender()
            try:  # copied out here: the inputs are freed when execute returns
                text, fmt = _document_input(request)
                options = {name: np.array(value) for name in (c.BEAM_SIZE, c.MAX_LENGTH, c.LENGTH_PENALTY,
                                                              c.SOURCE_LANG, c.TARGET_LANG)
                           if (value := _input(request, name)) is not None}
                if not self.routed and (c.SOURCE_LANG in options or c.TARGET_LANG in options):
                    raise InputError(f"this server serves one model without language pairs: leave {c.SOURCE_LANG} "
                                     f"and {c.TARGET_LANG} out")
            except InputError as exc:
                sender.send(pb_utils.InferenceResponse(error=_error(str(exc))), flags=self._final)
                continue
            self._pool.submit(self._translate, text, fmt, options, sender)
        return None

    def _translate(self, text: str, fmt: str, options: dict, sender) -> None:
        from ..documents import DocumentError, segment

        try:
            document = segment(text, fmt, max_chars=self.max_chars) if self.max_chars else segment(text, fmt)
            translations: list[str] = []
            for start in range(0, len(document.sentences), self.chunk):
                translations += self._sentences(document.sentences[start:start + self.chunk], start, options)
            out = document.render(translations).encode("utf-8")
            response = pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor(c.TRANSLATION, np.array([out], dtype=np.object_)),
                pb_utils.Tensor(c.SENTENCES, np.array([len(document.sentences)], dtype=np.int32)),
            ])
        except DocumentError as exc:
            response = pb_utils.InferenceResponse(error=_error(str(exc)))
        except _TranslateFailed as exc:
            response = pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc), exc.code))
        except Exception as exc:
            log.exception("translate_document failed")
            response = pb_utils.InferenceResponse(error=_error(f"document translation failed: {exc}", invalid=False))
        try:
            sender.send(response, flags=self._final)
        except Exception:  # the client went away
            log.exception("could not send a response")

    def _sentences(self, sentences: list[str], start: int, options: dict) -> list[str]:
        """One BLS request to the translate ensemble; its error keeps its status code, with the
        sentence named by its place in the document instead of in the request."""
        inputs = [pb_utils.Tensor(c.TEXT, np.array([s.encode("utf-8") for s in sentences], dtype=np.object_))]
        inputs += [pb_utils.Tensor(name, value) for name, value in options.items()]
        response = pb_utils.InferenceRequest(model_name=self.translate_model, requested_output_names=[c.TRANSLATION],
                                             inputs=inputs).exec()
        if response.has_error():
            error = bls_error(response.error())
            message = c.SENTENCE_IN_MESSAGE.sub(lambda m: f"sentence {start + int(m.group(1)) + 1} of the document",
                             error.message())
            raise _TranslateFailed(message, error.code())
        out = pb_utils.get_output_tensor_by_name(response, c.TRANSLATION).as_numpy()
        return [t.decode("utf-8") for t in out.reshape(-1)]

    def finalize(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


class _TranslateFailed(Exception):
    def __init__(self, message: str, code) -> None:
        super().__init__(message)
        self.code = code


def _document_input(request) -> tuple[str, str]:
    """The request's DOCUMENT as text and its FORMAT (default plain); InputError names a bad one."""
    document = _input(request, c.DOCUMENT)
    if document is None or document.size != 1:
        raise InputError(f"{c.DOCUMENT} must hold exactly one document, got {0 if document is None else document.size}")
    raw = document.reshape(-1)[0]
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else str(raw)
    except UnicodeDecodeError as exc:
        raise InputError(f"{c.DOCUMENT} is not valid UTF-8 (byte {exc.start})") from None
    fmt = _input(request, c.FORMAT)
    name = "plain" if fmt is None or fmt.size == 0 else fmt.reshape(-1)[0]
    name = name.decode("utf-8", "replace") if isinstance(name, bytes) else str(name)
    if name not in c.DOCUMENT_FORMATS:
        raise InputError(f"{c.FORMAT} must be one of {', '.join(c.DOCUMENT_FORMATS)}, got {name!r}")
    return text, name


class PairRouterModel:
    """``translate`` in a repository of several language pairs: TEXT, SOURCE_LANG, TARGET_LANG
    (and the decoding options) -> the outputs of the pair's own ensemble (``translate_en_fr``).

    Each pair keeps its own tokenize/generate/detokenize, so requests for different pairs decode
    concurrently, each pair in its own in-flight batch. The request is forwarded by BLS from a
    thread pool and answered through its response sender (as ``generate`` does). Without
    SOURCE_LANG/TARGET_LANG a request goes to the only pair that fits what it gives; an unknown
    or ambiguous pair is INVALID_ARG listing the pairs served.
    """

    WORKERS = 64  # requests forwarded at once; more wait in the pool's queue

    def initialize(self, args: dict) -> None:
        params, _ = _parameters(args)
        self.name = json.loads(args["model_config"])["name"]
        self.pairs = tuple(p for p in params.get(c.PAIRS_PARAMETER, "").split(",") if p)
        if not self.pairs:
            raise ValueError(f"model {self.name}: no language pairs in its '{c.PAIRS_PARAMETER}' parameter")
        self._final = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        self._pool = ThreadPoolExecutor(self.WORKERS, thread_name_prefix="nmtserve-router")
        log.info("%s routes %s", self.name, ", ".join(self.pairs))

    def execute(self, requests: list) -> None:
        for request in requests:
            sender = request.get_response_sender()
            try:
                pair = choose_pair(self.pairs, _language(request, c.SOURCE_LANG), _language(request, c.TARGET_LANG))
                inputs = [pb_utils.Tensor(t.name, np.array(value)) for t in c.TRANSLATE_INPUTS
                          if (value := _input(request, t.name)) is not None]
                outputs = list(request.requested_output_names())
            except InputError as exc:
                sender.send(pb_utils.InferenceResponse(error=_error(str(exc))), flags=self._final)
                continue
            self._pool.submit(self._forward, self.name + c.pair_suffix(pair), inputs, outputs, sender)
        return None

    def _forward(self, model: str, inputs: list, outputs: list[str], sender) -> None:
        try:
            answer = pb_utils.InferenceRequest(model_name=model, requested_output_names=outputs, inputs=inputs).exec()
            if answer.has_error():
                response = pb_utils.InferenceResponse(error=bls_error(answer.error()))
            else:
                response = pb_utils.InferenceResponse(output_tensors=answer.output_tensors())
        except Exception as exc:
            log.exception("routing to %s failed", model)
            response = pb_utils.InferenceResponse(error=_error(f"routing to {model} failed: {exc}", invalid=False))
        try:
            sender.send(response, flags=self._final)
        except Exception:
            log.exception("could not send a response")

    def finalize(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def _language(request, name: str) -> str | None:
    value = _input(request, name)
    if value is None or value.size == 0:
        return None
    if value.size != 1:
        raise InputError(f"{name} must hold one language code, got {value.size}")
    raw = value.reshape(-1)[0]
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    return text.strip() or None


def choose_pair(pairs: tuple[str, ...], source: str | None, target: str | None) -> str:
    """The one pair of ``pairs`` that fits the request's languages (either may be left out)."""
    fits = [p for p in pairs if (source is None or p.split("-")[0] == source)
            and (target is None or p.split("-")[1] == target)]
    if len(fits) == 1:
        return fits[0]
    served = ", ".join(pairs)
    asked = f"{source or '?'}-{target or '?'}"
    if not fits:
        raise InputError(f"no model for the language pair {asked}: this server translates {served}")
    raise InputError(f"the language pair {asked} is ambiguous: give {c.SOURCE_LANG} and {c.TARGET_LANG} "
                     f"(this server translates {served})")


# What the models' own errors say, by the contract's rules: a bad sentence is named TEXT[i], a bad
# option by its input's name; an overloaded or stopping engine says so (engine.py).
_INVALID_MESSAGE = re.compile(rf"{c.SENTENCE_IN_MESSAGE.pattern}|\b({'|'.join(c.OPTION_INPUTS)})\b")
_UNAVAILABLE_MESSAGE = re.compile(r"server busy|shutting down|is not at ready state|has no available versions")


def bls_error(error):
    """A BLS response's error with the status the client should see.

    The Python backend hands a BLS caller the message of the callee's error but (Triton 24.x)
    not always its code, which arrives as INTERNAL; a client would then treat a bad sentence
    as a server failure and not retry an overloaded server. The code is recovered from the
    message where the contract makes that certain."""
    errors = pb_utils.TritonError
    code = error.code() if hasattr(error, "code") else errors.INTERNAL
    message = error.message()
    if code == errors.INTERNAL:
        if _INVALID_MESSAGE.search(message):
            code = errors.INVALID_ARG
        elif _UNAVAILABLE_MESSAGE.search(message):
            code = getattr(errors, "UNAVAILABLE", errors.INTERNAL)
    return errors(message, code)
