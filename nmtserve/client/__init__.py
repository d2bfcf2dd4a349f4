"""nmtserve's client: translate text with a Triton server, from Python or ``nmtserve translate``.

    from nmtserve.client import Translator

    with Translator("localhost:8001") as translator:
        translator.translate("Hello world.").text            # one str -> one Translation
        for t in translator.translate(lines, beam_size=5):   # a list -> a list, same order
            print(t.text, t.score)

``AsyncTranslator`` has the same surface with ``await`` (and ``async with``). Long inputs are
split into requests (``batch_size`` sentences, optionally ``max_batch_tokens``), sorted by
length so each request holds similar lengths, sent ``concurrency`` at a time, and put back in
input order; ``translate_iter`` yields results in order as they complete. Blank lines come
back as empty translations without a request. Transient failures are retried with backoff;
everything else raises a subclass of ``TranslationError`` (see ``nmtserve.client.errors``).

The server contract
-------------------
The client talks to one Triton model (``translate`` unless told otherwise) over gRPC or HTTP
(KServe v2). Any server that implements this can be used; nmtserve's model repository does.

``max_batch_size: 0`` (the model batches internally: one request carries many sentences).

Inputs:

=================  ===========  ======  =====================================================
name               type         dims    meaning
=================  ===========  ======  =====================================================
``TEXT``           TYPE_STRING  [-1]    the sentences, UTF-8, any number per request
``BEAM_SIZE``      TYPE_INT32   [1]     optional; beam width
``MAX_LENGTH``     TYPE_INT32   [1]     optional; most generated tokens per sentence
``LENGTH_PENALTY`` TYPE_FP32    [1]     optional; score = sum log p / length ** alpha
``NUM_HYPOTHESES`` TYPE_INT32   [1]     optional; k, hypotheses per sentence (default 1)
=================  ===========  ======  =====================================================

An omitted optional input means the server's default.

Outputs (n = number of sentences, k = NUM_HYPOTHESES):

=====================  ===========  ======  =================================================
name                   type         dims    meaning
=====================  ===========  ======  =================================================
``TRANSLATION``        TYPE_STRING  [n]     best translation, same count and order as TEXT
``SCORE``              TYPE_FP32    [n]     its score (higher is better)
``NBEST_TRANSLATION``  TYPE_STRING  [n, k]  the k best, best first
``NBEST_SCORE``        TYPE_FP32    [n, k]  their scores
=====================  ===========  ======  =================================================

The client asks for the NBEST outputs only when k > 1.

Errors: bad input (an empty or whitespace-only sentence, invalid UTF-8, a sentence too long, a
beam size out of range, ...) fails the whole request with Triton status INVALID_ARG (gRPC
INVALID_ARGUMENT, HTTP 400) and a message naming the problem and, for a sentence, its position
in the request as ``TEXT[i]`` (e.g. "TEXT[3] is empty"); the server keeps serving. The client
never sends blank sentences, and reports ``TEXT[i]`` as the caller's input position.
"""

from ._async import AsyncTranslator
from ._protocol import Options
from ._results import Hypothesis, Translation
from ._sync import Translator
from .errors import (
    InvalidInputError,
    ModelNotFoundError,
    ProtocolMismatchError,
    ServerError,
    ServerUnavailableError,
    TimeoutError,
    TranslationError,
)

__all__ = [
    "AsyncTranslator",
    "Hypothesis",
    "InvalidInputError",
    "ModelNotFoundError",
    "Options",
    "ProtocolMismatchError",
    "ServerError",
    "ServerUnavailableError",
    "TimeoutError",
    "Translation",
    "TranslationError",
    "Translator",
]
