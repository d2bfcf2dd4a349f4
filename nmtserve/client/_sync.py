"""Translator: the blocking shell (a thread pool keeps requests in flight)."""

from __future__ import annotations

import threading
import time
from collections.abc import Generator, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, CancelledError, Future, ThreadPoolExecutor, wait
from contextlib import closing
from typing import TYPE_CHECKING, Any, overload

from . import _constants as C
from ._base import BaseTranslator, Call, Flight
from ._batching import Chunk, Job, failed_translation, isolate_rejected, sentence_fault
from ._protocol import DocumentArgs, Options, TranslateArgs, Translation, document_format
from ._replicas import ReplicaTransport
from ._retry import Deadline
from ._transports import SYNC_TRANSPORTS
from .errors import InvalidInputError

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing.Unpack from Python 3.11

    from ..languages import Language


class Translator(BaseTranslator[Generator[list[Translation], None, None]]):
    """Translate text with a Triton server that serves the nmtserve contract.

    Parameters:
        url: ``host:port`` of the server (a ``grpc://`` or ``http://`` prefix is accepted, a
            missing port is the protocol's default: 8001 for gRPC, 8000 for HTTP;
            ``grpcs://``/``https://`` turns TLS on). Several replicas: a list, or addresses
            separated by commas, or ``dns:///name:port`` for every address the name resolves
            to (re-resolved every ``resolve_interval`` seconds). Requests go to the replica
            with the fewest in flight; one that fails (unreachable, unavailable) is taken out,
            its in-flight requests go to another, and it is put back once its health check
            passes (probed after 0.5 s, then backing off to 10 s).
        protocol: ``"grpc"`` or ``"http"``.
        model: the Triton model name.
        timeout: seconds one request may take (None: no limit). A request that times out is
            not retried: it would most likely time out again, at the server's expense.
        deadline: seconds one ``translate()`` call may take in all, retries included (None: no
            limit).
        max_retries: retries of a request after a transient failure (server unavailable,
            connection refused or reset), with exponential backoff and jitter.
        batch_size: most sentences per request.
        max_batch_tokens: most padded whitespace tokens per request (sentences x the longest);
            None: no budget.
        concurrency: most requests in flight at once (across concurrent calls too).
        headers: sent with every request and health check (e.g. ``{"authorization": "Bearer
            ..."}`` for a gateway in front of the servers).
        tls: ``TLS(ca=..., cert=..., key=..., server_name=...)`` (PEM files; ``cert``/``key``
            for mutual TLS), True for TLS with the system's authorities, None: plain unless a
            URL says ``grpcs://``/``https://``.
        resolve_interval: seconds between DNS resolutions of ``dns:///`` URLs.

    ``translate("one sentence")`` returns a Translation; ``translate(lines)`` returns a list of
    the same length and order. Blank lines become empty translations without a request.
    ``on_error="raise"`` (default): a sentence the server rejects fails the call with an
    InvalidInputError naming its input position; ``"return"``: that sentence's Translation
    carries the error (``error``, ``ok``) and every other sentence is translated.
    Thread-safe; use it as a context manager or call ``close()``.
    """

    def _open(self) -> None:
        self._transport: Any = self._make_transport(SYNC_TRANSPORTS, ReplicaTransport)
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()

    # -- translating

    @overload
    def translate(self, texts: str, **args: Unpack[TranslateArgs]) -> Translation: ...  # type: ignore[overload-overlap]

    @overload
    def translate(
        self, texts: Iterable[str], **args: Unpack[TranslateArgs]
    ) -> list[Translation]: ...

    def translate(
        self, texts: str | Iterable[str], **args: Unpack[TranslateArgs]
    ) -> Translation | list[Translation]:
        """Translate one sentence (a str) or many (an iterable of str).

        Keyword arguments (``TranslateArgs``): ``beam_size``, ``max_length``,
        ``length_penalty`` (None or left out: the server's defaults), ``num_hypotheses`` (> 1
        fills each result's ``hypotheses`` with the n-best list), ``source_lang`` /
        ``target_lang`` (a server of several language pairs), ``on_error`` ("raise" or
        "return", see the class), ``split_sentences`` (default True: an input of several
        sentences is translated sentence by sentence and put back together with its own
        spacing; False sends each input to the model whole), ``early_stopping`` (True: each
        sentence's search stops once ``beam_size`` hypotheses have finished, fewer steps; a few
        translations differ from the default rule's), ``alignment`` (True: each result's
        ``alignment``, its word pairs with the input, from the decoder's attention), the
        repetition controls ``no_repeat_ngram_size``, ``repetition_penalty``, ``min_length``,
        ``disable_unk``, ``suppress_sequences`` (target token ids; docs/contract.md#repetition-controls),
        ``terms`` (terminology: one entry per input, None or a list of terms, each a str or a list
        of alternative renderings, one of which the translation must contain; a str input takes
        its own list: ``translate("I bought it.", terms=["achetée"])``; docs/contract.md#terminology).
        Raises a TranslationError subclass (see ``nmtserve.client.errors``) unless every sentence
        got its translation.
        """
        results = list(self.translate_iter(texts, **args))
        return results[0] if isinstance(texts, str) else results

    def translate_iter(
        self, texts: str | Iterable[str], **args: Unpack[TranslateArgs]
    ) -> Iterator[Translation]:
        """Like translate(), but yields the translations in input order as soon as they and all
        before them are done, and reads ``texts`` lazily (a file object works)."""
        return _flatten(self._batches(texts, args))

    def translate_document(
        self, document: str | bytes, format: str | None = None, *, filename: str | None = None,
        **args: Unpack[DocumentArgs]
    ) -> str | bytes:
        """Translate a whole document or file in one request.

        ``format``: "plain", "markdown", "html" or "xml" (``document`` a str; a str comes back),
        or a file format, "docx", "pptx", "xlsx", "odt", "odp", "ods", "epub", "xliff", "po",
        "srt" or "vtt" (``document`` the file's bytes; the translated file's bytes come back).
        Without ``format`` it is read from ``filename``'s extension, else "plain".
        The server cuts it into sentences, translates them all as one batch and puts them back:
        whitespace, Markdown structure, tags, runs of formatting, timings... are kept, and code,
        ``pre``, ``script``, ``style`` and ``translate="no"`` content is left as it is
        (docs/documents.md). Keyword arguments: translate()'s but ``num_hypotheses`` and ``on_error``.
        Retried like a sentence request; a bad document raises InvalidInputError naming the problem.
        """
        return self._perform(self._document_call(document, document_format(format, filename), args))

    def pairs(self) -> list[str]:
        """The language pairs the server translates ("en-fr", ...): a repository of pairs' list, or
        the one model's pair ("unknown" for a side its checkpoint does not name, "" from an export
        older than this); [] for a multilingual model (see languages())."""
        return self._perform(self._config_call(self._pairs_from))

    def languages(self) -> list[Language]:
        """The languages the server translates: each ``Language`` has the ``code`` to send as
        source_lang / target_lang (a multilingual model's own code, "fra_Latn", or a pair's "fr"),
        its ISO 639 code (``iso``), an English ``name`` and the codes it translates into
        (``targets``). [] for a server of one model without pairs."""
        return self._perform(self._config_call(self._languages_from))

    def _run(
        self, job: Job, options: Options, deadline: Deadline
    ) -> Generator[list[Translation], None, None]:
        flight: Flight[Future[list[Translation]]] = Flight(job, self.concurrency, deadline)
        cancelled = threading.Event()
        try:
            while True:
                for chunk in flight.chunks_to_start():
                    if flight.idle and self._can_run_inline(deadline):
                        # The only request of the call (one sentence, a short list): no thread hop.
                        job.complete(
                            chunk, self._send(chunk, options, deadline, cancelled, job.isolate)
                        )
                    else:
                        future = self._executor().submit(
                            self._send, chunk, options, deadline, cancelled, job.isolate
                        )
                        flight.start(future, chunk)
                if ready := job.pop_ready():
                    yield ready
                if flight.idle:
                    break
                flight.settle(wait(flight.handles, deadline.remaining(), FIRST_COMPLETED).done)
            assert job.finished
        finally:
            cancelled.set()
            for future in flight.handles:
                future.cancel()

    def _send(
        self,
        chunk: Chunk,
        options: Options,
        deadline: Deadline,
        cancelled: threading.Event,
        isolate: bool = False,
    ) -> list[Translation]:
        """One request, with retries; runs in a worker thread (or inline for a lone request).
        ``isolate``: a request rejected for a sentence is sent again without it."""
        try:
            return self._perform(self._request_call(chunk, options, deadline), cancelled)
        except InvalidInputError as exc:
            if not isolate or not sentence_fault(exc):
                raise
            parts, merge = isolate_rejected(chunk, exc, failed_translation(options))
            return merge([self._send(p, options, deadline, cancelled, True) for p in parts])

    def _perform(self, call: Call, cancelled: threading.Event | None = None) -> Any:
        """Send until the transport answers; ``cancelled`` (set when the translate call that
        owns the request failed or was closed) stops the retries at once."""
        while True:
            try:
                result = call.send(call.attempts.timeout())
            except Exception as exc:
                pause = call.attempts.failed(exc)
            else:
                return call.decode(result)
            if cancelled is None:
                time.sleep(pause)
            elif cancelled.wait(pause):
                raise CancelledError from None

    def _can_run_inline(self, deadline: Deadline) -> bool:
        # Waiting on a worker is what enforces a deadline the transport cannot pass on.
        return deadline.seconds is None or self._transport.per_request_timeout

    def _executor(self) -> ThreadPoolExecutor:
        with self._pool_lock:
            self._check_open()
            if self._pool is None:
                self._pool = ThreadPoolExecutor(
                    max_workers=self.concurrency, thread_name_prefix="nmtserve-client"
                )
            return self._pool

    # -- health

    def is_ready(self) -> bool:
        """Whether the server and the model are ready now (never raises)."""
        try:
            return self._transport.probe(self.model, C.PROBE_TIMEOUT) == (True, True)
        except Exception:
            return False

    def wait_until_ready(self, timeout: float = C.DEFAULT_READY_TIMEOUT) -> float:
        """Block until the server and the model are ready; return the seconds it took.

        Raises ServerUnavailableError if they are not ready within timeout, ModelNotFoundError
        as soon as the server says it does not know the model.
        """
        self._check_open()
        wait = self._readiness(timeout, self._transport)
        while True:
            try:
                if wait.ready(self._transport.probe(self.model, wait.probe_timeout())):
                    return wait.elapsed
            except Exception as exc:
                wait.failed(exc)
            time.sleep(wait.pause())

    # -- lifetime

    def close(self) -> None:
        """Stop the worker threads and close the connections (safe to call twice)."""
        with self._pool_lock:
            if self._closed:
                return
            self._closed = True
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        self._transport.close()

    def __enter__(self) -> Translator:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _flatten(batches: Generator[list[Translation], None, None]) -> Iterator[Translation]:
    with closing(batches):  # closing early cancels what is still in flight
        for batch in batches:
            yield from batch
