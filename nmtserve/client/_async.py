"""AsyncTranslator: the asyncio shell (tasks keep requests in flight)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from types import TracebackType
from typing import Any, overload

from . import _constants as C
from ._base import BaseTranslator
from ._batching import Chunk, Job, failed_translation, isolate_rejected
from ._protocol import (
    Options,
    Translation,
    decode_document_response,
    decode_response,
    encode_request,
)
from ._replicas import AsyncReplicaTransport
from ._retry import Deadline
from ._transports import ASYNC_TRANSPORTS
from .errors import InvalidInputError


class AsyncTranslator(BaseTranslator):
    """Translator for asyncio code: same parameters and behaviour, awaitable methods.

    Uses tritonclient.grpc.aio / tritonclient.http.aio; connections are opened on first use
    in the running event loop, so create it anywhere but use it from one loop. ``concurrency``
    bounds the requests in flight across all concurrent calls on this translator.
    """

    def _open(self) -> None:
        self._transport: Any = self._make_transport(ASYNC_TRANSPORTS, AsyncReplicaTransport)
        self._slots = asyncio.Semaphore(self.concurrency)
        self._closed = False

    # -- translating

    @overload
    async def translate(
        self,
        texts: str,
        *,
        beam_size: int | None = ...,
        max_length: int | None = ...,
        length_penalty: float | None = ...,
        num_hypotheses: int = ...,
        source_lang: str | None = ...,
        target_lang: str | None = ...,
        on_error: str = ...,
    ) -> Translation: ...

    @overload
    async def translate(
        self,
        texts: Iterable[str],
        *,
        beam_size: int | None = ...,
        max_length: int | None = ...,
        length_penalty: float | None = ...,
        num_hypotheses: int = ...,
        source_lang: str | None = ...,
        target_lang: str | None = ...,
        on_error: str = ...,
    ) -> list[Translation]: ...

    async def translate(
        self,
        texts: str | Iterable[str],
        *,
        beam_size: int | None = None,
        max_length: int | None = None,
        length_penalty: float | None = None,
        num_hypotheses: int = 1,
        source_lang: str | None = None,
        target_lang: str | None = None,
        on_error: str = "raise",
    ) -> Translation | list[Translation]:
        """See Translator.translate."""
        stream = self.translate_iter(
            texts,
            beam_size=beam_size,
            max_length=max_length,
            length_penalty=length_penalty,
            num_hypotheses=num_hypotheses,
            source_lang=source_lang,
            target_lang=target_lang,
            on_error=on_error,
        )
        results = [translation async for translation in stream]
        return results[0] if isinstance(texts, str) else results

    def translate_iter(
        self,
        texts: str | Iterable[str],
        *,
        beam_size: int | None = None,
        max_length: int | None = None,
        length_penalty: float | None = None,
        num_hypotheses: int = 1,
        source_lang: str | None = None,
        target_lang: str | None = None,
        on_error: str = "raise",
    ) -> AsyncIterator[Translation]:
        """See Translator.translate_iter (``async for`` over it)."""
        batches = self.translate_batches(
            texts, Options(beam_size, max_length, length_penalty, num_hypotheses, source_lang, target_lang), on_error
        )
        return _flatten(batches)

    def translate_batches(
        self, texts: str | Iterable[str], options: Options, on_error: str = "raise"
    ) -> AsyncIterator[list[Translation]]:
        """See Translator.translate_batches (``async for`` over it)."""
        self._check_open()
        job, deadline = self._start(texts, options, on_error)
        return self._run(job, options, deadline)

    async def _run(
        self, job: Job, options: Options, deadline: Deadline
    ) -> AsyncIterator[list[Translation]]:
        inflight: dict[asyncio.Task[list[Translation]], Chunk] = {}
        try:
            while True:
                while len(inflight) < self.concurrency:
                    chunk = job.next_chunk()
                    if chunk is None:
                        break
                    task = asyncio.create_task(self._send(chunk, options, deadline, job.isolate))
                    inflight[task] = chunk
                ready = job.pop_ready()
                if ready:
                    yield ready
                if not inflight and job.all_planned:
                    break
                done, _ = await asyncio.wait(
                    inflight, timeout=deadline.remaining(), return_when=asyncio.FIRST_COMPLETED
                )
                if not done:
                    raise deadline.error(job.emitted, job.seen)
                for task in done:
                    job.complete(inflight.pop(task), task.result())
            assert job.finished
        finally:
            for task in inflight:
                task.cancel()
            # Collect them, so that none is left with an exception nobody retrieved.
            await asyncio.gather(*inflight, return_exceptions=True)

    async def _send(
        self, chunk: Chunk, options: Options, deadline: Deadline, isolate: bool = False
    ) -> list[Translation]:
        try:
            return await self._send_once(chunk, options, deadline)
        except InvalidInputError as exc:
            if not isolate:
                raise
            parts, merge = isolate_rejected(chunk, exc, failed_translation(options))
            return merge([await self._send(p, options, deadline, True) for p in parts])

    async def translate_document(
        self,
        text: str,
        format: str = "plain",
        *,
        beam_size: int | None = None,
        max_length: int | None = None,
        length_penalty: float | None = None,
        source_lang: str | None = None,
        target_lang: str | None = None,
    ) -> str:
        """Translate a whole document in one request (see Translator.translate_document)."""
        self._check_open()
        request, deadline = self._document_request(
            text, format, Options(beam_size, max_length, length_penalty, 1, source_lang, target_lang)
        )
        attempts = self._attempts(deadline, None, self._transport)
        while True:
            try:
                async with self._slots:
                    result = await self._transport.infer(self.document_model, request, attempts.timeout())
            except Exception as exc:
                await asyncio.sleep(attempts.failed(exc))
                continue
            return decode_document_response(result)[0]

    async def _send_once(
        self, chunk: Chunk, options: Options, deadline: Deadline
    ) -> list[Translation]:
        request = encode_request(chunk.texts, options)
        attempts = self._attempts(deadline, chunk, self._transport)
        while True:
            timeout = attempts.timeout()
            try:
                async with self._slots:
                    result = await self._transport.infer(self.model, request, timeout)
            except Exception as exc:
                await asyncio.sleep(attempts.failed(exc))
                continue
            return decode_response(result, len(chunk), options)

    async def pairs(self) -> list[str]:
        """The language pairs the server translates ("en-fr", ...); [] for a server of one model
        without pairs (``nmtserve export`` without ``--pair``)."""
        self._check_open()
        attempts = self._attempts(Deadline(self.deadline), None, self._transport)
        while True:
            try:
                config = await self._transport.config(self.model, attempts.timeout())
            except Exception as exc:
                await asyncio.sleep(attempts.failed(exc))
                continue
            return self._pairs_from(config)

    # -- health

    async def is_ready(self) -> bool:
        """Whether the server and the model are ready now (never raises)."""
        try:
            return await self._transport.probe(self.model, C.PROBE_TIMEOUT) == (True, True)
        except Exception:
            return False

    async def wait_until_ready(self, timeout: float = C.DEFAULT_READY_TIMEOUT) -> float:
        """See Translator.wait_until_ready."""
        self._check_open()
        wait = self._readiness(timeout, self._transport)
        while True:
            try:
                if wait.ready(await self._transport.probe(self.model, wait.probe_timeout())):
                    return wait.elapsed
            except Exception as exc:
                wait.failed(exc)
            await asyncio.sleep(wait.pause())

    # -- lifetime

    async def close(self) -> None:
        """Close the connections (safe to call twice)."""
        if not self._closed:
            self._closed = True
            await self._transport.close()

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"{type(self).__name__} is closed")

    async def __aenter__(self) -> AsyncTranslator:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


async def _flatten(batches: AsyncIterator[list[Translation]]) -> AsyncIterator[Translation]:
    try:
        async for batch in batches:
            for translation in batch:
                yield translation
    finally:
        await batches.aclose()  # type: ignore[attr-defined]  # closing early cancels the rest
