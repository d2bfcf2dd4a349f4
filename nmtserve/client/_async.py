"""AsyncTranslator: the asyncio shell (tasks keep requests in flight)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Iterable
from typing import TYPE_CHECKING, Any, overload

from . import _constants as C
from ._base import BaseTranslator, Call, Flight
from ._batching import Chunk, Job, failed_translation, isolate_rejected, sentence_fault
from ._protocol import DocumentArgs, Options, TranslateArgs, Translation, document_format
from ._replicas import AsyncReplicaTransport
from ._retry import Deadline
from ._transports import ASYNC_TRANSPORTS
from .errors import InvalidInputError

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing.Unpack from Python 3.11

    from ..languages import Language


class AsyncTranslator(BaseTranslator[AsyncGenerator[list[Translation], None]]):
    """Translator for asyncio code: same parameters and behaviour, awaitable methods.

    Uses tritonclient.grpc.aio / tritonclient.http.aio; connections are opened on first use
    in the running event loop, so create it anywhere but use it from one loop. ``concurrency``
    bounds the requests in flight across all concurrent calls on this translator.
    """

    def _open(self) -> None:
        self._transport: Any = self._make_transport(ASYNC_TRANSPORTS, AsyncReplicaTransport)
        self._slots = asyncio.Semaphore(self.concurrency)

    # -- translating

    @overload
    async def translate(self, texts: str, **args: Unpack[TranslateArgs]) -> Translation: ...  # type: ignore[overload-overlap]

    @overload
    async def translate(
        self, texts: Iterable[str], **args: Unpack[TranslateArgs]
    ) -> list[Translation]: ...

    async def translate(
        self, texts: str | Iterable[str], **args: Unpack[TranslateArgs]
    ) -> Translation | list[Translation]:
        """See Translator.translate."""
        results = [translation async for translation in self.translate_iter(texts, **args)]
        return results[0] if isinstance(texts, str) else results

    def translate_iter(
        self, texts: str | Iterable[str], **args: Unpack[TranslateArgs]
    ) -> AsyncIterator[Translation]:
        """See Translator.translate_iter (``async for`` over it)."""
        return _flatten(self._batches(texts, args))

    async def translate_document(
        self, document: str | bytes, format: str | None = None, *, filename: str | None = None,
        **args: Unpack[DocumentArgs]
    ) -> str | bytes:
        """Translate a whole document or file in one request (see Translator.translate_document)."""
        return await self._perform(self._document_call(document, document_format(format, filename), args))

    async def pairs(self) -> list[str]:
        """See Translator.pairs."""
        return await self._perform(self._config_call(self._pairs_from))

    async def languages(self) -> list[Language]:
        """See Translator.languages."""
        return await self._perform(self._config_call(self._languages_from))

    async def _run(
        self, job: Job, options: Options, deadline: Deadline
    ) -> AsyncGenerator[list[Translation], None]:
        flight: Flight[asyncio.Task[list[Translation]]] = Flight(job, self.concurrency, deadline)
        try:
            while True:
                for chunk in flight.chunks_to_start():
                    flight.start(
                        asyncio.create_task(self._send(chunk, options, deadline, job.isolate)),
                        chunk,
                    )
                if ready := job.pop_ready():
                    yield ready
                if flight.idle:
                    break
                finished, _ = await asyncio.wait(
                    flight.handles,
                    timeout=deadline.remaining(),
                    return_when=asyncio.FIRST_COMPLETED,
                )
                flight.settle(finished)
            assert job.finished
        finally:
            for task in flight.handles:
                task.cancel()
            # Collect them, so that none is left with an exception nobody retrieved.
            await asyncio.gather(*flight.handles, return_exceptions=True)

    async def _send(
        self, chunk: Chunk, options: Options, deadline: Deadline, isolate: bool = False
    ) -> list[Translation]:
        try:
            return await self._perform(self._request_call(chunk, options, deadline))
        except InvalidInputError as exc:
            if not isolate or not sentence_fault(exc):
                raise
            parts, merge = isolate_rejected(chunk, exc, failed_translation(options))
            return merge([await self._send(p, options, deadline, True) for p in parts])

    async def _perform(self, call: Call) -> Any:
        """Send until the transport answers, one of ``concurrency`` slots held per attempt."""
        while True:
            try:
                async with self._slots:
                    result = await call.send(call.attempts.timeout())
            except Exception as exc:
                await asyncio.sleep(call.attempts.failed(exc))
            else:
                return call.decode(result)

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

    async def __aenter__(self) -> AsyncTranslator:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


async def _flatten(batches: AsyncGenerator[list[Translation], None]) -> AsyncIterator[Translation]:
    try:
        async for batch in batches:
            for translation in batch:
                yield translation
    finally:
        await batches.aclose()  # closing early cancels the rest
