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

Several replicas: ``Translator(["10.0.0.5:8001", "10.0.0.6:8001"])`` or
``Translator("dns:///nmtserve-headless:8001")`` spreads requests over them (fewest in flight
first), takes a failing replica out and re-sends its in-flight work to another, and puts it back
once its health check passes (``_replicas.py``). TLS: a ``grpcs://``/``https://`` URL, or
``tls=TLS(ca=..., cert=..., key=...)``.

The server contract
-------------------
The client talks to one Triton model (``translate`` unless told otherwise) over gRPC or HTTP
(KServe v2). Any server that implements the contract can be used; nmtserve's model repository
does. The tensor names are ``nmtserve.contract``; the table is in the README ("The `translate`
contract"). The client asks for the NBEST outputs only when ``num_hypotheses`` > 1, never sends
blank sentences, and reports a sentence the server names as ``TEXT[i]`` by its input position.
"""

from ..languages import Language
from . import errors
from ._async import AsyncTranslator
from ._protocol import Hypothesis, Options, Translation
from ._sync import Translator
from ._transports import TLS
from .errors import *  # noqa: F403 - the error classes, listed once in errors.__all__

__all__ = ["AsyncTranslator", "Hypothesis", "Language", "Options", "TLS", "Translation", "Translator",
           *errors.__all__]
