"""Request planning and in-order assembly: the part of a translate() call that does no I/O.

A ``Job`` reads the input lazily, a window at a time; in each window blank lines get their
(empty) result at once, the other sentences are sorted by length and cut into requests of at
most ``batch_size`` sentences and ``max_batch_tokens`` padded tokens. The shells send the
requests, hand each response back with ``complete()``, and take the results in input order from
``pop_ready()`` as soon as the prefix before them is complete.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace

from . import _constants as C
from ._protocol import Options, Translation
from .errors import InvalidInputError


@dataclass(frozen=True, slots=True)
class Chunk:
    """The sentences of one request: their positions in the input and their UTF-8 bytes."""

    indices: tuple[int, ...]
    texts: tuple[bytes, ...]

    def __len__(self) -> int:
        return len(self.indices)

    def part(self, start: int, stop: int) -> Chunk:
        return Chunk(self.indices[start:stop], self.texts[start:stop])


ON_ERROR = ("raise", "return")

# An error naming one of these inputs (not one sentence's entry of it, as TARGET_LANG[2]) is the
# whole request's: an option or a language out of range fails every sentence alike.
_REQUEST_WIDE = re.compile(rf"\b({'|'.join([*C.OPTION_INPUT_NAMES, C.INPUT_SOURCE_LANG, C.INPUT_TARGET_LANG])})\b(?!\[)")


def sentence_fault(error: InvalidInputError) -> bool:
    """Whether a rejection can be a sentence's (so ``on_error="return"`` looks for it), not the
    request's options or languages (then the call fails once, whatever ``on_error`` says)."""
    return error.index is not None or not _REQUEST_WIDE.search(error.message)


def isolate_rejected(
    chunk: Chunk, error: InvalidInputError, failed: Translation
) -> tuple[list[Chunk], Callable[[list[list[Translation]]], list[Translation]]]:
    """A request the server rejected for its input, taken apart (``on_error="return"``).

    Returns the requests to send instead and how to merge their results into the chunk's: the
    sentence the server named (``error.index``) gets ``failed`` with the error and the others
    are sent again; when no sentence was named, the chunk is halved until the culprit is alone.
    """
    if len(chunk) == 1:
        return [], lambda _: [replace(failed, error=_for_sentence(error, chunk.indices[0]))]
    if error.index is not None and error.index in chunk.indices:
        at = chunk.indices.index(error.index)
        parts = [p for p in (chunk.part(0, at), chunk.part(at + 1, len(chunk))) if len(p)]

        def merge(results: list[list[Translation]]) -> list[Translation]:
            flat = [t for part in results for t in part]
            return [*flat[:at], replace(failed, error=error), *flat[at:]]

        return parts, merge
    half = len(chunk) // 2
    return [chunk.part(0, half), chunk.part(half, len(chunk))], (
        lambda results: [t for part in results for t in part]
    )


def failed_translation(options: Options) -> Translation:
    """What a rejected sentence gets (``error`` is filled in by ``isolate_rejected``)."""
    return Translation("", None, [] if options.nbest else None, alignment=[] if options.alignment else None)


def _for_sentence(error: InvalidInputError, index: int) -> InvalidInputError:
    if error.index == index:
        return error
    return InvalidInputError(error.message, status=error.status, index=index, attempts=error.attempts)


def count_tokens(text: str) -> int:
    """The length used for bucketing and the token budget: whitespace-separated words (only
    the server knows the model's tokenizer; this is proportional enough to sort by)."""
    return len(text.split())


def plan_window(
    items: list[tuple[int, str]], batch_size: int, max_batch_tokens: int | None
) -> list[Chunk]:
    """Cut non-blank (index, text) items into requests, longest sentences first.

    Sorting puts sentences of similar length together, so a server that pads a batch to its
    longest sentence wastes little; sending the longest first keeps the slowest requests from
    being the last ones. A request's token cost is its padded size, sentences x longest, the
    shape the server computes on. A sentence longer than the budget goes alone.
    """
    lengths = {i: count_tokens(text) for i, text in items}
    ordered = sorted(items, key=lambda item: (-lengths[item[0]], item[0]))
    chunks: list[Chunk] = []
    current: list[tuple[int, str]] = []
    longest = 0
    for index, text in ordered:
        if current:
            full = len(current) >= batch_size
            over = max_batch_tokens is not None and (len(current) + 1) * longest > max_batch_tokens
            if full or over:
                chunks.append(_chunk(current))
                current = []
        if not current:
            longest = max(lengths[index], 1)
        current.append((index, text))
    if current:
        chunks.append(_chunk(current))
    return chunks


def _chunk(items: list[tuple[int, str]]) -> Chunk:
    return Chunk(tuple(i for i, _ in items), tuple(t.encode("utf-8") for _, t in items))


class Job:
    """One translate() call's bookkeeping: what to send next, what is done, what to return."""

    def __init__(
        self,
        texts: Iterable[str],
        *,
        batch_size: int,
        max_batch_tokens: int | None,
        blank: Translation,
        on_error: str = "raise",
    ) -> None:
        if on_error not in ON_ERROR:
            raise ValueError(f"on_error must be one of {', '.join(ON_ERROR)}, got {on_error!r}")
        #: Rejected sentences become failed results (``isolate_rejected``) instead of an error.
        self.isolate = on_error == "return"
        self._source: Iterator[tuple[int, str]] = enumerate(texts)
        self._batch_size = batch_size
        self._max_batch_tokens = max_batch_tokens
        self._window = batch_size * C.SORT_WINDOW_REQUESTS
        self._blank = blank
        self._planned: deque[Chunk] = deque()
        self._results: dict[int, Translation] = {}
        self._seen = 0  # sentences read from the input
        self._emitted = 0  # sentences handed back, in order
        self._exhausted = False

    @property
    def seen(self) -> int:
        return self._seen

    @property
    def emitted(self) -> int:
        return self._emitted

    @property
    def all_planned(self) -> bool:
        """The input is exhausted and every request has been handed out."""
        return self._exhausted and not self._planned

    @property
    def finished(self) -> bool:
        """Everything read, sent, answered and handed back."""
        return self._exhausted and not self._planned and self._emitted == self._seen

    def next_chunk(self) -> Chunk | None:
        """The next request to send, or None when the input is exhausted."""
        while not self._planned and not self._exhausted:
            self._plan_next_window()
        return self._planned.popleft() if self._planned else None

    def complete(self, chunk: Chunk, translations: list[Translation]) -> None:
        # decode_response guarantees the count; strict guards the bookkeeping itself.
        for index, translation in zip(chunk.indices, translations, strict=True):
            assert index not in self._results, f"input {index} answered twice"
            self._results[index] = translation

    def pop_ready(self) -> list[Translation]:
        """The results that complete the in-order prefix, removed from the job."""
        ready = []
        while self._emitted in self._results:
            ready.append(self._results.pop(self._emitted))
            self._emitted += 1
        return ready

    def _plan_next_window(self) -> None:
        items: list[tuple[int, str]] = []
        for index, text in self._source:
            self._seen = index + 1
            if not isinstance(text, str):
                raise TypeError(f"texts[{index}] is {type(text).__name__}, expected str")
            if not text or text.isspace():
                self._results[index] = self._blank
                continue
            try:
                _check_encodable(index, text)
            except InvalidInputError as exc:
                if not self.isolate:
                    raise
                self._results[index] = Translation("", None, self._blank.hypotheses, error=exc)
                continue
            items.append((index, text))
            if len(items) >= self._window:
                break
        else:
            self._exhausted = True
        self._planned.extend(plan_window(items, self._batch_size, self._max_batch_tokens))


def _check_encodable(index: int, text: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        # Lone surrogates: what decoding bytes with errors="surrogateescape" leaves behind (U+DC80
        # to U+DCFF stand for the bytes 0x80 to 0xFF that were not UTF-8), or a caller's own.
        code = ord(text[exc.start])
        what = (f"byte 0x{code - 0xDC00:02X}" if 0xDC80 <= code <= 0xDCFF
                else f"a lone surrogate U+{code:04X}")
        raise InvalidInputError(
            f"text is not valid UTF-8: {what} at character {exc.start + 1} (save the input as UTF-8, "
            "e.g. `iconv -f latin1 -t utf-8`)",
            index=index,
        ) from None
