"""The serving contract's data handling (parsing and checking what the models receive, shaping
what they send), free of Triton so it is unit-tested directly. The tensor names and types are
``nmtserve.contract``; the table for users is in the README."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from .. import contract as c
from .. import defaults
from ..decoding.constraints import Constraint
from ..decoding.search import Hypothesis, SearchOptions, TargetPrefix
from ..graphs import pad_batch
from ..runtime.spec import ModelSpec


class InputError(ValueError):
    """A request is invalid; the message names the problem (sent back as INVALID_ARG)."""


@dataclass(frozen=True)
class RequestLimits:
    """What one request may hold (tokenize's parameters ``max_request_sentences``,
    ``max_sentence_chars``; 0: no limit). Tokens per sentence are the export's max_source_len.
    Together they bound a request's size (Triton itself reads any message size)."""

    max_request_sentences: int = defaults.MAX_REQUEST_SENTENCES
    max_sentence_chars: int = defaults.MAX_SENTENCE_CHARS

    @classmethod
    def from_params(cls, params: Mapping[str, str]) -> RequestLimits:
        return cls(int(params.get("max_request_sentences", cls.max_request_sentences)),
                   int(params.get("max_sentence_chars", cls.max_sentence_chars)))

    def check(self, texts: Sequence[str]) -> None:
        if self.max_request_sentences and len(texts) > self.max_request_sentences:
            raise InputError(f"TEXT has {len(texts)} sentences, more than the {self.max_request_sentences} a request "
                             "may hold: split it (nmtserve's client sends batches of --batch-size)")
        if self.max_sentence_chars:
            for i, text in enumerate(texts):
                if len(text) > self.max_sentence_chars:
                    raise InputError(f"{c.sentence(i)} is too long: {len(text)} characters, the maximum is "
                                     f"{self.max_sentence_chars}")


def decode_texts(array: np.ndarray | None) -> list[str]:
    if array is None:
        raise InputError("input TEXT is required")
    if array.ndim != 1:
        raise InputError(f"TEXT must be 1-D [n], got shape {list(array.shape)}")
    if array.size == 0:
        raise InputError("TEXT is empty: send at least one sentence")
    texts = []
    for i, item in enumerate(array):
        if isinstance(item, str):
            text = item
        else:
            try:
                text = bytes(item).decode("utf-8")
            except UnicodeDecodeError as exc:
                raise InputError(f"{c.sentence(i)} is not valid UTF-8 ({exc.reason} at byte {exc.start})") from None
            except TypeError:
                raise InputError(f"{c.sentence(i)} is not a string") from None
        if not text.strip():
            raise InputError(f"{c.sentence(i)} is empty or whitespace only")
        texts.append(text)
    return texts


def _scalar(name: str, value: np.ndarray | None, kind: type):
    if value is None:
        return None
    arr = np.asarray(value)
    if arr.size != 1:
        raise InputError(f"{name} must hold one value, got shape {list(arr.shape)}")
    item = arr.reshape(-1)[0]
    if kind is int:
        if not np.issubdtype(arr.dtype, np.integer):
            raise InputError(f"{name} must be an integer, got {arr.dtype}")
        return int(item)
    if not np.issubdtype(arr.dtype, np.number):
        raise InputError(f"{name} must be a number, got {arr.dtype}")
    return float(item)


def parse_search_options(inputs: Mapping[str, np.ndarray | None], spec: ModelSpec, max_beam: int) -> SearchOptions:
    beam = _scalar(c.BEAM_SIZE, inputs.get(c.BEAM_SIZE), int)
    max_length = _scalar(c.MAX_LENGTH, inputs.get(c.MAX_LENGTH), int)
    penalty = _scalar(c.LENGTH_PENALTY, inputs.get(c.LENGTH_PENALTY), float)
    nbest = _scalar(c.NUM_HYPOTHESES, inputs.get(c.NUM_HYPOTHESES), int)
    beam = spec.beam_size if beam is None else beam
    if not 1 <= beam <= max_beam:
        raise InputError(f"BEAM_SIZE must be between 1 and {max_beam}, got {beam}")
    nbest = 1 if nbest is None else nbest
    if not 1 <= nbest <= beam:
        raise InputError(f"NUM_HYPOTHESES must be between 1 and BEAM_SIZE ({beam}), got {nbest}")
    if max_length is not None and not 1 <= max_length <= spec.max_target_len:
        raise InputError(f"MAX_LENGTH must be between 1 and {spec.max_target_len}, got {max_length}")
    penalty = spec.length_penalty if penalty is None else penalty
    if not math.isfinite(penalty) or abs(penalty) > c.LENGTH_PENALTY_LIMIT:
        raise InputError(f"LENGTH_PENALTY must be a finite number in [-{c.LENGTH_PENALTY_LIMIT:g}, "
                         f"{c.LENGTH_PENALTY_LIMIT:g}], got {penalty}")
    early = parse_bool(c.EARLY_STOPPING, inputs.get(c.EARLY_STOPPING), default=False)
    align = parse_bool(c.ALIGN, inputs.get(c.ALIGN), default=False)
    confidence = parse_bool(c.CONFIDENCE, inputs.get(c.CONFIDENCE), default=False)
    controls = _parse_controls(inputs, spec, max_length)
    if max_length is None:  # the export's length rule
        return spec.search_options(beam_size=beam, num_hypotheses=nbest, length_penalty=penalty, early_stopping=early,
                                   alignment=align, confidence=confidence, **controls)
    controls.setdefault("min_length", min(spec.min_length, max_length - 1))
    return spec.search_options(beam_size=beam, num_hypotheses=nbest, length_penalty=penalty, early_stopping=early,
                               max_length=max_length, max_length_a=0.0, max_length_b=None, alignment=align,
                               confidence=confidence, **controls)


def _parse_controls(inputs: Mapping[str, np.ndarray | None], spec: ModelSpec, max_length: int | None) -> dict:
    """The repetition controls a request sets (absent: the export's), as ``spec.search_options``
    keywords; InputError names a bad one. ``max_length``: the request's MAX_LENGTH, if given."""
    controls: dict = {}
    ngram = _scalar(c.NO_REPEAT_NGRAM_SIZE, inputs.get(c.NO_REPEAT_NGRAM_SIZE), int)
    if ngram is not None:
        if not 0 <= ngram <= spec.max_target_len:
            raise InputError(f"{c.NO_REPEAT_NGRAM_SIZE} must be between 0 (off) and {spec.max_target_len}, got {ngram}")
        controls["no_repeat_ngram_size"] = ngram
    penalty = _scalar(c.REPETITION_PENALTY, inputs.get(c.REPETITION_PENALTY), float)
    if penalty is not None:
        if not 0 < penalty <= c.REPETITION_PENALTY_LIMIT:  # NaN fails too
            raise InputError(f"{c.REPETITION_PENALTY} must be a number in (0, {c.REPETITION_PENALTY_LIMIT:g}] "
                             f"(1: off), got {penalty}")
        controls["repetition_penalty"] = penalty
    min_length = _scalar(c.MIN_LENGTH, inputs.get(c.MIN_LENGTH), int)
    if min_length is not None:
        limit, what = (spec.max_target_len, "the maximum length") if max_length is None else (max_length, c.MAX_LENGTH)
        if not 0 <= min_length < limit:
            raise InputError(f"{c.MIN_LENGTH} must be between 0 and {limit - 1} (below {what}), got {min_length}")
        controls["min_length"] = min_length
    if parse_bool(c.DISABLE_UNK, inputs.get(c.DISABLE_UNK), default=False):
        controls["disable_unk"] = True
    sequences = _suppress_sequences(inputs.get(c.SUPPRESS_SEQUENCES), spec.vocab)
    if sequences:
        controls["suppress_sequences"] = sequences
    return controls


def _suppress_sequences(value: np.ndarray | None, vocab: int) -> tuple[tuple[int, ...], ...]:
    """SUPPRESS_SEQUENCES [s, L] int32, each row a sequence of target ids padded with -1."""
    name = c.SUPPRESS_SEQUENCES
    if value is None or value.size == 0:
        return ()
    array = np.asarray(value)
    if array.ndim != 2 or not np.issubdtype(array.dtype, np.integer):
        raise InputError(f"{name} must be a 2-D integer array [sequences, tokens] padded with -1, "
                         f"got shape {list(array.shape)} of {array.dtype}")
    if len(array) > c.SUPPRESS_SEQUENCES_LIMIT:
        raise InputError(f"{name} has {len(array)} sequences, more than the {c.SUPPRESS_SEQUENCES_LIMIT} allowed")
    out = []
    for i, row in enumerate(array.tolist()):
        n = sum(1 for x in row if x != -1)
        if n == 0 or any(x == -1 for x in row[:n]):
            raise InputError(f"{name}[{i}] must hold token ids, then only -1 padding, got {row}")
        if not all(0 <= x < vocab for x in row[:n]):
            raise InputError(f"{name}[{i}] holds an id outside the target vocabulary [0, {vocab}): {row[:n]}")
        out.append(tuple(row[:n]))
    return tuple(out)


def parse_sources(src: np.ndarray | None, lengths: np.ndarray | None, spec: ModelSpec) -> list[list[int]]:
    """``SRC_IDS [n, S]`` + ``SRC_LEN [n]`` (what ``tokenize`` sends, or a caller of ``generate``
    with its own ids) as one id list per sentence, checked so that nothing reaches the graphs
    that would fail them: an InputError names the first bad sentence."""
    if src is None or lengths is None or src.ndim != 2 or lengths.ndim != 1 or lengths.shape[0] != src.shape[0]:
        raise InputError("SRC_IDS [n, S] and SRC_LEN [n] are required")
    if src.dtype.kind not in "iu" or lengths.dtype.kind not in "iu":
        raise InputError(f"SRC_IDS and SRC_LEN must be integers, got {src.dtype} and {lengths.dtype}")
    limit = min(spec.max_source_len, src.shape[1])
    vocab = spec.src_vocab or None
    out = []
    rows = src.tolist()  # Python's min and max over a short list: numpy's per row cost ~10x more
    for i, n in enumerate(lengths.tolist()):
        if not 1 <= n <= limit:
            raise InputError(f"SRC_LEN[{i}] is {n}: it must be between 1 and {limit} "
                             f"(the SRC_IDS width {src.shape[1]}, at most max_source_len {spec.max_source_len})")
        ids = rows[i][:n]
        low, high = min(ids), max(ids)
        if low < 0 or (vocab is not None and high >= vocab):
            raise InputError(f"SRC_IDS[{i}] holds token id {low if low < 0 else high}, outside the source vocabulary "
                             f"(0..{vocab - 1 if vocab else 'n'})")
        out.append(ids)
    return out


def decode_strings(name: str, array: np.ndarray | None, n: int, *, per_sentence: bool) -> list[str] | None:
    """An optional text input holding one value for the request or (``per_sentence``) one per
    sentence, as ``n`` strings; None when absent."""
    if array is None or array.size == 0:
        return None
    if array.ndim != 1 or (array.size != 1 and (not per_sentence or array.size != n)):
        wanted = f"[1] or [{n}] (one per sentence)" if per_sentence else "[1]"
        raise InputError(f"{name} must be {wanted}, got shape {list(array.shape)}")
    out = []
    for i, item in enumerate(array):
        try:
            out.append(item.decode("utf-8") if isinstance(item, bytes) else str(item))
        except UnicodeDecodeError as exc:
            raise InputError(f"{name}[{i}] is not valid UTF-8 ({exc.reason} at byte {exc.start})") from None
    return out * n if len(out) == 1 else out


@dataclass(frozen=True)
class Languages:
    """A multilingual request's languages as model codes: the source's, and each sentence's target."""

    source: str
    targets: list[str]


def parse_languages(source: np.ndarray | None, target: np.ndarray | None, n: int,
                    codes: Sequence[str]) -> Languages:
    """SOURCE_LANG [1] and TARGET_LANG [1] / [n] of a multilingual model, resolved to its codes
    (its own, or an unambiguous ISO 639-1 / 639-3 code); an InputError names a missing or unknown one."""
    from ..languages import LanguageError, resolve

    def one(name: str, code: str) -> str:
        try:
            return resolve(code.strip(), codes)
        except LanguageError as exc:
            raise InputError(f"{name}: {exc} (`nmtserve languages` or Translator.languages() lists them)") from None

    sources = decode_strings(c.SOURCE_LANG, source, 1, per_sentence=False)
    targets = decode_strings(c.TARGET_LANG, target, n, per_sentence=True)
    hint = f"e.g. {codes[0]}; `nmtserve languages` or Translator.languages() lists the {len(codes)} languages"
    if not sources or not sources[0].strip():
        raise InputError(f"{c.SOURCE_LANG} is required: this multilingual model translates from {len(codes)} languages ({hint})")
    if not targets or any(not t.strip() for t in targets):
        raise InputError(f"{c.TARGET_LANG} is required: this multilingual model translates into {len(codes)} "
                         f"languages ({hint})")
    resolved: dict[str, str] = {}
    out = []
    for i, t in enumerate(targets):
        if t not in resolved:
            resolved[t] = one(c.TARGET_LANG if len(set(targets)) == 1 else f"{c.TARGET_LANG}[{i}]", t)
        out.append(resolved[t])
    return Languages(one(c.SOURCE_LANG, sources[0]), out)


@dataclass
class Pieces:
    """How ``tokenize`` cut a request's TEXT into the sentences ("pieces") it sends to the model,
    so that ``detokenize`` can put their translations back together.

    ``counts[i]`` pieces come from TEXT[i]; ``gaps`` holds ``counts[i] + 1`` strings per element,
    the text before its first piece, between its pieces and after its last, so its translation is
    ``gaps[0] + t[0] + gaps[1] + ... + t[-1] + gaps[-1]``. ``owners[j]`` is the element of piece j
    and ``cut[i]`` how many times TEXT[i] had to be cut inside a sentence to fit the model's
    token limit."""

    owners: list[int] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)
    gaps: list[str] = field(default_factory=list)
    cut: list[int] = field(default_factory=list)

    def add(self, owner: int, gaps: Sequence[str], cut: int = 0) -> None:
        """TEXT[owner]'s pieces, given by the ``count + 1`` gaps around them."""
        count = len(gaps) - 1
        self.owners += [owner] * count
        self.counts.append(count)
        self.gaps += gaps
        self.cut.append(cut)


def sentences_of(text: str, language: str = "en") -> tuple[list[str], list[str]]:
    """``text`` cut into its sentences by the segmenter of the document path (``sentencex``):
    (sentences, the ``len(sentences) + 1`` gaps around them). A text of one sentence (or none
    that the segmenter finds: "7:45") comes back whole with empty gaps; the whitespace before
    the first and after the last sentence is dropped, as the model drops it."""
    from ..documents import plain_line_is_one_sentence

    if plain_line_is_one_sentence(text, language):  # most requests: ~5 us, not segment's ~130
        return [text], ["", ""]
    return _segmented_sentences(text, language)


def _segmented_sentences(text: str, language: str) -> tuple[list[str], list[str]]:
    """``sentences_of`` as the document segmenter alone decides it."""
    from ..documents import DocumentError, segment

    try:
        doc = segment(text, "plain", language=language, max_chars=max(len(text), 1))
    except (DocumentError, ValueError):  # control characters: the model gets the text as it is
        return [text], ["", ""]
    if len(doc.sentences) < 2:
        return [text], ["", ""]
    spans = doc.spans
    gaps = [text[: spans[0][0]].lstrip()]
    gaps += [text[end:start] for (_, end), (start, _) in zip(spans, spans[1:], strict=False)]
    gaps.append(text[spans[-1][1]:].rstrip())
    return list(doc.sentences), gaps


# A sentence over the token limit is cut after a clause's punctuation, else between words.
_CLAUSE_BREAK = re.compile(r"(?<=[,;:])\s+")
_WORD_BREAK = re.compile(r"\s+")


def cut_to_fit(text: str, fits) -> list[tuple[str, str]] | None:
    """``text`` as [(piece, the whitespace after it)], each piece ``fits``: cut at the last clause
    break (", ", "; ", ": ") that keeps the piece within the limit, else at the last word break;
    None when a single word does not fit."""
    out = []
    while not fits(text):
        best = None
        for pattern in (_CLAUSE_BREAK, _WORD_BREAK):
            for m in pattern.finditer(text):
                if m.start() == 0:
                    continue
                if not fits(text[: m.start()]):
                    break
                best = m
            if best is not None:
                break
        if best is None:
            return None
        out.append((text[: best.start()], best.group()))
        text = text[best.end():]
    out.append((text, ""))
    return out


def tokenize_request(tokenizer, texts: Sequence[str], spec: ModelSpec, *, prefixes: Sequence[str] | None = None,
                     languages: Languages | None = None, split: bool = True,
                     segment_language: str = "en", terms: Sequence[Terms] | None = None) -> dict[str, np.ndarray]:
    """``tokenize``'s outputs for checked texts: the sources (``[lang] X </s>`` for a multilingual
    model, ``X </s>`` otherwise), the tokens forced after the decoder start, and the layout
    (PIECES, GAPS) that puts each text's translation back together.

    With ``split`` a text of several sentences is translated sentence by sentence
    (``sentences_of``). A sentence over the export's max_source_len is cut at a clause or word
    break (``cut_to_fit``) and its pieces translated one by one (CUT counts the cuts); only a
    single word over the limit is refused. A target prefix goes to a text's first sentence.

    A multilingual model forces the target language token as transformers' ``forced_bos_token_id``
    does (a generated token); with a target prefix the language token and the prefix are a decoder
    prompt, as ``generate(decoder_input_ids=[start, lang, *prefix])``.

    ``terms`` (``parse_terms``, per text) become TERM_IDS rows (``term_rows``): a text of one
    sentence gets all of its terms; a text of several gets, per sentence, the terms whose source
    words the sentence holds (every term must then name its source). Terms go without a target
    prefix, on a model of one language pair."""
    if terms is not None and any(terms):
        _check_terms_apply(terms, prefixes, languages)
    if languages is not None:
        def encode(text: str) -> list[int]:
            return tokenizer.encode(text, languages.source)
    else:
        encode = tokenizer.encode
    pieces = Pieces()
    ids: list[list[int]] = []
    sentence_terms: list[Terms] = []
    for i, text in enumerate(texts):
        sentences, gaps = sentences_of(text, segment_language) if split else ([text], ["", ""])
        kept_gaps, cuts = [gaps[0]], 0
        for sentence, gap in zip(sentences, gaps[1:], strict=True):
            encoded = encode(sentence)
            parts = [(sentence, "")]
            if len(encoded) > spec.max_source_len:
                cut = cut_to_fit(sentence, lambda t: len(encode(t)) <= spec.max_source_len)
                if cut is None:
                    raise InputError(f"{c.sentence(i)} is too long: {len(encoded)} tokens, the maximum is "
                                     f"{spec.max_source_len}, and it has no space to cut it at")
                parts = cut
                cuts += len(parts) - 1
            for k, (part, space) in enumerate(parts):
                kept_gaps.append(space if k < len(parts) - 1 else gap)
                ids.append(encoded if len(parts) == 1 else encode(part))
                if terms is not None:
                    sentence_terms.append(_terms_of_sentence(terms[i], part) if len(parts) > 1 or len(sentences) > 1
                                          else terms[i])
        if terms is not None and terms[i] and len(kept_gaps) > 2 and not all(
                isinstance(t, Term) and t.source for t in terms[i]):
            why = ("it is cut to fit the model's token limit" if cuts else
                   f"it holds {len(kept_gaps) - 1} sentences: send one sentence per TEXT element with "
                   f"{c.SPLIT_SENTENCES} false")
            raise _terms_error(i, f"{c.TERMS} without their source words apply to one sentence, and {why} "
                                  '(or give each term as {"source": ..., "target": ...})')
        pieces.add(i, kept_gaps, cuts)
    forced, prompts = [], []
    for j, owner in enumerate(pieces.owners):
        is_first = j == 0 or pieces.owners[j - 1] != owner
        prefix = prefixes[owner] if prefixes and is_first else ""
        tokens = _prefix_ids(tokenizer, prefix, languages.targets[owner] if languages else None) if prefix.strip() else []
        if len(tokens) >= spec.max_target_len // 2:
            raise InputError(f"{c.TARGET_PREFIX}[{owner}] is too long: {len(tokens)} tokens, the maximum is "
                             f"{spec.max_target_len // 2 - 1}")
        if languages is not None:
            tokens = [tokenizer.languages[languages.targets[owner]], *tokens]
        forced.append(tokens)
        prompts.append(len(tokens) if prefix.strip() else 0)
    return {
        c.SRC_IDS: pad_batch(ids, spec.pad_id, np.int32),
        c.SRC_LEN: np.array([len(x) for x in ids], dtype=np.int32),
        c.FORCED_IDS: pad_batch([f or [spec.pad_id] for f in forced], spec.pad_id, np.int32),
        c.FORCED_LEN: np.array([len(f) for f in forced], dtype=np.int32),
        c.PROMPT_LEN: np.array(prompts, dtype=np.int32),
        c.TERM_IDS: term_rows(tokenizer, sentence_terms if terms else [() for _ in pieces.owners],
                              pieces.owners, spec),
        c.PIECES: np.array(pieces.counts, dtype=np.int32),
        c.GAPS: np.array([g.encode("utf-8") for g in pieces.gaps], dtype=np.object_),
        c.CUTS: np.array(pieces.cut, dtype=np.int32),
    }


class Term(tuple):
    """One term's renderings (any one will do). ``source``: the source words it renders, when the
    request named them: the term then applies to the sentences of its element that hold them
    (``nmtserve.glossary.TermFinder``), so an element of several sentences may carry terms."""

    source: str | None

    def __new__(cls, renderings: Sequence[str], source: str | None = None) -> Term:
        term = super().__new__(cls, renderings)
        term.source = source
        return term


# One element's TERMS: per term, its renderings.
Terms = tuple[tuple[str, ...], ...]


def _terms_error(i: int, problem: str) -> InputError:
    """How a problem with an element's terms is named: TERMS[i], and its sentence (TEXT[i], so
    the client puts it on the input line)."""
    return InputError(f"{c.TERMS}[{i}]: {problem} (the terms of {c.sentence(i)})")


def parse_terms(array: np.ndarray | None, n: int) -> list[Terms] | None:
    """TERMS [n] (or [1] for every element): per element, a JSON array whose items are a term (a
    string), its alternative renderings (a list of strings), or an object naming its source words,
    {"source": ..., "target": a string or a list} (a ``Term`` with ``source``); "" = none. None
    when absent or all empty; an InputError names the element and what is wrong with it."""
    texts = decode_strings(c.TERMS, array, n, per_sentence=True)
    if texts is None:
        return None
    parsed: dict[str, Terms] = {}
    out = []
    for i, text in enumerate(texts):
        if text not in parsed:
            parsed[text] = _one_terms(i, text)
        out.append(parsed[text])
    return out if any(out) else None


def _one_terms(i: int, text: str) -> Terms:
    if not text.strip():
        return ()
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise _terms_error(i, f"not JSON ({exc}): give a JSON array of terms, e.g. "
                              '[["chat", "chatte"], "maison"]') from None
    if not isinstance(value, list):
        raise _terms_error(i, f"must be a JSON array of terms, got {type(value).__name__}")
    if len(value) > c.TERMS_LIMIT:
        raise _terms_error(i, f"{len(value)} terms, more than the {c.TERMS_LIMIT} a sentence may have")
    out = []
    for t, term in enumerate(value):
        source = None
        if isinstance(term, dict):
            source, term = term.get("source"), term.get("target")
            if set(value[t]) - {"source", "target"} or not isinstance(source, str) or not source.strip():
                raise _terms_error(i, f"term {t}: an object term is {{\"source\": the source words, \"target\": a "
                                      f"rendering or a list of them}}, got {json.dumps(value[t], ensure_ascii=False)}")
        alternatives = [term] if isinstance(term, str) else term
        if not isinstance(alternatives, list) or not alternatives or not all(isinstance(a, str) for a in alternatives):
            raise _terms_error(i, f"term {t} must be a string or a non-empty list of strings, got {json.dumps(term)}")
        if len(alternatives) > c.TERM_ALTERNATIVES_LIMIT:
            raise _terms_error(i, f"term {t} has {len(alternatives)} alternatives, more than the "
                                  f"{c.TERM_ALTERNATIVES_LIMIT} allowed")
        if any(not a.strip() for a in alternatives):
            raise _terms_error(i, f"term {t} holds an empty string")
        out.append(Term([a.strip() for a in alternatives], source.strip() if source else None))
    return tuple(out)


def _terms_of_sentence(terms: Terms, sentence: str) -> Terms:
    """The terms of an element of several sentences that ``sentence`` holds the source words of."""
    from ..glossary import TermFinder

    found = {source for _, _, source in TermFinder(
        dict.fromkeys(t.source for t in terms if isinstance(t, Term) and t.source)).find(sentence)}
    return tuple(t for t in terms if isinstance(t, Term) and t.source in found)


def _check_terms_apply(terms: Sequence[Terms], prefixes: Sequence[str] | None, languages: Languages | None) -> None:
    """What terms are not served with: a target prefix on the same element, a multilingual model
    (the search takes no constraints beside forced tokens, and its language token is one)."""
    i = next(i for i, t in enumerate(terms) if t)
    if languages is not None:
        raise _terms_error(i, "this multilingual model does not take terms (its target language token is forced, "
                              "and terms are decoded without forced tokens)")
    both = [k for k, t in enumerate(terms) if t and prefixes and prefixes[k].strip()]
    if both:
        raise _terms_error(both[0], f"an element cannot have both terms and a {c.TARGET_PREFIX}")


def term_rows(tokenizer, terms: Sequence[Terms], owners: Sequence[int], spec: ModelSpec) -> np.ndarray:
    """TERM_IDS [m, L] int32: per sentence its terms' renderings as target ids (``encode_target``
    without EOS), laid out as ``nmtserve.contract`` says (TERM_OR / TERM_AND / TERM_PAD)."""
    rows = []
    for j, sentence_terms in enumerate(terms):
        row: list[int] = []
        for t, alternatives in enumerate(sentence_terms):
            for a, text in enumerate(alternatives):
                ids = list(tokenizer.encode_target(text))[:-1]  # X </s>
                if not ids:
                    raise _terms_error(owners[j], f"term {t}: {text!r} has no target tokens")
                if len(ids) > c.TERM_TOKENS_LIMIT:
                    raise _terms_error(owners[j], f"term {t}: {text!r} is {len(ids)} target tokens, more than the "
                                                  f"{c.TERM_TOKENS_LIMIT} allowed")
                if spec.unk_id in ids:
                    raise _terms_error(owners[j], f"term {t}: {text!r} holds characters this model cannot write "
                                                  "(its target vocabulary has no piece for them)")
                row += [*ids, c.TERM_OR if a < len(alternatives) - 1 else c.TERM_AND]
        rows.append(row)
    width = max((len(r) for r in rows), default=0) or 1
    out = np.full((len(rows), width), c.TERM_PAD, dtype=np.int32)
    for j, row in enumerate(rows):
        out[j, : len(row)] = row
    return out


def parse_constraints(term_ids: np.ndarray | None, n: int, spec: ModelSpec) -> list[tuple[Constraint, ...]] | None:
    """``TERM_IDS [n, L]`` (optional) as each sentence's ``Constraint``s (``nmtserve.contract``
    has the layout); None when absent or without a term. Ids must be target ids, not EOS."""
    name = c.TERM_IDS
    if term_ids is None or term_ids.size == 0:
        return None
    if term_ids.ndim != 2 or term_ids.shape[0] != n or term_ids.dtype.kind not in "iu":
        raise InputError(f"{name} must be an integer array [n, L], one row per sentence (n = {n}), "
                         f"got shape {list(term_ids.shape)} of {term_ids.dtype}")
    out = []
    for i, row in enumerate(term_ids.tolist()):
        used = len(row)
        while used and row[used - 1] == c.TERM_PAD:
            used -= 1
        terms: list = []
        alternatives: list = []
        ids: list[int] = []
        for x in row[:used]:
            if x in (c.TERM_OR, c.TERM_AND):
                if not ids or len(ids) > c.TERM_TOKENS_LIMIT:
                    raise InputError(f"{name}[{i}]: a term's rendering must hold 1 to {c.TERM_TOKENS_LIMIT} ids")
                alternatives.append(tuple(ids))
                ids = []
                if x == c.TERM_AND:
                    if len(alternatives) > c.TERM_ALTERNATIVES_LIMIT:
                        raise InputError(f"{name}[{i}]: a term has more than {c.TERM_ALTERNATIVES_LIMIT} renderings")
                    terms.append(Constraint(tuple(alternatives)))
                    alternatives = []
            elif not 0 <= x < spec.vocab or x == spec.eos_id:
                raise InputError(f"{name}[{i}] holds {x}: not a target id in [0, {spec.vocab}) other than the "
                                 f"end-of-sentence id {spec.eos_id}, nor a separator")
            else:
                ids.append(x)
        if ids or alternatives:
            raise InputError(f"{name}[{i}]: its last term must end with {c.TERM_AND} ({name} layout: nmtserve.contract)")
        if len(terms) > c.TERMS_LIMIT:
            raise InputError(f"{name}[{i}] has {len(terms)} terms, more than the {c.TERMS_LIMIT} allowed")
        out.append(tuple(terms))
    return out if any(out) else None


def check_constraints(constraints: Sequence[Sequence[Constraint]] | None, prefixes: Sequence[TargetPrefix] | None,
                      options: SearchOptions) -> None:
    """What ``generate`` refuses of a request's terms: a sentence with forced tokens too (a target
    prefix, a multilingual model's language token), a model whose search rule is not transformers'."""
    if not constraints:
        return
    if options.rule != "transformers":
        raise InputError(f"{c.TERMS}: this model decodes with {options.rule}'s beam search rule, which takes no "
                         "terms (transformers' rule does)")
    both = [i for i, (t, p) in enumerate(zip(constraints, prefixes or [], strict=False)) if t and p.tokens]
    if both:
        raise InputError(f"{c.TERMS} of sentence {both[0]}: a sentence with terms cannot have forced tokens "
                         f"({c.TARGET_PREFIX}, a multilingual model's target language)")


def parse_bool(name: str, value: np.ndarray | None, default: bool) -> bool:
    """A [1] boolean input (an integer 0/1 is taken too); ``default`` when it is left out."""
    if value is None or value.size == 0:
        return default
    if value.size != 1 or value.dtype.kind not in "biu":
        raise InputError(f"{name} must hold one boolean, got shape {list(value.shape)} of {value.dtype}")
    return bool(value.reshape(-1)[0])


def parse_split(value: np.ndarray | None) -> bool:
    """SPLIT_SENTENCES [1] (bool; default true)."""
    return parse_bool(c.SPLIT_SENTENCES, value, default=True)


def join_pieces(texts: np.ndarray, scores: np.ndarray, counts: np.ndarray | None,
                gaps: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Per TEXT element, its pieces' translations [m, k] joined with their gaps and their scores
    summed: ([n, k] object, [n, k] float32). Without a layout (a caller of ``detokenize`` with its
    own ids) each row is one element."""
    m, k = texts.shape
    if counts is None and gaps is None:
        return texts, scores.astype(np.float32)
    if counts is None or gaps is None or counts.ndim != 1 or gaps.ndim != 1 or counts.dtype.kind not in "iu":
        raise InputError(f"{c.PIECES} [n] and {c.GAPS} [m + n] go together")
    if counts.min(initial=1) < 1 or int(counts.sum()) != m or gaps.size != m + counts.size:
        raise InputError(f"{c.PIECES} must add up to the {m} rows and {c.GAPS} hold {m} + {counts.size} strings")
    spaces = _gap_texts(gaps)
    n = counts.size
    out = np.empty((n, k), dtype=np.object_)
    summed = np.zeros((n, k), dtype=np.float32)
    row = gap = 0
    for i, count in enumerate(counts.tolist()):
        for j in range(k):
            parts = [spaces[gap]]
            for r in range(count):
                piece = texts[row + r, j]
                parts += [piece.decode("utf-8") if isinstance(piece, bytes) else str(piece), spaces[gap + r + 1]]
            out[i, j] = "".join(parts).encode("utf-8")
        summed[i] = scores[row: row + count].sum(axis=0)
        row += count
        gap += count + 1
    return out, summed


def _gap_texts(gaps: np.ndarray) -> list[str]:
    """GAPS as text (tokenize's layout: the text around each element's sentences)."""
    return [g.decode("utf-8") if isinstance(g, bytes) else str(g) for g in gaps]


def alignments(tokenizer, src: np.ndarray | None, src_len: np.ndarray | None, ids: np.ndarray, lengths: np.ndarray,
               align: np.ndarray | None, counts: np.ndarray | None, gaps: np.ndarray | None) -> np.ndarray:
    """ALIGNMENT [n]: per TEXT element, its best translation's word alignment in the Pharaoh
    format (``nmtserve.alignment``), its sentences' pairs shifted by the words before them (the
    gaps between sentences hold words only where the text had some between them); all "" when
    the request did not ask (``align`` empty) or the source ids did not come along."""
    from ..alignment import format_pharaoh, piece_words, shift, word_alignment

    m = ids.shape[0]
    n = m if counts is None else counts.size
    out = np.full(n, b"", dtype=np.object_)
    if (align is None or align.ndim != 3 or align.shape[:2] != ids.shape[:2] or align.shape[2] == 0 or src is None
            or src_len is None or src.shape[0] != m or src_len.shape != (m,) or not hasattr(tokenizer, "source_pieces")):
        return out
    spaces = [""] * (m + n) if gaps is None else _gap_texts(gaps)
    per_element = [1] * m if counts is None else counts.tolist()
    row = gap = 0
    for i, count in enumerate(per_element):
        pairs: list[tuple[int, int]] = []
        s_off = t_off = len(spaces[gap].split())
        for r in range(row, row + count):
            s_words = piece_words(tokenizer.source_pieces(src[r, : int(src_len[r])].tolist()))
            n_ids = int(lengths[r, 0]) if lengths.shape[1] else 0
            t_pieces = tokenizer.target_pieces(ids[r, 0, :n_ids].tolist())
            t_words = piece_words(t_pieces)
            pairs += shift(word_alignment(s_words, t_pieces, align[r, 0, :n_ids].tolist()), s_off, t_off)
            between = len(spaces[gap + r - row + 1].split())
            s_off += max(s_words, default=-1) + 1 + between
            t_off += max(t_words, default=-1) + 1 + between
        out[i] = format_pharaoh(pairs).encode("utf-8")
        row += count
        gap += count + 1
    return out


@dataclass
class ElementQuality:
    """What detokenize reads off one TEXT element's best translation beyond its text:
    ``covered``, the source words some target token attended to (None without alignments);
    ``words``, each target word's confidence and ``sentence``, the lowest of its sentences'
    confidences (None and -1 without CONFIDENCE). Word positions count over the whole element."""

    covered: set[int] | None
    words: list[float] | None
    sentence: float


def qualities(tokenizer, src: np.ndarray | None, src_len: np.ndarray | None, ids: np.ndarray, lengths: np.ndarray,
              align: np.ndarray | None, logprobs: np.ndarray | None, counts: np.ndarray | None,
              gaps: np.ndarray | None) -> list[ElementQuality]:
    """Per TEXT element, its ``ElementQuality`` (``nmtserve.confidence``), its sentences' word
    positions shifted by the words before them as in ``alignments``; a word between sentences
    (rare: the gaps hold whitespace) has confidence 1."""
    from ..alignment import piece_words
    from ..confidence import covered_words, sentence_confidence, word_confidences

    m = ids.shape[0]
    n = m if counts is None else counts.size
    aligned = (align is not None and align.ndim == 3 and align.shape[:2] == ids.shape[:2] and align.shape[2] > 0
               and src is not None and src_len is not None and src.shape[0] == m and src_len.shape == (m,)
               and hasattr(tokenizer, "source_pieces"))
    confident = (logprobs is not None and logprobs.ndim == 3 and logprobs.shape[:2] == ids.shape[:2]
                 and logprobs.shape[2] > 0 and hasattr(tokenizer, "target_pieces"))
    if not aligned and not confident:
        return [ElementQuality(None, None, -1.0)] * n
    spaces = [""] * (m + n) if gaps is None else _gap_texts(gaps)
    per_element = [1] * m if counts is None else counts.tolist()
    out = []
    row = gap = 0
    for count in per_element:
        covered: set[int] = set()
        words: list[float] = [1.0] * len(spaces[gap].split())
        lowest = 1.0
        s_off = len(spaces[gap].split())
        for r in range(row, row + count):
            n_ids = int(lengths[r, 0]) if lengths.shape[1] else 0
            t_pieces = tokenizer.target_pieces(ids[r, 0, :n_ids].tolist())
            between = len(spaces[gap + r - row + 1].split())
            if aligned and src is not None and src_len is not None and align is not None:
                s_pieces = tokenizer.source_pieces(src[r, : int(src_len[r])].tolist())
                covered |= {s_off + w for w in covered_words(s_pieces, t_pieces, align[r, 0, :n_ids].tolist())}
                s_off += max(piece_words(s_pieces), default=-1) + 1 + between
            if confident and logprobs is not None:
                token_logprobs = logprobs[r, 0, :n_ids].astype(np.float64).tolist()
                words += word_confidences(t_pieces, token_logprobs) + [1.0] * between
                lowest = min(lowest, sentence_confidence(token_logprobs))
        out.append(ElementQuality(covered if aligned else None, words if confident else None,
                                  lowest if confident else -1.0))
        row += count
        gap += count + 1
    return out


def _prefix_ids(tokenizer, text: str, language: str | None) -> list[int]:
    """A target prefix's tokens, without the specials a target sentence carries."""
    if language is not None:  # a multilingual tokenizer: the text's pieces alone
        return list(tokenizer.encode_text(text))
    return list(tokenizer.encode_target(text))[:-1]  # X </s>


def parse_prefixes(forced: np.ndarray | None, lengths: np.ndarray | None, prompts: np.ndarray | None, n: int,
                   spec: ModelSpec) -> list[TargetPrefix] | None:
    """``FORCED_IDS [n, F]``, ``FORCED_LEN [n]``, ``PROMPT_LEN [n]`` (optional, all or none) as one
    ``TargetPrefix`` per sentence; None when absent or empty."""
    if forced is None and lengths is None and prompts is None:
        return None
    if forced is None or lengths is None or prompts is None or forced.ndim != 2 or lengths.shape != (n,) or prompts.shape != (n,) or forced.shape[0] != n:
        raise InputError(f"{c.FORCED_IDS} [n, F], {c.FORCED_LEN} [n] and {c.PROMPT_LEN} [n] go together, "
                         f"one row per sentence (n = {n})")
    if forced.dtype.kind not in "iu" or lengths.dtype.kind not in "iu" or prompts.dtype.kind not in "iu":
        raise InputError(f"{c.FORCED_IDS}, {c.FORCED_LEN} and {c.PROMPT_LEN} must be integers")
    if not lengths.any():
        return None
    out = []
    for i, (m, p) in enumerate(zip(lengths.tolist(), prompts.tolist(), strict=True)):
        if not 0 <= p <= m <= min(forced.shape[1], spec.max_target_len - 1):
            raise InputError(f"{c.FORCED_LEN}[{i}] = {m} / {c.PROMPT_LEN}[{i}] = {p}: need 0 <= PROMPT_LEN <= "
                             f"FORCED_LEN <= {min(forced.shape[1], spec.max_target_len - 1)}")
        ids = forced[i, :m]
        if m and (ids.min() < 0 or ids.max() >= spec.vocab or spec.eos_id in ids.tolist()):
            raise InputError(f"{c.FORCED_IDS}[{i}] holds an id outside the target vocabulary or the end-of-sentence id")
        out.append(TargetPrefix(tuple(ids.tolist()), prompt=p))
    return out


def results_to_arrays(results: Sequence[Sequence[Hypothesis]], k: int, pad_id: int) -> dict[str, np.ndarray]:
    """n-best lists -> OUT_IDS [n, k, T] (EOS kept; detokenize stops at it), OUT_LEN, OUT_SCORE,
    OUT_ALIGN [n, k, T] (each token's source position; [n, k, 0] when no hypothesis has one),
    OUT_LOGPROB [n, k, T] (each token's log-probability; [n, k, 0] when no hypothesis has them)."""
    n = len(results)
    width = max((len(h.tokens) for hyps in results for h in hyps), default=1) or 1
    aligned = any(h.alignment is not None for hyps in results for h in hyps)
    align = np.full((n, k, width if aligned else 0), -1, dtype=np.int32)
    confident = any(h.token_logprobs is not None for hyps in results for h in hyps)
    logprobs = np.zeros((n, k, width if confident else 0), dtype=np.float32)
    ids = np.full((n, k, width), pad_id, dtype=np.int32)
    lengths = np.zeros((n, k), dtype=np.int32)
    scores = np.full((n, k), -np.inf, dtype=np.float32)
    for i, hyps in enumerate(results):
        for j, h in enumerate(hyps[:k]):
            toks = h.tokens
            ids[i, j, : len(toks)] = toks
            lengths[i, j] = len(toks)
            scores[i, j] = h.score
            if aligned and h.alignment is not None:
                align[i, j, : len(h.alignment)] = h.alignment
            if confident and h.token_logprobs is not None:
                logprobs[i, j, : len(h.token_logprobs)] = h.token_logprobs
    return {c.OUT_IDS: ids, c.OUT_LEN: lengths, c.OUT_SCORE: scores, c.OUT_ALIGN: align, c.OUT_LOGPROB: logprobs}


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
_INVALID_MESSAGE = re.compile(rf"{c.SENTENCE_IN_MESSAGE.pattern}|\b({'|'.join([*c.OPTION_INPUTS, c.TERMS])})\b")
_UNAVAILABLE_MESSAGE = re.compile(r"server busy|shutting down|is not at ready state|has no available versions")


def status_of_message(message: str) -> str | None:
    """The status an error message of nmtserve's models means by the contract's wording:
    "INVALID_ARG" (a sentence named TEXT[i], or an option by its input's name), "UNAVAILABLE"
    (overloaded, stopping, or a model not ready), None (nothing certain)."""
    if _INVALID_MESSAGE.search(message):
        return "INVALID_ARG"
    if _UNAVAILABLE_MESSAGE.search(message):
        return "UNAVAILABLE"
    return None
