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

import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from .. import contract as c
from ..confidence import format_confidences
from ..decoding.search import SearchOptions
from . import drain as drain_handshake
from . import stub
from .protocol import (
    InputError,
    alignments,
    check_constraints,
    decode_strings,
    decode_texts,
    join_pieces,
    parse_constraints,
    parse_languages,
    parse_prefixes,
    parse_search_options,
    parse_sources,
    parse_split,
    parse_terms,
    qualities,
    results_to_arrays,
    tokenize_request,
)
from .step_runtimes import step_runtime

log = logging.getLogger("nmtserve.server")
pb_utils = stub.pb_utils  # None outside a Triton Python-backend stub

def _search_options(get: Callable[[str], np.ndarray | None], spec, max_beam: int, known: dict) -> SearchOptions:
    """The request's optional decoding inputs (``get(name)`` -> array or None), validated
    (InputError names a bad one). ``known``: options already parsed, by the inputs that gave them
    (SearchOptions is frozen: requests share them). Most requests send the same few (or none),
    and building and checking the options took ~60 us of a lone request's ~0.3 ms of execute,
    its code cold after the decoder's steps (bench/RESULTS.md "Session 33")."""
    inputs = {name: get(name) for name in c.OPTION_INPUTS}
    if any(a is not None and a.dtype.kind == "O" for a in inputs.values()):  # no bytes to key on
        return parse_search_options(inputs, spec, max_beam)
    key = tuple((name, a.dtype.str, a.shape, a.tobytes()) for name, a in inputs.items() if a is not None)
    options = known.get(key)
    if options is None:
        options = parse_search_options(inputs, spec, max_beam)  # an InputError is not kept
        if len(known) >= _KNOWN_OPTIONS:
            known.clear()
        known[key] = options
    return options


_KNOWN_OPTIONS = 256  # distinct option sets a generate keeps (all dropped when full)


def queue_limits(params: dict):
    """generate's ``max_queued_sentences`` / ``queue_timeout_s`` parameters (0: no limit)."""
    from ..engine import QueueLimits

    default = QueueLimits()
    queued = int(params.get("max_queued_sentences", default.max_queued or 0))
    timeout = float(params.get("queue_timeout_s", default.timeout_s or 0))
    return QueueLimits(max_queued=queued or None, timeout_s=timeout or None)


class Tokenizer:
    """What ``tokenize`` does to a request, on any source of inputs (``get(name)`` -> array or
    None): ``tokenize`` the model, and ``generate`` when it takes TEXT itself (in-process text)."""

    def __init__(self, params: dict, folder: Path) -> None:
        from ..languages import describe
        from ..model.tokenizer import load_tokenizer
        from ..runtime.spec import SPEC_FILE, ModelSpec
        from .protocol import RequestLimits

        self.spec = ModelSpec.load(folder / SPEC_FILE)
        self.tokenizer = load_tokenizer(folder, self.spec)
        self.codes = list(getattr(self.tokenizer, "languages", None) or ())  # a multilingual model's
        # The segmenter's rules follow the source language (ISO 639-1 where there is one).
        self.iso = {lang.code: lang.iso for lang in describe(self.codes)} if self.codes else {}
        self.limits = RequestLimits.from_params(params)

    def arrays(self, get) -> dict[str, np.ndarray]:
        """tokenize's outputs by name; raises InputError naming what is wrong."""
        texts = decode_texts(get(c.TEXT))
        self.limits.check(texts)
        prefixes = decode_strings(c.TARGET_PREFIX, get(c.TARGET_PREFIX), len(texts), per_sentence=True)
        split = parse_split(get(c.SPLIT_SENTENCES))
        terms = parse_terms(get(c.TERMS), len(texts))
        languages, segment_language = None, "en"
        if self.codes:
            languages = parse_languages(get(c.SOURCE_LANG), get(c.TARGET_LANG), len(texts), self.codes)
            segment_language = self.iso.get(languages.source, "en")
        arrays = tokenize_request(self.tokenizer, texts, self.spec, prefixes=prefixes, languages=languages,
                                  split=split, segment_language=segment_language, terms=terms)
        if arrays[c.CUTS].any():
            log.warning("cut %s to fit the model's limit of %d tokens", ", ".join(
                f"{c.sentence(i)} {n} time(s)" for i, n in enumerate(arrays[c.CUTS].tolist()) if n), self.spec.max_source_len)
        return arrays


class TokenizeModel:
    """TEXT [n] (UTF-8 bytes) -> SRC_IDS [m, S] int32 (padded), SRC_LEN [m] int32, the forced
    tokens, the terms (TERMS -> TERM_IDS [m, L]), and the layout (PIECES [n], GAPS, CUTS [n]) of the m sentences the n elements hold
    (``protocol.tokenize_request``: several sentences in an element are translated one by one
    unless SPLIT_SENTENCES is false; a sentence over the export's max_source_len is cut).

    Refuses (INVALID_ARG) a request of more than ``max_request_sentences`` elements and an
    element of more than ``max_sentence_chars`` characters before tokenizing anything
    (parameters; defaults in protocol.RequestLimits), and a single word over max_source_len."""

    def initialize(self, args: dict) -> None:
        params, version_dir = stub.parameters(args)
        self.tokenize = Tokenizer(params, stub.artifacts(params, version_dir))

    def execute(self, requests: list) -> list:
        return [self._one(r) for r in requests]

    def _one(self, request):
        try:
            arrays = self.tokenize.arrays(stub.input_arrays(request).get)
        except InputError as exc:
            return pb_utils.InferenceResponse(error=stub.error(str(exc)))
        return pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(n, a) for n, a in arrays.items()])


class Detokenizer:
    """What ``detokenize`` does to a request, on any source of inputs (``get(name)`` -> array or
    None): ``detokenize`` the model, and ``generate`` when it hands back text itself."""

    def __init__(self, params: dict, folder: Path, tokenizer=None) -> None:
        """``tokenizer``: one already loaded from ``folder`` (generate's ``Tokenizer``'s: it keeps
        no state between calls, so one serves both threads)."""
        from ..model.tokenizer import load_tokenizer
        from ..runtime.spec import SPEC_FILE, ModelSpec

        spec = ModelSpec.load(folder / SPEC_FILE)
        self.tokenizer = tokenizer if tokenizer is not None else load_tokenizer(folder, spec)
        self.length_ratio, self.score_floor = spec.length_ratio, spec.score_floor
        # A one-model ensemble's languages (its pair parameter; "unknown" where the checkpoint
        # does not name them): the number words WARNING looks for.
        pair = params.get(c.PAIR_PARAMETER, "").split("-")
        self.pair = tuple(None if p in ("", c.UNKNOWN_LANGUAGE) else p for p in pair) if len(pair) == 2 else (None, None)

    def arrays(self, get, wanted: frozenset[str] | None = None) -> dict[str, np.ndarray]:
        """detokenize's outputs by name, those of ``wanted`` alone when given (stub.wanted_outputs:
        what is not read is not computed); raises InputError naming what is wrong."""
        ids, lengths, scores = get(c.OUT_IDS), get(c.OUT_LEN), get(c.OUT_SCORE)
        if (ids is None or lengths is None or scores is None or ids.ndim != 3 or lengths.ndim != 2
                or ids.shape[:2] != lengths.shape or scores.shape != lengths.shape
                or (lengths.size and not 0 <= lengths.min() <= lengths.max() <= ids.shape[2])):
            raise InputError("OUT_IDS [n, k, T], OUT_LEN [n, k] (0..T) and OUT_SCORE [n, k] are required")
        want = (lambda name: True) if wanted is None else wanted.__contains__
        m, k = lengths.shape
        align, logprobs = get(c.OUT_ALIGN), get(c.OUT_LOGPROB)
        if k > 1 and not (want(c.NBEST_TRANSLATION) or want(c.NBEST_SCORE)):
            k = 1  # the best hypothesis alone: the other outputs read no other
            ids, lengths, scores = ids[:, :1], lengths[:, :1], scores[:, :1]
            align, logprobs = (a[:, :1] if a is not None and a.ndim == 3 else a for a in (align, logprobs))
        texts = np.empty((m, k), dtype=np.object_)
        for i in range(m):
            for j in range(k):
                texts[i, j] = self.tokenizer.decode(ids[i, j, : int(lengths[i, j])].tolist()).encode("utf-8")
        counts = get(c.PIECES)
        best = scores[:, 0].astype(np.float32) if k else np.zeros(m, dtype=np.float32)
        lowest = _lowest_per_element(best, counts)
        gaps = get(c.GAPS)
        texts, scores = join_pieces(texts, scores, counts, gaps)
        n = texts.shape[0]
        out: dict[str, np.ndarray] = {}
        src, src_len = get(c.SRC_IDS), get(c.SRC_LEN)
        checks = want(c.WARNING) or want(c.MISSING_WORDS)
        if checks or want(c.SENTENCE_CONFIDENCE) or want(c.WORD_CONFIDENCE):
            quality = qualities(self.tokenizer, src, src_len, ids, lengths, align, logprobs, counts, gaps)
            if checks:
                out[c.WARNING], out[c.MISSING_WORDS] = self._warnings(get, texts[:, 0], lowest, quality, want(c.WARNING))
            out[c.SENTENCE_CONFIDENCE] = np.array([q.sentence for q in quality], dtype=np.float32)
            out[c.WORD_CONFIDENCE] = np.array(
                [b"" if q.words is None else format_confidences(q.words).encode() for q in quality], dtype=np.object_)
        if want(c.CUTS):
            cuts = get(c.CUTS)
            out[c.CUTS] = (cuts if cuts is not None and cuts.shape == (n,) else np.zeros(n)).astype(np.int32)
        if want(c.ALIGNMENT):
            out[c.ALIGNMENT] = alignments(self.tokenizer, src, src_len, ids, lengths, align, counts, gaps)
        out.update({
            c.TRANSLATION: texts[:, 0].copy(),
            c.SCORE: scores[:, 0].copy(),
            c.NBEST_TRANSLATION: texts,
            c.NBEST_SCORE: scores,
        })
        return out if wanted is None else {name: out[name] for name in out if name in wanted}

    def _warnings(self, get, translations: np.ndarray, lowest: np.ndarray,
                  quality: list, warn: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """WARNING [n] and MISSING_WORDS [n]: per element, "" or why its translation may leave part
        of TEXT out or be wrong (nmtserve.coverage; ``lowest``: the lowest score of its sentences;
        a term of TERMS none of whose renderings is in it; ``quality``: protocol.qualities, whose
        covered source words give the content words no target token attended to, listed in
        MISSING_WORDS); all "" when the request's TEXT did not come along (WARNING's too without ``warn``)."""
        from ..coverage import omitted_words, warning
        from ..languages import describe

        n = translations.shape[0]
        out = np.full(n, b"", dtype=np.object_)
        missing = np.full(n, b"", dtype=np.object_)
        try:  # tokenize refused what these readers refuse: a request that got here reads
            sources = decode_texts(get(c.TEXT))
            given = [decode_strings(c.SOURCE_LANG, get(c.SOURCE_LANG), n, per_sentence=False),
                     decode_strings(c.TARGET_LANG, get(c.TARGET_LANG), n, per_sentence=True)]
        except InputError:  # no TEXT: a caller of detokenize with its own ids
            return out, missing
        if len(sources) != n:
            return out, missing
        try:  # tokenize refused bad terms; a caller of detokenize with its own gets no term check
            terms = parse_terms(get(c.TERMS), n)
        except InputError:
            terms = None
        codes = list(dict.fromkeys(code for side in given if side for code in side))
        iso = {code: lang.iso for code, lang in zip(codes, describe(codes), strict=True)}
        source_langs, target_langs = ([iso[code] for code in side] if side else [default] * n
                                      for side, default in zip(given, self.pair, strict=True))
        for i, (source, translation) in enumerate(zip(sources, translations.tolist(), strict=True)):
            covered = quality[i].covered
            text = translation.decode("utf-8")
            omitted = [] if covered is None else omitted_words(source, covered, source_langs[i], text, target_langs[i])
            missing[i] = " ".join(map(str, omitted)).encode()
            if not warn:
                continue
            # WARNING says "may be incomplete" when the translation has fewer content words than
            # the source (no alignment needed). It does not name the words the alignment points
            # to: on the demo that name is right for 32 of 126 sentences (one word off, most
            # often), so they stay a hint in MISSING_WORDS (docs/measurements.md#omissions).
            out[i] = warning(source, text, source_langs[i], target_langs[i], self.length_ratio,
                             float(lowest[i]), self.score_floor, terms[i] if terms else (),
                             word_confidence=quality[i].words or ()).encode("utf-8")
        return out, missing


class DetokenizeModel:
    """OUT_IDS [m, k, T], OUT_LEN [m, k], OUT_SCORE [m, k] (+ tokenize's PIECES, GAPS, CUTS) ->
    TRANSLATION, SCORE, NBEST_* [n], CUTS [n]: the m sentences' translations put back into the n
    TEXT elements they came from (protocol.join_pieces)."""

    def initialize(self, args: dict) -> None:
        params, version_dir = stub.parameters(args)
        self.detokenize = Detokenizer(params, stub.artifacts(params, version_dir))
        self.outputs = [t.name for t in c.DETOKENIZE_OUTPUTS]

    def execute(self, requests: list) -> list:
        out = []
        for request in requests:
            try:
                arrays = self.detokenize.arrays(stub.input_arrays(request).get,
                                                stub.wanted_outputs(request, self.outputs))
            except InputError as exc:
                out.append(pb_utils.InferenceResponse(error=stub.error(str(exc))))
                continue
            out.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(n, a) for n, a in arrays.items()]))
        return out


def _lowest_per_element(scores: np.ndarray, counts: np.ndarray | None) -> np.ndarray:
    """Per TEXT element, the lowest of its sentences' scores (``counts`` of PIECES; None: one row each)."""
    if counts is None or counts.ndim != 1:
        return scores
    sizes = counts.tolist()  # a request's few elements: plain Python beats numpy's per-call cost
    if sum(sizes) != scores.shape[0] or min(sizes, default=1) < 1 or len(sizes) == scores.shape[0]:
        return scores  # not a layout of these rows, or one sentence an element
    values, lowest, start = scores.tolist(), [], 0
    for n in sizes:
        lowest.append(min(values[start:start + n]))
        start += n
    return np.array(lowest, dtype=np.float32)


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

        stub.return_large_blocks()  # before the loops' threads allocate (their arenas)
        params, version_dir = stub.parameters(args)
        folder = stub.artifacts(params, version_dir)
        self.spec = ModelSpec.load(folder / SPEC_FILE)
        self.max_beam = int(params.get("max_beam", self.spec.max_beam))
        backend = params.get("step_backend", "inprocess")
        workers, threads = cpu_layout(backend, int(params.get("workers", "0")), int(params.get("intra_op_threads", "0")))
        runtime = step_runtime(params, version_dir, folder, self.spec, threads,
                                device_id=int(args.get("model_instance_device_id") or 0))
        max_sentences = running_batch(backend, int(params.get("running_batch", "0")),
                                      int(params.get("max_batch", self.spec.max_batch)))
        limits = queue_limits(params)
        self.engine = (EnginePool(runtime, workers, max_sentences=max_sentences, max_beam=self.max_beam, limits=limits)
                       if workers > 1 else
                       InflightBatcher(runtime, max_sentences=max_sentences, max_beam=self.max_beam, limits=limits)).start()
        # In-process text (the repository's ``text_in_generate``): the ensemble's one step hands
        # TEXT here, tokenized and detokenized in this process (no tokenize/detokenize hops);
        # detokenizing runs on its own thread so the decode loop never waits for it (a lone
        # request's runs in the loop's thread: nothing else is there to wait).
        self.tokenize = self.detokenize = self._texts = None
        if params.get(c.TEXT_IN_GENERATE_PARAMETER, "") == "1":
            from concurrent.futures import ThreadPoolExecutor

            self.tokenize = Tokenizer(params, folder)
            self.detokenize = Detokenizer(params, folder, tokenizer=self.tokenize.tokenizer)
            self._texts = ThreadPoolExecutor(1, thread_name_prefix="nmtserve-detokenize")
        # What a request may read (stub.wanted_outputs): with TEXT in process, detokenize's outputs.
        self._id_outputs = [t.name for t in c.GENERATE_OUTPUTS]
        self._text_outputs = [t.name for t in c.TRANSLATE_OUTPUTS]
        self._waiting: dict[int, tuple] = {}  # id -> (response sender, cancel event, deadline or None)
        self._options: dict[tuple, SearchOptions] = {}  # _search_options' known ones
        self._lock = threading.Lock()
        self._stop = threading.Event()
        compiled_step = getattr(runtime, "native_step", None) is not None
        self._metrics = _EngineMetrics(args.get("model_name", "generate"), compiled_step)
        # Cancellation and metrics are IPC round trips: twice a second, not per step.
        self._poller = threading.Thread(target=self._poll, name="nmtserve-poll", daemon=True)
        self._poller.start()
        flag = drain_handshake.flag_from_environment()
        if flag is not None:
            threading.Thread(target=self._drain_on, args=(flag,), name="nmtserve-drain", daemon=True).start()
        from ..decoding import native

        search = "compiled (nmtserve_native)" if native.available() else "Python (nmtserve_native not installed)"
        step = f"compiled (nmtserve_native, {runtime.native_step.kernels})" if compiled_step else backend
        log.info("generate ready (%s, %d decode loop(s) x %s intra-op thread(s), decoder step %s, search step %s, "
                 "text %s): %s", backend, workers, threads or "default", step, search,
                 "in process" if self.tokenize is not None else "from tokenize", self.spec)

    def execute(self, requests: list) -> None:
        for request in requests:
            sender = request.get_response_sender()
            texts = None  # in-process text: what detokenizing needs besides the results
            try:  # inputs are copied out here: they are freed when execute returns
                inputs = stub.input_arrays(request)
                get: Callable[[str], np.ndarray | None] = inputs.get
                tokenize = self.tokenize if get(c.TEXT) is not None else None
                # The outputs parameter names the translate contract's outputs: a middle step's
                # (tokenize -> generate -> detokenize) are all read by the next step.
                wanted = (stub.wanted_outputs(request, self._text_outputs) if tokenize is not None
                          else stub.wanted_outputs(request, self._id_outputs, narrow=False))
                if tokenize is not None:
                    texts = {name: np.array(a, copy=True) for name in c.TEXT_INPUT_NAMES if (a := get(name)) is not None}
                    texts.update(tokenize.arrays(texts.get))
                    get = texts.get
                sources = parse_sources(get(c.SRC_IDS), get(c.SRC_LEN), self.spec)
                options = _search_options(inputs.get, self.spec, self.max_beam, self._options)
                prefixes = parse_prefixes(get(c.FORCED_IDS), get(c.FORCED_LEN), get(c.PROMPT_LEN), len(sources), self.spec)
                constraints = parse_constraints(get(c.TERM_IDS), len(sources), self.spec)
                check_constraints(constraints, prefixes, options)
            except InputError as exc:
                stub.send_final(sender, pb_utils.InferenceResponse(error=stub.error(str(exc))))
                continue
            cancel = threading.Event()
            key = id(cancel)
            # The request's timeout (Triton's, microseconds; the nmtserve client sends its own):
            # past it the client has given up, and an ensemble does not pass its cancellation on.
            timeout_us = request.timeout()
            deadline = time.monotonic() + timeout_us / 1e6 if timeout_us else None
            with self._lock:
                self._waiting[key] = (sender, cancel, deadline)
            try:
                self.engine.submit(sources, options, self._responder(key, sender, options.num_hypotheses, texts, wanted),
                                   cancelled=cancel.is_set, prefixes=prefixes, constraints=constraints)
            except Exception as exc:  # shutting down, or a limit the checks above did not cover
                with self._lock:
                    self._waiting.pop(key, None)
                stub.send_final(sender, pb_utils.InferenceResponse(error=stub.engine_error("", exc)))
        return None

    def _responder(self, key: int, sender, nbest: int, texts: dict | None = None, wanted: frozenset[str] | None = None):
        def respond(results, error) -> None:  # runs in the engine thread
            with self._lock:
                self._waiting.pop(key, None)
            if error is not None:
                response = pb_utils.InferenceResponse(error=stub.engine_error("decoding failed: ", error))
            else:
                arrays = results_to_arrays(results, nbest, self.spec.pad_id)
                if texts is not None:  # detokenized and answered on the text thread (the loop decodes on)
                    assert self._texts is not None
                    if self.engine.running <= 1 and not self.engine.queued:
                        # ... unless nothing else decodes or waits (a lone request): here, without
                        # the thread's hand-over (p50 ~2% sooner, bench/RESULTS.md "Session 24").
                        self._detokenized(sender, {**texts, **arrays}, wanted)
                    else:
                        self._texts.submit(self._detokenized, sender, {**texts, **arrays}, wanted)
                    return
                response = pb_utils.InferenceResponse(output_tensors=[
                    pb_utils.Tensor(name, a) for name, a in arrays.items() if wanted is None or name in wanted])
            stub.send_final(sender, response)  # a client that went away is logged; the engine carries on
        return respond

    def _detokenized(self, sender, arrays: dict, wanted: frozenset[str] | None = None) -> None:
        """In-process text: the translations of a decoded request, as detokenize would answer."""
        assert self.detokenize is not None
        try:
            out = self.detokenize.arrays(arrays.get, wanted)
            response = pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(n, a) for n, a in out.items()])
        except InputError as exc:
            response = pb_utils.InferenceResponse(error=stub.error(str(exc)))
        except Exception as exc:  # noqa: BLE001 - one request's failure, never the thread's
            log.exception("detokenizing failed")
            response = pb_utils.InferenceResponse(error=stub.engine_error("detokenizing failed: ", exc))
        stub.send_final(sender, response)

    def _poll(self) -> None:
        while not self._stop.wait(0.5):
            try:
                self._metrics.report(self.engine)
            except Exception:  # metrics must never take the model down
                log.exception("could not report metrics")
            # Under the lock: a response is sent only after its entry left ``_waiting`` (also under
            # the lock), and asking a completed sender whether it was cancelled crashes the server.
            # A request past its timeout is dropped as a cancelled one: Triton does not tell
            # an ensemble's step that its client went away (bench/RESULTS.md "Session 31": a
            # 1,000-sentence request decoded to the end after its client gave up at 0.3 s).
            now = time.monotonic()
            with self._lock:
                for sender, cancel, deadline in self._waiting.values():
                    if not cancel.is_set() and ((deadline is not None and now > deadline) or sender.is_cancelled()):
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
        if self._texts is not None:
            self._texts.shutdown(wait=True)


class _EngineMetrics:
    """The batcher's figures on Triton's metrics endpoint (``/metrics``, custom metrics API)."""

    GAUGES = {
        "nmtserve_sentences_running": "Sentences decoding in the in-flight batch",
        "nmtserve_sentences_queued": "Sentences waiting to join the in-flight batch",
        "nmtserve_batch_peak_sentences": "Largest in-flight batch since the previous report (every 0.5 s)",
        "nmtserve_batch_occupancy": "Sentences decoding / the batch's capacity (0..1)",
        "nmtserve_compiled_search_step": "1: the beam search's step runs compiled (nmtserve_native); 0: in Python",
        "nmtserve_compiled_decoder_step": "1: the decoder's step runs compiled (nmtserve_native.DecoderStep); "
                                          "0: on the step backend's graph runtime",
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

    def __init__(self, model: str, compiled_step: bool = False):
        labels = {"model": model}
        # A family must outlive its metrics: Triton deletes a family's metrics with it.
        self.families = {name: pb_utils.MetricFamily(name=name, description=text, kind=pb_utils.MetricFamily.GAUGE)
                         for name, text in self.GAUGES.items()}
        self.families.update({name: pb_utils.MetricFamily(name=name, description=text, kind=pb_utils.MetricFamily.COUNTER)
                              for name, (_, text) in self.COUNTERS.items()})
        self.gauges = {name: self.families[name].Metric(labels=labels) for name in self.GAUGES}
        self.counters = {name: (key, self.families[name].Metric(labels=labels)) for name, (key, _) in self.COUNTERS.items()}
        self.reported = {key: 0 for key, _ in self.counters.values()}
        from ..decoding import native

        self.gauges["nmtserve_compiled_search_step"].set(1.0 if native.available() else 0.0)
        self.gauges["nmtserve_compiled_decoder_step"].set(1.0 if compiled_step else 0.0)

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
    loops' Python threads (bench/RESULTS.md, sessions 2-3), while two single-threaded loops keep
    both cores busy. GPU backends run one loop (one execution context); ``bls`` calls other models, one loop.
    """
    if backend != "inprocess":
        return 1, threads or None
    cores = cores or len(os.sched_getaffinity(0))
    workers = workers or min(2, cores)
    return workers, threads or max(1, cores // workers)


# Running sentences per core on CPU (``running_batch``): where bulk throughput stops growing.
# Measured on 2 cores (AMD EPYC AVX-512, demo model, bench/fairness.py, alternating runs): 64
# running sentences gave 345 sentences/s and one-sentence p99 4.8-5.1x idle under a bulk job,
# 32 gave 330 and 3.0-3.2x, 24 gave 325 and 2.5-2.8x. Past the knee a full batch only makes
# every step, so every other request, slower.
CPU_RUNNING_PER_CORE = 12


def running_batch(backend: str, asked: int, max_batch: int, cores: int | None = None) -> int:
    """Sentences decoding together at once: ``asked`` when set (0: choose), never more than the
    export's ``max_batch``. On CPU (``inprocess``) the default is ``CPU_RUNNING_PER_CORE`` per
    core; GPU backends fill the whole ``max_batch`` (their profile), where a step's cost barely
    grows with the batch."""
    if asked > 0:
        return min(asked, max_batch)
    if backend != "inprocess":
        return max_batch
    cores = cores or len(os.sched_getaffinity(0))
    return max(1, min(max_batch, CPU_RUNNING_PER_CORE * cores))


class OnnxGraphModel:
    """``encoder`` / ``decoder`` on CPU: one ONNX Runtime session behind Triton (the onnxruntime
    backend is not in the nvidia-pytriton wheel). Inputs and outputs are the graph's own."""

    def initialize(self, args: dict) -> None:
        import onnxruntime as ort

        from ..runtime.onnxruntime import check_int8, release_mapped_weights, session_options
        from ..runtime.spec import SPEC_FILE, ModelSpec

        params, version_dir = stub.parameters(args)
        folder = stub.artifacts(params, version_dir)
        path = folder / params["graph"]
        check_int8(ModelSpec.load(folder / SPEC_FILE).precision)
        self.session = ort.InferenceSession(str(path), session_options(), providers=["CPUExecutionProvider"])
        release_mapped_weights([path])
        self.inputs = [i.name for i in self.session.get_inputs()]
        self.outputs = [o.name for o in self.session.get_outputs()]

    def execute(self, requests: list) -> list:
        out = []
        for request in requests:
            feeds = {}
            for name in self.inputs:
                value = stub.input_array(request, name)
                if value is None:
                    out.append(pb_utils.InferenceResponse(error=stub.error(f"missing input {name}")))
                    break
                feeds[name] = value
            else:
                try:
                    results = self.session.run(self.outputs, feeds)
                except Exception as exc:  # ORT names the input; only its InvalidArgument is the caller's fault
                    out.append(pb_utils.InferenceResponse(
                        error=stub.error(str(exc), invalid=type(exc).__name__ == "InvalidArgument")))
                    continue
                out.append(pb_utils.InferenceResponse(
                    output_tensors=[pb_utils.Tensor(n, r) for n, r in zip(self.outputs, results, strict=True)]
                ))
        return out
