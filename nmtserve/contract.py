"""The serving contract: every tensor the Triton models exchange, with its type and shape.

The one place these names are written. The repository writer builds the configs from it, the
Triton models and the protocol checks read it, and so does the client. The table for users is
in docs/contract.md. Dependency-free, so the client can import it.

Ensemble ``translate``: TEXT and the optional decoding options in; TRANSLATION, SCORE and the
n-best lists out. All models use ``max_batch_size: 0``, so one request carries any number of
sentences. Inside the ensemble the steps are tokenize -> generate -> detokenize.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# -- translate (the ensemble users call)
DEFAULT_MODEL = "translate"  # its name, unless the export names it otherwise (--name)
TEXT = "TEXT"  # [n] UTF-8 sentences
BEAM_SIZE = "BEAM_SIZE"  # [1] optional: beam width, 1..max_beam (default: the export's)
MAX_LENGTH = "MAX_LENGTH"  # [1] optional: max generated tokens (default: 2 * source tokens + 10)
LENGTH_PENALTY = "LENGTH_PENALTY"  # [1] optional: score = sum log p / length ** alpha (default 1)
NUM_HYPOTHESES = "NUM_HYPOTHESES"  # [1] optional: n-best size k, 1..beam (default 1)
# [1] optional bool, default false: a sentence's search stops as soon as beam_size hypotheses have
# finished (transformers' early_stopping=True, near CTranslate2's patience=1 rule) instead of when
# no running beam can still beat them: fewer steps; a few translations differ (docs/contract.md)
EARLY_STOPPING = "EARLY_STOPPING"
# [1] optional bool, default false: fill ALIGNMENT (the decoder's attention carried with the beams;
# the step reads it only for the sentences that ask)
ALIGN = "ALIGN"
# [1] optional bool, default false: fill SENTENCE_CONFIDENCE and WORD_CONFIDENCE (each token's
# log-probability carried with the beams; only the sentences that ask carry them)
CONFIDENCE = "CONFIDENCE"
# Repetition controls (docs/contract.md#repetition-controls; nmtserve.decoding.search has the rules):
# [1] optional int32, default 0 (off): a token that would repeat an n-gram of the hypothesis has
# probability 0 (transformers' and CTranslate2's no_repeat_ngram_size)
NO_REPEAT_NGRAM_SIZE = "NO_REPEAT_NGRAM_SIZE"
# [1] optional fp32 in (0, REPETITION_PENALTY_LIMIT], default 1 (off): a token already in the
# hypothesis gets log p * penalty (transformers' beam-search repetition_penalty)
REPETITION_PENALTY = "REPETITION_PENALTY"
# [1] optional int32, default the export's (0 but for fairseq's 1): EOS may not end a hypothesis of
# fewer generated tokens (CTranslate2's min_decoding_length; MAX_LENGTH is its max_decoding_length)
MIN_LENGTH = "MIN_LENGTH"
DISABLE_UNK = "DISABLE_UNK"  # [1] optional bool, default false: the unknown token is never generated
# [s, L] optional int32: target token id sequences that may not appear (CTranslate2's
# suppress_sequences), one per row, padded with -1; at most SUPPRESS_SEQUENCES_LIMIT rows
SUPPRESS_SEQUENCES = "SUPPRESS_SEQUENCES"
TRANSLATION = "TRANSLATION"  # [n] best translation, same order as TEXT
SCORE = "SCORE"  # [n] its length-normalised log-probability
NBEST_TRANSLATION = "NBEST_TRANSLATION"  # [n, k]
NBEST_SCORE = "NBEST_SCORE"  # [n, k]
# [n] optional: per sentence, text its translation must start with ("" = none); forced after the
# target language token, returned as part of the translation (CTranslate2's target_prefix)
TARGET_PREFIX = "TARGET_PREFIX"
# [n] optional (or [1] for every sentence): per TEXT element, terminology its translation must
# contain, as a JSON array whose items are a target term (a string) or its alternative renderings
# (a list of strings, any one will do): '[["chat", "chatte"], "maison"]'; "" = none. Decoded by
# constrained beam search (nmtserve.decoding.constraints); an element the length limit ended
# before a term was met says so in WARNING. At most TERMS_LIMIT terms, TERM_ALTERNATIVES_LIMIT
# alternatives each, TERM_TOKENS_LIMIT target tokens per alternative. An item may also be an
# object naming the source words it renders, {"source": "car park", "target": "parking"} (what a
# glossary gives, nmtserve.glossary): in an element that SPLIT_SENTENCES cuts into several
# sentences (or that is cut to fit the token limit) each sentence gets the terms whose source
# words it holds; an element of several sentences with a term without its source is refused.
# Not with TARGET_PREFIX on the same element, nor on a multilingual model (its forced target
# language token)
TERMS = "TERMS"
# [1] optional bool, default true: a TEXT element of several sentences is translated sentence by
# sentence (the document path's segmenter) and put back together with its own spacing; false for
# callers who send one sentence per element
SPLIT_SENTENCES = "SPLIT_SENTENCES"
# [n] int32 out: how many times TEXT[i] was cut inside a sentence to fit the model's token limit
# (at a clause, else a word break; each piece translated alone); 0 for nearly every sentence
CUTS = "CUTS"
# [n] string out: "" or why the translation of TEXT[i] may leave part of it out or be wrong ("may be
# incomplete: the source's number '3' is not in the translation", "may be wrong: the model is unsure of it ..."):
# a source number missing, much shorter than the model's usual length ratio, or a score far under
# the model's usual (nmtserve.coverage; the ratio and the floor measured at export)
WARNING = "WARNING"
# [n] string out: with ALIGN, the best translation's word alignment to TEXT[i] in the Pharaoh format
# ("0-0 1-2 2-1": source word - target word, each counted from 0 in the whitespace-separated words
# of TEXT[i] and of TRANSLATION[i]); each target word once, aligned to the source word its first
# token attended to most (none when that was the end-of-sentence or a language token); "" without ALIGN
ALIGNMENT = "ALIGNMENT"
# [n] fp32 out: with CONFIDENCE, the translation's geometric mean token probability, exp(mean log p)
# (an element of several sentences: its lowest); -1 without (nmtserve.confidence)
SENTENCE_CONFIDENCE = "SENTENCE_CONFIDENCE"
# [n] string out: with CONFIDENCE, per whitespace-separated word of TRANSLATION[i] the probability
# of its least likely piece, two decimals ("0.98 0.41 1.00"); "" without (nmtserve.confidence)
WORD_CONFIDENCE = "WORD_CONFIDENCE"
# [n] string out: the source words (positions from 0 over the whitespace-separated words of
# TEXT[i]) that may be missing from the translation: content words no target token attended to
# (nmtserve.coverage.omitted_words), "3 7"; "" when none, and without the decoder's alignments
MISSING_WORDS = "MISSING_WORDS"

# -- between the ensemble's steps (and for callers of `generate` with their own ids)
SRC_IDS = "SRC_IDS"  # [n, S] int32, padded
SRC_LEN = "SRC_LEN"  # [n] int32
OUT_IDS = "OUT_IDS"  # [n, k, T] int32
OUT_LEN = "OUT_LEN"  # [n, k] int32
OUT_SCORE = "OUT_SCORE"  # [n, k] fp32
OUT_ALIGN = "OUT_ALIGN"  # [n, k, T] int32: per token of OUT_IDS its source position (T = 0 without ALIGN)
OUT_LOGPROB = "OUT_LOGPROB"  # [n, k, T] fp32: per token of OUT_IDS its log-probability (T = 0 without CONFIDENCE)
# Per sentence, the tokens forced after the decoder start token (the target language token, then
# the target prefix): FORCED_IDS [n, F] int32 padded, FORCED_LEN [n], and PROMPT_LEN [n], how many
# of them are a decoder prompt not counted in lengths (nmtserve.decoding.search.TargetPrefix)
FORCED_IDS = "FORCED_IDS"
FORCED_LEN = "FORCED_LEN"
PROMPT_LEN = "PROMPT_LEN"
# Per sentence, its TERMS as target token ids (tokenize -> generate, or a caller of `generate` with
# its own ids): TERM_IDS [n, L] int32, a row per sentence holding each term's alternatives, an
# alternative followed by TERM_OR (another rendering of the same term comes next) or TERM_AND (the
# term ends; the next one comes next), the row padded with TERM_PAD; a row of padding: no terms.
# [[5, 6, TERM_OR, 9, TERM_AND, 12, TERM_AND, TERM_PAD]] = (5 6 or 9) and 12.
TERM_IDS = "TERM_IDS"
TERM_PAD, TERM_OR, TERM_AND = -1, -2, -3
# How tokenize cut the TEXT elements (protocol.Pieces): PIECES [n] int32, the sentences of each
# element, and GAPS [m + n] strings, the text around them, for detokenize to put them together
PIECES = "PIECES"
GAPS = "GAPS"

# -- languages. A repository of several pair models (``nmtserve export --pair SRC-TGT``) serves
# `translate` as a router to the pair's own ensemble (`translate_en_fr`, ...); a multilingual
# model (NLLB-200, M2M100, mBART-50) takes the languages in its own ensemble, per request
# (SOURCE_LANG) and per sentence (TARGET_LANG [n]).
SOURCE_LANG = "SOURCE_LANG"  # [1] optional: source language code ("en", "fra_Latn")
TARGET_LANG = "TARGET_LANG"  # [1] or [n] (multilingual models: one per sentence) optional: target language code
# A request parameter (not a tensor): the comma-separated names of the outputs the request will
# read, "TRANSLATION,SCORE,WARNING". The models then compute and send those alone (WARNING's checks
# are ~0.1-0.2 ms of a served sentence); without it every output comes back. A parameter, and not
# Triton's requested outputs, because an ensemble asks its steps for every output they map and
# hands its steps the request's parameters. The nmtserve client sends it; a name that is not an
# output of the model is refused (INVALID_ARG).
OUTPUTS_PARAMETER = "outputs"
PAIRS_PARAMETER = "pairs"  # the router's config parameter: "en-fr,de-fr"
# A one-model ensemble's config parameter: the pair its checkpoint names ("en-fr"; "unknown" for
# a side it does not name), for listing only: such an ensemble takes no language inputs.
PAIR_PARAMETER = "pair"
UNKNOWN_LANGUAGE = "unknown"
LANGUAGES_PARAMETER = "languages"  # a multilingual ensemble's config parameter: its model codes, "eng_Latn,fra_Latn"
PAIR_PATTERN = r"[A-Za-z][A-Za-z0-9]{0,7}(?:_[A-Za-z0-9]{1,8})?"  # one side: "en", "pt_BR"


def pair_suffix(pair: str) -> str:
    """The model-name suffix of a pair: "en-fr" -> "_en_fr" ("" for a repository without pairs)."""
    return "" if not pair else "_" + pair.replace("-", "_")


# -- translate_document (a whole document in, its translation out; see nmtserve.documents)
DOCUMENT = "DOCUMENT"  # [1] UTF-8 text of the document, or the bytes of a file (FILE_FORMATS)
FORMAT = "FORMAT"  # [1] optional: "plain" (default), "markdown", "html", "xml" (DeepL's tag_handling=xml rules)
#                    or one of FILE_FORMATS; TRANSLATION is then the translated file's bytes
SENTENCES = "SENTENCES"  # [1] int32 out: how many sentences were translated
TEXT_FORMATS = ("plain", "markdown", "html", "xml")
# Files, sent and answered as bytes (nmtserve.documents._files): format -> (file name extensions,
# media type, what it is).
FILE_FORMATS: dict[str, tuple[tuple[str, ...], str, str]] = {
    "docx": ((".docx",), "application/vnd.openxmlformats-officedocument.wordprocessingml.document", "Word document"),
    "pptx": ((".pptx",), "application/vnd.openxmlformats-officedocument.presentationml.presentation",
             "PowerPoint presentation"),
    "xlsx": ((".xlsx",), "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
             "Excel workbook (its text cells)"),
    "odt": ((".odt",), "application/vnd.oasis.opendocument.text", "OpenDocument text"),
    "odp": ((".odp",), "application/vnd.oasis.opendocument.presentation", "OpenDocument presentation"),
    "ods": ((".ods",), "application/vnd.oasis.opendocument.spreadsheet", "OpenDocument spreadsheet (its text cells)"),
    "epub": ((".epub",), "application/epub+zip", "EPUB e-book"),
    "xliff": ((".xlf", ".xliff"), "application/xliff+xml", "XLIFF 1.2 or 2.x"),
    "po": ((".po", ".pot"), "text/x-gettext-translation", "gettext catalogue"),
    "srt": ((".srt",), "application/x-subrip", "SubRip subtitles"),
    "vtt": ((".vtt",), "text/vtt", "WebVTT subtitles"),
}
DOCUMENT_FORMATS = TEXT_FORMATS + tuple(FILE_FORMATS)
_TEXT_EXTENSIONS = {".txt": "plain", ".text": "plain", ".md": "markdown", ".markdown": "markdown",
                    ".html": "html", ".htm": "html", ".xhtml": "html", ".xml": "xml"}


def document_format_of(filename: str) -> str | None:
    """The format a file name's extension names (case-insensitive): "a.DOCX" -> "docx"; None if none."""
    lower = filename.lower()
    for fmt, (extensions, _, _) in FILE_FORMATS.items():
        if lower.endswith(extensions):
            return fmt
    dot = lower.rfind(".")
    return _TEXT_EXTENSIONS.get(lower[dot:]) if dot >= 0 else None


DOCUMENT_MODEL_SUFFIX = "_document"  # the model beside the ensemble: translate -> translate_document
# The document model's config parameter: whether the model carries inline placeholders, as the
# export measured it (nmtserve.export.markup): "keep" sends them, "drop" sends sentences without.
INLINE_MARKUP_PARAMETER = "inline_markup"
INLINE_MARKUP_KEEP, INLINE_MARKUP_DROP = "keep", "drop"
# "1": the repository's translate serves ALIGN/ALIGNMENT (exports since alignments existed), so
# "drop" puts inline markup back by word alignment instead of dropping it.
ALIGNMENTS_PARAMETER = "alignments"

LENGTH_PENALTY_LIMIT = 10.0  # |LENGTH_PENALTY| accepted
REPETITION_PENALTY_LIMIT = 10.0  # REPETITION_PENALTY accepted in (0, this]
SUPPRESS_SEQUENCES_LIMIT = 64  # SUPPRESS_SEQUENCES rows (each costs a few array operations per step)
# TERMS per element: a constrained sentence steps in Python over its full log-probs, and dynamic
# beam allocation shares the beam between 2 * terms + 1 banks, so many terms starve each bank.
TERMS_LIMIT = 16
TERM_ALTERNATIVES_LIMIT = 8  # renderings of one term
TERM_TOKENS_LIMIT = 32  # target tokens of one rendering


def sentence(i: int) -> str:
    """How an error names a request's sentence: ``TEXT[3]`` (its place in the request)."""
    return f"{TEXT}[{i}]"


# ``sentence(i)`` found in a message; group 1 is i (the client maps it back to an input line).
SENTENCE_IN_MESSAGE = re.compile(rf"\b{TEXT}\[(\d+)\]")


@dataclass(frozen=True)
class Tensor:
    name: str
    triton_type: str  # config.pbtxt data_type
    dims: tuple[int, ...]  # -1: any size
    optional: bool = False


# The repetition controls, beside the older options; sentence requests only (a document's are the defaults).
CONTROL_INPUTS = {NO_REPEAT_NGRAM_SIZE: "TYPE_INT32", REPETITION_PENALTY: "TYPE_FP32", MIN_LENGTH: "TYPE_INT32",
                  DISABLE_UNK: "TYPE_BOOL", SUPPRESS_SEQUENCES: "TYPE_INT32"}
OPTION_INPUTS = {BEAM_SIZE: "TYPE_INT32", MAX_LENGTH: "TYPE_INT32", LENGTH_PENALTY: "TYPE_FP32",
                 NUM_HYPOTHESES: "TYPE_INT32", EARLY_STOPPING: "TYPE_BOOL", ALIGN: "TYPE_BOOL", CONFIDENCE: "TYPE_BOOL",
                 **CONTROL_INPUTS}
OPTION_DIMS = {SUPPRESS_SEQUENCES: (-1, -1)}  # the others are [1]
OPTIONS = [Tensor(name, t, OPTION_DIMS.get(name, (1,)), optional=True) for name, t in OPTION_INPUTS.items()]

LANGUAGES = [Tensor(SOURCE_LANG, "TYPE_STRING", (1,), optional=True),
             Tensor(TARGET_LANG, "TYPE_STRING", (-1,), optional=True)]
TARGET_PREFIXES = Tensor(TARGET_PREFIX, "TYPE_STRING", (-1,), optional=True)
TERM_TEXTS = Tensor(TERMS, "TYPE_STRING", (-1,), optional=True)
SPLIT = Tensor(SPLIT_SENTENCES, "TYPE_BOOL", (1,), optional=True)
TRANSLATE_INPUTS = [Tensor(TEXT, "TYPE_STRING", (-1,)), *OPTIONS, TARGET_PREFIXES, SPLIT, TERM_TEXTS]
# The pair router's and a multilingual ensemble's inputs.
LANGUAGE_INPUTS = [*TRANSLATE_INPUTS, *LANGUAGES]
ROUTER_INPUTS = LANGUAGE_INPUTS
TRANSLATE_OUTPUTS = [Tensor(TRANSLATION, "TYPE_STRING", (-1,)), Tensor(SCORE, "TYPE_FP32", (-1,)),
                     Tensor(NBEST_TRANSLATION, "TYPE_STRING", (-1, -1)), Tensor(NBEST_SCORE, "TYPE_FP32", (-1, -1)),
                     Tensor(CUTS, "TYPE_INT32", (-1,)), Tensor(WARNING, "TYPE_STRING", (-1,)),
                     Tensor(ALIGNMENT, "TYPE_STRING", (-1,)), Tensor(SENTENCE_CONFIDENCE, "TYPE_FP32", (-1,)),
                     Tensor(WORD_CONFIDENCE, "TYPE_STRING", (-1,)), Tensor(MISSING_WORDS, "TYPE_STRING", (-1,))]
TOKENIZE_INPUTS = [Tensor(TEXT, "TYPE_STRING", (-1,)), TARGET_PREFIXES, SPLIT, TERM_TEXTS]
MULTILINGUAL_TOKENIZE_INPUTS = [*TOKENIZE_INPUTS, *LANGUAGES]
SOURCE_TENSORS = [Tensor(SRC_IDS, "TYPE_INT32", (-1, -1)), Tensor(SRC_LEN, "TYPE_INT32", (-1,))]
FORCED_TENSORS = [Tensor(FORCED_IDS, "TYPE_INT32", (-1, -1)), Tensor(FORCED_LEN, "TYPE_INT32", (-1,)),
                  Tensor(PROMPT_LEN, "TYPE_INT32", (-1,))]
LAYOUT_TENSORS = [Tensor(PIECES, "TYPE_INT32", (-1,)), Tensor(GAPS, "TYPE_STRING", (-1,)), Tensor(CUTS, "TYPE_INT32", (-1,))]
TERM_TENSORS = [Tensor(TERM_IDS, "TYPE_INT32", (-1, -1))]
TOKENIZE_OUTPUTS = [*SOURCE_TENSORS, *FORCED_TENSORS, *TERM_TENSORS, *LAYOUT_TENSORS]
# A caller of `generate` with its own ids may leave the forced tokens and the terms out.
GENERATE_INPUTS = [*SOURCE_TENSORS, *OPTIONS,
                   *(Tensor(t.name, t.triton_type, t.dims, optional=True) for t in (*FORCED_TENSORS, *TERM_TENSORS))]
GENERATE_OUTPUTS = [Tensor(OUT_IDS, "TYPE_INT32", (-1, -1, -1)), Tensor(OUT_LEN, "TYPE_INT32", (-1, -1)),
                    Tensor(OUT_SCORE, "TYPE_FP32", (-1, -1)), Tensor(OUT_ALIGN, "TYPE_INT32", (-1, -1, -1)),
                    Tensor(OUT_LOGPROB, "TYPE_FP32", (-1, -1, -1))]
# ``text_in_generate`` (RepositoryOptions): the ensemble is one step, generate, which takes the
# ensemble's TEXT-side inputs and answers its outputs itself (tokenize and detokenize in its own
# process); SRC_IDS/SRC_LEN stay for callers with their own ids (then the OUT_* come back).
TEXT_IN_GENERATE_PARAMETER = "text_in_generate"
TEXT_INPUT_NAMES = (TEXT, TARGET_PREFIX, SPLIT_SENTENCES, TERMS, SOURCE_LANG, TARGET_LANG)
TEXT_GENERATE_INPUTS = [*(Tensor(t.name, t.triton_type, t.dims, optional=True) for t in GENERATE_INPUTS),
                        Tensor(TEXT, "TYPE_STRING", (-1,), optional=True), TARGET_PREFIXES, SPLIT, TERM_TEXTS]
TEXT_GENERATE_OUTPUTS = [*GENERATE_OUTPUTS, *TRANSLATE_OUTPUTS]
# Without the layout (a caller with its own ids) each row is one element; with the request's TEXT
# (and a multilingual model's languages, and its TERMS) each element's WARNING is checked.
# OUT_ALIGN and the source ids (tokenize's SRC_IDS/SRC_LEN) give ALIGNMENT.
DETOKENIZE_INPUTS = [*(Tensor(t.name, t.triton_type, t.dims, optional=t.name in (OUT_ALIGN, OUT_LOGPROB))
                       for t in GENERATE_OUTPUTS),
                     *(Tensor(t.name, t.triton_type, t.dims, optional=True) for t in (*LAYOUT_TENSORS, *SOURCE_TENSORS)),
                     Tensor(TEXT, "TYPE_STRING", (-1,), optional=True), *LANGUAGES, TERM_TEXTS]
DETOKENIZE_OUTPUTS = TRANSLATE_OUTPUTS
# The n-best inputs and outputs make no sense for a whole document: one translation comes back.
DOCUMENT_INPUTS = [Tensor(DOCUMENT, "TYPE_STRING", (1,)), Tensor(FORMAT, "TYPE_STRING", (1,), optional=True),
                   *(t for t in OPTIONS if t.name not in (NUM_HYPOTHESES, ALIGN, CONFIDENCE, *CONTROL_INPUTS)), *LANGUAGES]
DOCUMENT_OUTPUTS = [Tensor(TRANSLATION, "TYPE_STRING", (1,)), Tensor(SENTENCES, "TYPE_INT32", (1,))]
