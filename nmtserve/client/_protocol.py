"""The server contract as code: decoding options, request tensors, response decoding.

Shared by both protocols and both shells; tritonclient's grpc and http modules have the same
``InferInput`` / ``InferRequestedOutput`` / ``InferResult.as_numpy`` surface, so the module is
a parameter here, not a reason for a second copy.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Protocol, TypedDict

import numpy as np

from ..alignment import parse_pharaoh
from ..alternatives import plausible
from ..glossary import TermFinder, glossary_terms
from . import _constants as C
from .errors import InvalidInputError, ServerError, TranslationError

# ---- what a translation call returns


@dataclass(frozen=True, slots=True)
class Hypothesis:
    """One entry of an n-best list."""

    text: str
    score: float


@dataclass(frozen=True, slots=True)
class Translation:
    """The translation of one input sentence.

    ``score`` is the model's score of ``text`` (length-normalised log-probability; higher is
    better); 0.0 for a blank input line, which is never sent to the server (its empty
    translation is certain). ``hypotheses`` is the n-best list, best first, when more than one
    hypothesis was asked for (an empty list for a blank line), else None: the plausible ones
    only (``nmtserve.alternatives``: within a margin of the best's score, a different text, the
    same numbers), so it may hold fewer than ``num_hypotheses``, down to the best alone; with
    ``all_hypotheses=True`` every hypothesis the server returned. ``str(translation)`` is its text.

    ``error`` is set only with ``on_error="return"``: the sentence was rejected (``text`` is
    empty, ``score`` None) and ``error`` says why (an InvalidInputError whose ``index`` is the
    sentence's input position); every other sentence was translated.

    ``warning`` is "" unless the server's check suggests the translation leaves part of the
    input out (a number of the input missing, or far shorter than the model usually writes) or
    is wrong (a score far under the model's usual): then it says why ("may be incomplete: digits
    of the source are missing (3)", "may be wrong: the model is unsure of it ..."). A server
    exported before the check always gives "".

    ``alignment`` (with ``alignment=True``) is the translation's word alignment to its input:
    (source word, target word) pairs, each counted from 0 in the whitespace-separated words of
    the input and of ``text`` (every target word once, aligned to the source word the decoder
    attended to most; the contract's ``ALIGNMENT``). None when not asked for.

    With ``confidence=True``: ``confidence`` is the model's own confidence in the translation,
    its tokens' geometric mean probability (0..1; under ``nmtserve.confidence.LOW_CONFIDENCE``,
    0.3, a translation is likely wrong), and ``word_confidence`` one probability per
    whitespace-separated word of ``text``, its least likely piece's (``low_confidence_words``
    lists the words under 0.3). With ``alignment=True`` too, ``missing_words`` are the positions
    of the input's content words no word of the translation attended to (words it may have left
    out; a hint, not a verdict: docs/measurements.md#omissions). None when not asked for.
    """

    text: str
    score: float | None
    hypotheses: list[Hypothesis] | None = None
    error: TranslationError | None = None
    warning: str = ""
    alignment: list[tuple[int, int]] | None = None
    confidence: float | None = None
    word_confidence: list[float] | None = None
    missing_words: list[int] | None = None

    @property
    def low_confidence_words(self) -> list[int]:
        """The positions of the words of ``text`` under ``LOW_CONFIDENCE`` ([] when not asked for)."""
        from ..confidence import LOW_CONFIDENCE

        return [i for i, c in enumerate(self.word_confidence or ()) if c < LOW_CONFIDENCE]

    @property
    def ok(self) -> bool:
        return self.error is None

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True, slots=True)
class Options:
    """Decoding options of one translate() call; None means "the server's default"."""

    beam_size: int | None = None
    max_length: int | None = None
    length_penalty: float | None = None
    num_hypotheses: int = 1
    # Language codes, for a server of several language pairs or a multilingual model (None: the
    # server's only pair). ``target_lang`` may be one code per input sentence (a list).
    source_lang: str | None = None
    target_lang: str | Sequence[str] | None = None
    # Text each translation must start with (one for all, or one per input sentence; "" = none).
    target_prefix: str | Sequence[str] | None = None
    # False: each input is one sentence, translated whole (the server otherwise translates an
    # input of several sentences sentence by sentence and joins them with their own spacing).
    split_sentences: bool = True
    # True: a sentence's search stops once beam_size hypotheses have finished (fewer steps; a few
    # translations differ from the default rule's). None: the server's default (the full rule).
    early_stopping: bool | None = None
    # With num_hypotheses > 1: False keeps only the plausible hypotheses (nmtserve.alternatives:
    # fewer, or the best alone, rather than junk); True every one the server returned.
    all_hypotheses: bool = False
    # True: each translation's word alignment (Translation.alignment; the server's ALIGN).
    alignment: bool = False
    # True: the model's confidence per translation and per word (Translation.confidence,
    # .word_confidence; the server's CONFIDENCE).
    confidence: bool = False
    # Repetition controls (docs/contract.md#repetition-controls), None / False / (): the server's
    # default (off): transformers' no_repeat_ngram_size and repetition_penalty; CTranslate2's
    # min_decoding_length (``min_length``), disable_unk and suppress_sequences (target token ids).
    no_repeat_ngram_size: int | None = None
    repetition_penalty: float | None = None
    min_length: int | None = None
    disable_unk: bool = False
    suppress_sequences: Sequence[Sequence[int]] = ()
    # Terminology: per input sentence (a list, one entry each), None or [] for none, else its
    # terms, each a str or a list of alternative renderings (str) of which one must appear:
    # [["chat", "chatte"], "maison"]. Sent as the server's TERMS (one JSON array per sentence).
    terms: Sequence[Sequence[str | Sequence[str]] | None] | None = None
    # A glossary, {source term: target term}, for every sentence: the source terms found in each
    # text (nmtserve.glossary: case-insensitive, whole words, longest first) are sent as TERMS
    # naming their source words, so the server gives each sentence of a text its own terms.
    glossary: Mapping[str, str] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.alignment, bool):
            raise InvalidInputError(f"alignment must be True or False, got {self.alignment!r}")
        if not isinstance(self.confidence, bool):
            raise InvalidInputError(f"confidence must be True or False, got {self.confidence!r}")
        if not isinstance(self.split_sentences, bool):
            raise InvalidInputError(f"split_sentences must be True or False, got {self.split_sentences!r}")
        if not isinstance(self.all_hypotheses, bool):
            raise InvalidInputError(f"all_hypotheses must be True or False, got {self.all_hypotheses!r}")
        if self.early_stopping is not None and not isinstance(self.early_stopping, bool):
            raise InvalidInputError(f"early_stopping must be True, False or None, got {self.early_stopping!r}")
        for name in ("source_lang", "target_lang"):
            value = getattr(self, name)
            codes = [value] if isinstance(value, str) or value is None or name == "source_lang" else value
            for code in codes:
                if code is not None and (not isinstance(code, str) or not code.strip()):
                    raise InvalidInputError(f"{name} must be a language code like 'en', got {code!r}")
        prefixes = self.target_prefix
        if prefixes is not None and not isinstance(prefixes, str):
            if not isinstance(prefixes, Sequence) or not all(isinstance(p, str) for p in prefixes):
                raise InvalidInputError(f"target_prefix must be a str or a list of str, got {prefixes!r}")
        for name in ("beam_size", "max_length"):
            value = getattr(self, name)
            if value is not None and (not _is_int(value) or value < 1):
                raise InvalidInputError(f"{name} must be a positive integer, got {value!r}")
        if not _is_int(self.num_hypotheses) or self.num_hypotheses < 1:
            raise InvalidInputError(
                f"num_hypotheses must be a positive integer, got {self.num_hypotheses!r}"
            )
        if self.beam_size is not None and self.num_hypotheses > self.beam_size:
            raise InvalidInputError(
                f"num_hypotheses ({self.num_hypotheses}) cannot exceed beam_size ({self.beam_size})"
            )
        penalty = self.length_penalty
        if penalty is not None and (
            isinstance(penalty, bool)
            or not isinstance(penalty, (int, float))
            or not math.isfinite(penalty)
        ):
            raise InvalidInputError(f"length_penalty must be a finite number, got {penalty!r}")
        self._check_controls()
        self._check_terms()
        if self.glossary is not None:
            if not isinstance(self.glossary, Mapping) or not all(
                    isinstance(k, str) and k.strip() and isinstance(v, str) and v.strip()
                    for k, v in self.glossary.items()):
                raise InvalidInputError("glossary must be a dict of source term -> target term (non-empty str), got "
                                        f"{type(self.glossary).__name__}")

    def _check_terms(self) -> None:
        if self.terms is None:
            return
        if isinstance(self.terms, (str, bytes)) or not isinstance(self.terms, Sequence):
            raise InvalidInputError(f"terms must be a list with one entry per input sentence, got {self.terms!r}")
        for i, entry in enumerate(self.terms):
            if entry is None:
                continue
            if isinstance(entry, (str, bytes)) or not isinstance(entry, Sequence):
                raise InvalidInputError(f"terms[{i}] must be None or a list of terms (a str, or a list of its "
                                        f"alternative renderings), got {entry!r}")
            for term in entry:
                renderings = [term] if isinstance(term, str) else term
                if (isinstance(renderings, bytes) or not isinstance(renderings, Sequence) or not renderings
                        or not all(isinstance(r, str) and r.strip() for r in renderings)):
                    raise InvalidInputError(f"terms[{i}]: a term must be a non-empty str or a non-empty list of "
                                            f"them, got {term!r}")

    def _check_controls(self) -> None:
        for name in ("no_repeat_ngram_size", "min_length"):
            value = getattr(self, name)
            if value is not None and (not _is_int(value) or value < 0):
                raise InvalidInputError(f"{name} must be an integer >= 0, got {value!r}")
        if self.max_length is not None and self.min_length is not None and self.min_length >= self.max_length:
            raise InvalidInputError(f"min_length ({self.min_length}) must be below max_length ({self.max_length})")
        penalty = self.repetition_penalty
        if penalty is not None and (isinstance(penalty, bool) or not isinstance(penalty, (int, float))
                                    or not 0 < penalty < math.inf):
            raise InvalidInputError(f"repetition_penalty must be a number > 0 (1: off), got {penalty!r}")
        if not isinstance(self.disable_unk, bool):
            raise InvalidInputError(f"disable_unk must be True or False, got {self.disable_unk!r}")
        sequences = self.suppress_sequences
        if isinstance(sequences, (str, bytes)) or not isinstance(sequences, Sequence) or not all(
                isinstance(seq, Sequence) and not isinstance(seq, (str, bytes)) and len(seq) > 0
                and all(_is_int(x) and x >= 0 for x in seq) for seq in sequences):
            raise InvalidInputError(f"suppress_sequences must be a list of non-empty lists of target token ids, "
                                    f"got {sequences!r}")

    @property
    def nbest(self) -> bool:
        return self.num_hypotheses > 1


class _CallArgs(TypedDict, total=False):
    """Options fields both calls take, None for the server's default (written once here; the
    shells take them as ``**args: Unpack[DocumentArgs]`` / ``Unpack[TranslateArgs]``)."""

    beam_size: int | None
    max_length: int | None
    length_penalty: float | None
    source_lang: str | None
    early_stopping: bool | None


class DocumentArgs(_CallArgs, total=False):
    """The keyword arguments of ``translate_document``."""

    target_lang: str | None


class TranslateArgs(_CallArgs, total=False):
    """The keyword arguments of ``translate`` and ``translate_iter``: the n-best size and whether
    to keep its implausible hypotheses too (``all_hypotheses``), what a rejected sentence does
    (``on_error``: "raise" or "return"), ``target_lang`` / ``target_prefix``, each one for
    all sentences or a list of one per input sentence, and the repetition controls
    (``no_repeat_ngram_size``, ``repetition_penalty``, ``min_length``, ``disable_unk``,
    ``suppress_sequences``; sentences only: a document decodes with the server's defaults), and
    ``terms`` (per input sentence its terminology; for a single str input, its list of terms)
    and ``glossary`` ({source term: target term}; the terms each text holds are asked for)."""

    num_hypotheses: int
    all_hypotheses: bool
    alignment: bool
    confidence: bool
    no_repeat_ngram_size: int | None
    repetition_penalty: float | None
    min_length: int | None
    disable_unk: bool
    suppress_sequences: Sequence[Sequence[int]]
    on_error: str
    target_lang: str | Sequence[str] | None
    target_prefix: str | Sequence[str] | None
    split_sentences: bool
    terms: Sequence[Sequence[str | Sequence[str]] | None] | None
    glossary: Mapping[str, str] | None


def options_from(method: str, args: Mapping[str, Any], accepted: type) -> Options:
    """The Options of a call's keyword arguments; an unknown one is a TypeError, as Python
    raises for a named parameter the method does not have."""
    keys: frozenset[str] = accepted.__optional_keys__  # type: ignore[attr-defined]
    for name in args:
        if name not in keys:
            raise TypeError(f"{method}() got an unexpected keyword argument {name!r}")
    return Options(**{k: v for k, v in args.items() if k != "on_error"})


def _is_int(value: object) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


@dataclass(frozen=True, slots=True)
class Request:
    """The tensors of one inference request, independent of the protocol."""

    inputs: tuple[tuple[str, np.ndarray, str], ...]  # (name, array, Triton datatype)
    outputs: tuple[str, ...]
    # Asked for too, unless the server turned them down once ("unexpected inference output": a
    # repository exported before them); the transport remembers and asks no more.
    optional_outputs: tuple[str, ...] = ()
    # Name the outputs in the request's ``outputs`` parameter too (the sentence contract's: the
    # server then computes those alone).
    name_outputs: bool = False


def _per_sentence(name: str, value: str | Sequence[Any], indices: Sequence[int] | None, n: int) -> list[Any]:
    """A per-call value for each of a request's sentences: the same string, or the entries of a
    per-sentence list at the sentences' input positions."""
    if isinstance(value, str):
        return [value] * n
    positions = indices if indices is not None else range(n)
    try:
        return [value[i] for i in positions]
    except IndexError:
        raise InvalidInputError(f"{name} has {len(value)} entries: give one per input sentence") from None


@functools.lru_cache(maxsize=8)
def _cached_finder(entries: tuple[str, ...]) -> TermFinder:
    return TermFinder(entries)


def _finder(glossary: Mapping[str, str]) -> TermFinder:
    """One TermFinder per glossary, not per request (a call sends many)."""
    return _cached_finder(tuple(glossary))


def encode_request(texts: Sequence[bytes], options: Options, indices: Sequence[int] | None = None) -> Request:
    """TEXT [n] plus the optional inputs that differ from the server's defaults; ``indices``: the
    sentences' positions in the input, for the per-sentence options."""
    inputs: list[tuple[str, np.ndarray, str]] = [
        (C.INPUT_TEXT, np.array(texts, dtype=np.object_), "BYTES")
    ]
    # Omitted inputs take the server's defaults; NUM_HYPOTHESES=1 is the default, so a plain
    # request carries TEXT alone and works with any server that implements the contract.
    for name, value, dtype in (
        (C.INPUT_BEAM_SIZE, options.beam_size, np.int32),
        (C.INPUT_MAX_LENGTH, options.max_length, np.int32),
        (C.INPUT_LENGTH_PENALTY, options.length_penalty, np.float32),
        (C.INPUT_NUM_HYPOTHESES, options.num_hypotheses if options.nbest else None, np.int32),
        (C.INPUT_NO_REPEAT_NGRAM_SIZE, options.no_repeat_ngram_size, np.int32),
        (C.INPUT_REPETITION_PENALTY, options.repetition_penalty, np.float32),
        (C.INPUT_MIN_LENGTH, options.min_length, np.int32),
    ):
        if value is not None:
            datatype = "INT32" if dtype is np.int32 else "FP32"
            inputs.append((name, np.array([value], dtype=dtype), datatype))
    n = len(texts)
    for name, value, option in (
        (C.INPUT_SOURCE_LANG, options.source_lang, "source_lang"),
        (C.INPUT_TARGET_LANG, options.target_lang, "target_lang"),
        (C.INPUT_TARGET_PREFIX, options.target_prefix, "target_prefix"),
    ):
        if value is None:
            continue
        values = [value] if isinstance(value, str) else _per_sentence(option, value, indices, n)
        if name != C.INPUT_TARGET_PREFIX:
            values = [v.strip() for v in values]
            if len(set(values)) == 1:
                values = values[:1]
        inputs.append((name, np.array([v.encode("utf-8") for v in values], dtype=np.object_), "BYTES"))
    if options.terms is not None or options.glossary:  # sent only when given: older servers never see it
        entries: list[list[Any]] = [[t if isinstance(t, str) else list(t) for t in e or ()] for e in (
            _per_sentence("terms", options.terms, indices, n) if options.terms is not None else [None] * n)]
        if options.glossary:
            finder = _finder(options.glossary)
            for e, text in zip(entries, texts, strict=True):
                e += glossary_terms(text.decode("utf-8", "replace"), options.glossary, finder)
        terms = [json.dumps(e, ensure_ascii=False) if e else "" for e in entries]
        if any(terms):
            inputs.append((C.INPUT_TERMS, np.array([t.encode("utf-8") for t in terms], dtype=np.object_), "BYTES"))
    if not options.split_sentences:  # sent only when it differs from the server's default
        inputs.append((C.INPUT_SPLIT_SENTENCES, np.array([False]), "BOOL"))
    if options.early_stopping:  # likewise: a server older than the input never sees it unasked
        inputs.append((C.INPUT_EARLY_STOPPING, np.array([True]), "BOOL"))
    if options.disable_unk:
        inputs.append((C.INPUT_DISABLE_UNK, np.array([True]), "BOOL"))
    if options.suppress_sequences:  # one row per sequence, padded with -1
        width = max(len(seq) for seq in options.suppress_sequences)
        rows = [[*seq, *[-1] * (width - len(seq))] for seq in options.suppress_sequences]
        inputs.append((C.INPUT_SUPPRESS_SEQUENCES, np.array(rows, dtype=np.int32), "INT32"))
    outputs = [C.OUTPUT_TRANSLATION, C.OUTPUT_SCORE]
    if options.alignment:
        inputs.append((C.INPUT_ALIGN, np.array([True]), "BOOL"))
        outputs.append(C.OUTPUT_ALIGNMENT)
    if options.confidence:
        inputs.append((C.INPUT_CONFIDENCE, np.array([True]), "BOOL"))
        outputs += [C.OUTPUT_SENTENCE_CONFIDENCE, C.OUTPUT_WORD_CONFIDENCE]
        if options.alignment:
            outputs.append(C.OUTPUT_MISSING_WORDS)
    if options.nbest:
        outputs += [C.OUTPUT_NBEST_TRANSLATION, C.OUTPUT_NBEST_SCORE]
    return Request(tuple(inputs), tuple(outputs), (C.OUTPUT_WARNING,), name_outputs=True)


def document_format(fmt: str | None, filename: str | None) -> str:
    """``fmt``, else the format ``filename``'s extension names, else "plain"; InvalidInputError for
    an unknown format or extension."""
    if fmt is None and filename is not None:
        fmt = C.document_format_of(filename)
        if fmt is None:
            raise InvalidInputError(f"cannot tell the format of {filename!r} from its extension: give format= one "
                                    f"of {', '.join(C.DOCUMENT_FORMATS)}")
    fmt = "plain" if fmt is None else fmt
    if fmt not in C.DOCUMENT_FORMATS:
        raise InvalidInputError(f"format must be one of {', '.join(C.DOCUMENT_FORMATS)}, got {fmt!r}")
    return fmt


def encode_document_request(document: str | bytes, fmt: str, options: Options) -> Request:
    """DOCUMENT [1], FORMAT [1] and the decoding options that differ from the server's defaults."""
    if fmt not in C.DOCUMENT_FORMATS:
        raise InvalidInputError(
            f"format must be one of {', '.join(C.DOCUMENT_FORMATS)}, got {fmt!r}"
        )
    if fmt in C.FILE_FORMATS:
        if not isinstance(document, (bytes, bytearray, memoryview)):
            raise InvalidInputError(f"a {fmt} file must be bytes (the file's content), got {type(document).__name__}")
        if not document:
            raise InvalidInputError(f"the {fmt} file is empty")
        data = bytes(document)
    elif isinstance(document, str):
        data = document.encode("utf-8", "surrogatepass")
    else:
        raise InvalidInputError(f"a {fmt} document must be a str, got {type(document).__name__}")
    if options.nbest:
        raise InvalidInputError("num_hypotheses > 1 is not available for documents")
    sentence = encode_request([b""], options)
    inputs = [
        (C.INPUT_DOCUMENT, np.array([data], dtype=np.object_), "BYTES"),
        (C.INPUT_FORMAT, np.array([fmt.encode()], dtype=np.object_), "BYTES"),
        # the options, encoded as for sentences (a document is cut into sentences by its own rules)
        *(i for i in sentence.inputs[1:] if i[0] not in (C.INPUT_SPLIT_SENTENCES, C.INPUT_ALIGN)),
    ]
    return Request(tuple(inputs), (C.OUTPUT_TRANSLATION, C.OUTPUT_SENTENCES))


def decode_document_response(result: InferResult, fmt: str = "plain") -> tuple[str | bytes, int]:
    """(the translated document, a str; or file, bytes; how many sentences it had)."""
    raw = _output(result, C.OUTPUT_TRANSLATION, (1,))[0]
    out: str | bytes = bytes(raw) if fmt in C.FILE_FORMATS else _text(raw)
    return out, int(_output(result, C.OUTPUT_SENTENCES, (1,))[0])


def tritonclient_tensors(module: ModuleType, request: Request) -> tuple[list[Any], list[Any]]:
    """(inputs, requested outputs) for ``tritonclient.grpc`` or ``tritonclient.http``.

    Both default to the binary tensor encoding (HTTP included), which carries UTF-8 bytes as is.
    """
    inputs = []
    for name, array, datatype in request.inputs:
        tensor = module.InferInput(name, list(array.shape), datatype)
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    outputs = [module.InferRequestedOutput(name) for name in request.outputs]
    return inputs, outputs


class InferResult(Protocol):
    def as_numpy(self, name: str) -> np.ndarray | None: ...


def decode_response(result: InferResult, count: int, options: Options,
                    sources: Sequence[bytes] | None = None) -> list[Translation]:
    """Exactly ``count`` translations from one response, or ServerError saying what is wrong;
    ``sources`` (the request's sentences) feed the n-best's number check (``_plausible``)."""
    texts = _output(result, C.OUTPUT_TRANSLATION, (count,))
    score_array = result.as_numpy(C.OUTPUT_SCORE)
    if score_array is None:
        scores: list[float | None] = [None] * count
    else:
        scores = [_score(s) for s in _checked(score_array, C.OUTPUT_SCORE, (count,))]
    warning_array = result.as_numpy(C.OUTPUT_WARNING)
    warnings = [""] * count if warning_array is None else [_text(w) for w in _checked(warning_array, C.OUTPUT_WARNING, (count,))]
    alignments: list[list[tuple[int, int]] | None] = [None] * count
    if options.alignment:
        alignments = [_alignment(a) for a in _output(result, C.OUTPUT_ALIGNMENT, (count,))]
    quality: list[dict[str, Any]] = [{} for _ in range(count)]
    if options.confidence:
        sentence = _output(result, C.OUTPUT_SENTENCE_CONFIDENCE, (count,))
        words = _output(result, C.OUTPUT_WORD_CONFIDENCE, (count,))
        missing = _output(result, C.OUTPUT_MISSING_WORDS, (count,)) if options.alignment else [None] * count
        quality = [{"confidence": float(c), "word_confidence": _numbers(w, float, C.OUTPUT_WORD_CONFIDENCE),
                    "missing_words": None if m is None else _numbers(m, int, C.OUTPUT_MISSING_WORDS)}
                   for c, w, m in zip(sentence, words, missing, strict=True)]
    if not options.nbest:
        return [Translation(_text(t), s, warning=w, alignment=a, **q)
                for t, s, w, a, q in zip(texts, scores, warnings, alignments, quality, strict=True)]
    k = options.num_hypotheses
    nbest_texts = _output(result, C.OUTPUT_NBEST_TRANSLATION, (count, k))
    nbest_scores = _output(result, C.OUTPUT_NBEST_SCORE, (count, k))
    if sources is None:
        sources = [b""] * count
    return [
        Translation(
            _text(t),
            s,
            _plausible([Hypothesis(_text(ht), _score(hs)) for ht, hs in zip(row_t, row_s, strict=True)],
                       source.decode("utf-8", "replace"), options),
            warning=w,
            alignment=a,
            **q,
        )
        for t, s, row_t, row_s, w, source, a, q in zip(texts, scores, nbest_texts, nbest_scores, warnings, sources,
                                                       alignments, quality, strict=True)
    ]


def _numbers(value: Any, kind: type, name: str) -> list:
    """A space-separated list of numbers of one output element; ServerError when it is not one."""
    try:
        return [kind(x) for x in _text(value).split()]
    except ValueError:
        raise ServerError(f"the server's {name} is not a list of numbers: {_text(value)[:80]!r}") from None


def _alignment(value: Any) -> list[tuple[int, int]]:
    """One element of ALIGNMENT (Pharaoh format) as pairs; ServerError when it is not one."""
    try:
        return parse_pharaoh(_text(value))
    except ValueError as exc:
        raise ServerError(f"{C.OUTPUT_ALIGNMENT}: {exc}") from None


def _plausible(hypotheses: list[Hypothesis], source: str, options: Options) -> list[Hypothesis]:
    """The hypotheses a person is offered (nmtserve.alternatives), or all with ``all_hypotheses``."""
    if options.all_hypotheses:
        return hypotheses
    target = options.target_lang if isinstance(options.target_lang, str) else None
    keep = plausible([h.text for h in hypotheses], [h.score for h in hypotheses], source,
                     source_language=options.source_lang, target_language=target)
    return [hypotheses[i] for i in keep]


def _output(result: InferResult, name: str, shape: tuple[int, ...]) -> np.ndarray:
    array = result.as_numpy(name)
    if array is None:
        raise ServerError(f"the server's response has no {name} output")
    return _checked(array, name, shape)


def _checked(array: np.ndarray, name: str, shape: tuple[int, ...]) -> np.ndarray:
    if array.shape != shape:
        raise ServerError(
            f"the server returned {name} of shape {list(array.shape)} for a request of "
            f"{shape[0]} sentence(s); expected {list(shape)}"
        )
    return array


def _text(value: bytes | str) -> str:
    if isinstance(value, str):
        return value
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ServerError(f"the server returned a translation that is not UTF-8: {exc}") from exc


def _score(value: np.floating) -> float:
    # The shortest decimal that identifies the float32 (-0.1, not -0.10000000149011612): what
    # the server computed, without the noise of widening it to a double.
    return float(str(np.float32(value)))
