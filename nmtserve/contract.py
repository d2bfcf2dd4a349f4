"""The serving contract: every tensor the Triton models exchange, with its type and shape.

The one place these names are written. The repository writer builds the configs from it, the
Triton models and the protocol checks read it, and so does the client. The table for users is
in the README ("The `translate` contract"). Dependency-free, so the client can import it.

Ensemble ``translate``: TEXT and the optional decoding options in; TRANSLATION, SCORE and the
n-best lists out. All models use ``max_batch_size: 0``, so one request carries any number of
sentences. Inside the ensemble the steps are tokenize -> generate -> detokenize.
"""

from __future__ import annotations

from dataclasses import dataclass

# -- translate (the ensemble users call)
TEXT = "TEXT"  # [n] UTF-8 sentences
BEAM_SIZE = "BEAM_SIZE"  # [1] optional: beam width, 1..max_beam (default: the export's)
MAX_LENGTH = "MAX_LENGTH"  # [1] optional: max generated tokens (default: 2 * source tokens + 10)
LENGTH_PENALTY = "LENGTH_PENALTY"  # [1] optional: score = sum log p / length ** alpha (default 1)
NUM_HYPOTHESES = "NUM_HYPOTHESES"  # [1] optional: n-best size k, 1..beam (default 1)
TRANSLATION = "TRANSLATION"  # [n] best translation, same order as TEXT
SCORE = "SCORE"  # [n] its length-normalised log-probability
NBEST_TRANSLATION = "NBEST_TRANSLATION"  # [n, k]
NBEST_SCORE = "NBEST_SCORE"  # [n, k]

# -- between the ensemble's steps (and for callers of `generate` with their own ids)
SRC_IDS = "SRC_IDS"  # [n, S] int32, padded
SRC_LEN = "SRC_LEN"  # [n] int32
OUT_IDS = "OUT_IDS"  # [n, k, T] int32
OUT_LEN = "OUT_LEN"  # [n, k] int32
OUT_SCORE = "OUT_SCORE"  # [n, k] fp32

# -- language pairs: a repository of several models (``nmtserve export --pair SRC-TGT``) serves
# `translate` as a router to the pair's own ensemble (`translate_en_fr`, ...)
SOURCE_LANG = "SOURCE_LANG"  # [1] optional: source language code ("en")
TARGET_LANG = "TARGET_LANG"  # [1] optional: target language code ("fr")
PAIRS_PARAMETER = "pairs"  # the router's config parameter: "en-fr,de-fr"
PAIR_PATTERN = r"[A-Za-z][A-Za-z0-9]{0,7}(?:_[A-Za-z0-9]{1,8})?"  # one side: "en", "pt_BR"


def pair_suffix(pair: str) -> str:
    """The model-name suffix of a pair: "en-fr" -> "_en_fr" ("" for a repository without pairs)."""
    return "" if not pair else "_" + pair.replace("-", "_")


# -- translate_document (a whole document in, its translation out; see nmtserve.documents)
DOCUMENT = "DOCUMENT"  # [1] UTF-8 text of the document
FORMAT = "FORMAT"  # [1] optional: "plain" (default), "markdown" or "html"
SENTENCES = "SENTENCES"  # [1] int32 out: how many sentences were translated
DOCUMENT_FORMATS = ("plain", "markdown", "html")
DOCUMENT_MODEL_SUFFIX = "_document"  # the model beside the ensemble: translate -> translate_document

LENGTH_PENALTY_LIMIT = 10.0  # |LENGTH_PENALTY| accepted


@dataclass(frozen=True)
class Tensor:
    name: str
    triton_type: str  # config.pbtxt data_type
    dims: tuple[int, ...]  # -1: any size
    optional: bool = False


OPTION_INPUTS = {BEAM_SIZE: "TYPE_INT32", MAX_LENGTH: "TYPE_INT32", LENGTH_PENALTY: "TYPE_FP32",
                 NUM_HYPOTHESES: "TYPE_INT32"}
OPTIONS = [Tensor(name, t, (1,), optional=True) for name, t in OPTION_INPUTS.items()]

LANGUAGES = [Tensor(SOURCE_LANG, "TYPE_STRING", (1,), optional=True),
             Tensor(TARGET_LANG, "TYPE_STRING", (1,), optional=True)]
TRANSLATE_INPUTS = [Tensor(TEXT, "TYPE_STRING", (-1,)), *OPTIONS]
ROUTER_INPUTS = [*TRANSLATE_INPUTS, *LANGUAGES]
TRANSLATE_OUTPUTS = [Tensor(TRANSLATION, "TYPE_STRING", (-1,)), Tensor(SCORE, "TYPE_FP32", (-1,)),
                     Tensor(NBEST_TRANSLATION, "TYPE_STRING", (-1, -1)), Tensor(NBEST_SCORE, "TYPE_FP32", (-1, -1))]
TOKENIZE_INPUTS = [Tensor(TEXT, "TYPE_STRING", (-1,))]
TOKENIZE_OUTPUTS = [Tensor(SRC_IDS, "TYPE_INT32", (-1, -1)), Tensor(SRC_LEN, "TYPE_INT32", (-1,))]
GENERATE_INPUTS = [*TOKENIZE_OUTPUTS, *OPTIONS]
GENERATE_OUTPUTS = [Tensor(OUT_IDS, "TYPE_INT32", (-1, -1, -1)), Tensor(OUT_LEN, "TYPE_INT32", (-1, -1)),
                    Tensor(OUT_SCORE, "TYPE_FP32", (-1, -1))]
DETOKENIZE_INPUTS = GENERATE_OUTPUTS
DETOKENIZE_OUTPUTS = TRANSLATE_OUTPUTS
# The n-best inputs and outputs make no sense for a whole document: one translation comes back.
DOCUMENT_INPUTS = [Tensor(DOCUMENT, "TYPE_STRING", (1,)), Tensor(FORMAT, "TYPE_STRING", (1,), optional=True),
                   *(t for t in OPTIONS if t.name != NUM_HYPOTHESES), *LANGUAGES]
DOCUMENT_OUTPUTS = [Tensor(TRANSLATION, "TYPE_STRING", (1,)), Tensor(SENTENCES, "TYPE_INT32", (1,))]
