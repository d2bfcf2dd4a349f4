"""In-flight batching: decoding steps of concurrent requests run as one batch.

Sentences (not requests) are the unit: a request's sentences join the running batch at the
next step boundary as capacity allows, and each leaves the moment its search is done, so a
short request never waits for a long one and one large request cannot block small ones for
its whole duration. Every sentence runs the shared ``SentenceSearch``.

The self-attention cache is one preallocated time-major pool per layer,
``(T_pool, R_pool, h, d_k)``. Each step of the running batch writes at one global time ``g``;
a sentence that joined at global time ``start`` owns ``K`` cache rows and a small table of
which row holds each hypothesis' ancestor at each of its local times (cache indirection, see
``nmtserve.model.transformer``). The graph sees the window ``[t_lo, g)`` of the pool (a
contiguous slice) and a mask of each sentence's own times inside it. When ``g`` reaches the end
of the pool, the live window is copied to the front (once per ~``T_pool / 2`` steps).

The cross-attention memory of the running sentences of one beam width sits in one set of
buffers, a row per sentence, in the order the step feeds them (``_MemoryGroup``): a step reads
``buffer[:b]`` in place, a sentence that leaves is replaced by the last row, one that joins is
written once into the next. Nothing is restacked per step.

The pool and the cross-attention memory live in the runtime's ``arrays`` backend
(``nmtserve.runtime.arrays``): NumPy for the CPU runtimes, CuPy on a GPU, where they never leave
the device. A step hands the runtime small host tables (ids, positions, ``cache_rows``, masks)
and gets back host log-probabilities for the search and device K/V, which it scatters into the
pool on the device. The log-probs are reduced where they are to each hypothesis' best
``2K + 1`` tokens (``search.preselect``) before they go to the host for the search: with an
opus-mt vocabulary that is ~3,000 times less than the full ``(b, K, V)`` array.

Torch-free and Triton-free: the runtime is anything with ``spec``, ``encode(src_ids)`` and
``run_step(feeds)`` (``OnnxModel`` in-process, ``TensorRTModel`` on a GPU, or BLS calls to the
``decoder`` model).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from ..decoding.search import Candidates, Hypothesis, SearchOptions, SentenceSearch, advance
from ..decoding.search import preselect as _preselect
from ..graphs import pad_batch
from ..runtime.arrays import HOST, ArrayBackend
from ..runtime.spec import ModelSpec

log = logging.getLogger(__name__)


class StepRuntime(Protocol):
    """``encode`` returns per-layer memory K/V in the runtime's arrays (``arrays``; NumPy when the
    runtime has none). ``run_step`` takes host or backend arrays and returns ``log_probs`` and the
    new K/V per layer, all in backend arrays (``nmtserve.graphs`` order)."""

    spec: ModelSpec

    def encode(self, src_ids: np.ndarray) -> tuple[list, list]: ...

    def run_step(self, feeds: dict) -> list: ...


Callback = Callable[[list[list[Hypothesis]] | None, BaseException | None], None]


@dataclass(eq=False)
class _Request:
    sources: list[list[int]]
    options: SearchOptions
    callback: Callback
    results: list[list[Hypothesis] | None] = field(default_factory=list)
    remaining: int = 0
    failed: bool = False
    next_sentence: int = 0  # sentences before this one have been admitted
    cancelled: Callable[[], bool] | None = None

    def __post_init__(self) -> None:
        self.results = [None] * len(self.sources)
        self.remaining = len(self.sources)


@dataclass(eq=False)
class _Sentence:
    request: _Request
    index: int
    search: SentenceSearch
    rows: np.ndarray  # (K,) cache rows this sentence writes
    start: int  # global time of its first step
    table: np.ndarray  # (K, max_len) ancestor row at each local time
    src_len: int
    mem_row: int = -1  # its row in its beam width's _MemoryGroup


class EngineStopped(RuntimeError):
    pass


class InflightBatcher:
    """Runs the decode loop in a background thread; ``submit`` from any thread."""

    def __init__(self, runtime: StepRuntime, max_sentences: int | None = None, max_beam: int = 8,
                 pool_slack: int = 64, preselect: bool | None = None):
        spec = runtime.spec
        self.runtime, self.spec = runtime, spec
        self.max_sentences = max_sentences or spec.max_batch
        self.max_beam = max_beam
        # A sentence lives at most max_target_len steps, so with this much slack the live window
        # always fits and compaction (a copy of the live window) runs at most every ~64 steps.
        self.pool_time = spec.max_target_len + pool_slack + 2
        # Rows for max_sentences at the served default beam; wider beams admit fewer at once.
        rows = self.max_sentences * max(1, min(max_beam, spec.beam_size))
        self._float = getattr(runtime, "_float", np.float32)
        self.arrays: ArrayBackend = getattr(runtime, "arrays", HOST)
        shape = (self.pool_time, rows, spec.heads, spec.d_k)
        self.arrays.activate()
        self.past_keys = [self.arrays.zeros(shape, self._float) for _ in range(spec.layers)]
        self.past_values = [self.arrays.zeros(shape, self._float) for _ in range(spec.layers)]
        self.free_rows: deque[int] = deque(range(rows))
        self.g = 0  # global time of the next step
        self.active: list[_Sentence] = []
        self.pending: deque[_Request] = deque()
        self._cond = threading.Condition()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._groups: dict[int, _MemoryGroup] = {}  # beam width -> its running sentences
        # Preselect when it shrinks what the search reads by > 4x (always, for real vocabularies).
        self.preselect = preselect if preselect is not None else spec.vocab > 4 * (2 * max_beam + 1)
        self.stats = {"steps": 0, "sentences": 0, "requests": 0, "max_batch_seen": 0, "preselect_declined": 0}

    # ---- public API -----------------------------------------------------------------
    def start(self) -> InflightBatcher:
        self._thread = threading.Thread(target=self._loop, name="nmtserve-batcher", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread:
            self._thread.join(timeout)

    def submit(self, sources: Sequence[Sequence[int]], options: SearchOptions, callback: Callback,
               cancelled: Callable[[], bool] | None = None) -> None:
        """Queue sentences (id lists ending with EOS); ``callback(results, error)`` runs in the engine thread."""
        if options.beam_size > self.max_beam:
            raise ValueError(f"beam_size {options.beam_size} exceeds this server's maximum {self.max_beam}")
        too_long = [i for i, src in enumerate(sources) if len(src) > self.spec.max_source_len]
        if too_long:  # the encoder's profile (TensorRT) and positions end there
            raise ValueError(f"source {too_long[0]} has more than max_source_len={self.spec.max_source_len} tokens")
        request = _Request([list(s) for s in sources], options, callback, cancelled=cancelled)
        if not request.sources:
            callback([], None)
            return
        with self._cond:
            if self._stopping:
                raise EngineStopped("the decoding engine is shutting down")
            self.pending.append(request)
            self._cond.notify()

    def translate(self, sources: Sequence[Sequence[int]], options: SearchOptions, timeout: float | None = None) -> list[list[Hypothesis]]:
        """Blocking convenience wrapper (tests, benchmarks)."""
        done = threading.Event()
        box: dict = {}

        def callback(results, error):
            box["results"], box["error"] = results, error
            done.set()

        self.submit(sources, options, callback)
        if not done.wait(timeout):
            raise TimeoutError("translation did not finish in time")
        if box["error"] is not None:
            raise box["error"]
        return box["results"]

    # ---- the loop -----------------------------------------------------------------
    def _loop(self) -> None:
        self.arrays.activate()  # CUDA device and stream are per thread
        while True:
            with self._cond:
                while not self._stopping and not self.pending and not self.active:
                    self._cond.wait()
                if self._stopping:
                    self._fail_all(EngineStopped("the decoding engine is shutting down"))
                    return
            try:
                self._admit()
                if self.active:
                    self._step()
            except Exception as exc:  # a runtime failure fails the running requests, not the server
                log.exception("decoding step failed")
                self._fail_all(exc)

    def _fail_all(self, exc: BaseException) -> None:
        requests = {s.request for s in self.active}
        with self._cond:
            requests |= set(self.pending)
            self.pending.clear()
        for s in self.active:
            self.free_rows.extend(s.rows.tolist())
        self.active = []
        self._groups.clear()
        for r in requests:
            if not r.failed:
                r.failed = True
                r.callback(None, exc)

    def _admit(self) -> None:
        admitted: list[tuple[_Request, int]] = []
        rows_needed = 0
        with self._cond:
            capacity = self.max_sentences - len(self.active)
            while self.pending and capacity > 0:
                request = self.pending[0]
                if request.cancelled and request.cancelled():
                    self.pending.popleft()
                    request.failed = True
                    request.callback(None, CancelledError("request cancelled"))
                    continue
                k = request.options.beam_size
                if len(self.free_rows) < rows_needed + k:
                    break
                rows_needed += k
                admitted.append((request, request.next_sentence))
                request.next_sentence += 1
                capacity -= 1
                if request.next_sentence == len(request.sources):
                    self.pending.popleft()
        if not admitted:
            return
        if self.g + 1 >= self.pool_time:
            self._compact()
        sources = [r.sources[i] for r, i in admitted]
        src = pad_batch(sources, self.spec.pad_id, np.int32)
        try:
            keys, values = self.runtime.encode(src)
        except Exception as exc:  # fails the requests being admitted, not the ones decoding
            log.exception("encoding %d sentences failed", len(sources))
            self._drop({r for r, _ in admitted}, exc)
            return
        for row, (request, i) in enumerate(admitted):
            n = len(sources[row])
            search = SentenceSearch(request.options, n, bos_id=self.spec.bos_id, eos_id=self.spec.eos_id)
            k = request.options.beam_size
            rows = np.array([self.free_rows.popleft() for _ in range(k)], dtype=np.int64)
            sentence = _Sentence(request=request, index=i, search=search, rows=rows, start=self.g,
                                 table=np.repeat(rows[:, None], max(search.max_len, 1), axis=1), src_len=n)
            self.active.append(sentence)
            self._group(k, n).add(sentence, [k_[row] for k_ in keys], [v_[row] for v_ in values])
        self.stats["max_batch_seen"] = max(self.stats["max_batch_seen"], len(self.active))

    def _compact(self) -> None:
        lo = min((s.start for s in self.active), default=self.g)
        if lo == 0:
            raise RuntimeError("decoder cache pool exhausted")
        span = self.g - lo
        for buf in (*self.past_keys, *self.past_values):
            buf[:span] = buf[lo : self.g].copy()  # on the backend's device
        for s in self.active:
            s.start -= lo
        self.g = span

    def _group(self, beam: int, src_len: int) -> _MemoryGroup:
        """The memory group of a beam width with room for one more sentence of ``src_len``
        source tokens. Buffers grow on demand (rows doubling up to ``max_sentences``), so beam
        widths that few requests use do not each hold memory for a full batch."""
        group = self._groups.get(beam)
        full = group is not None and len(group.members) == group.capacity
        if group is None or group.width < src_len or full:
            width = _MemoryGroup.round_width(max(src_len, group.widest() if group else 0), self.spec.max_source_len)
            capacity = group.capacity if group is not None else min(8, self.max_sentences)
            if full:
                capacity = min(2 * capacity, self.max_sentences)
            self._groups[beam] = group = _MemoryGroup(self.arrays, self.spec, self._float, capacity, width,
                                                      previous=group)
        return group

    def _drop_cancelled(self) -> None:
        cancelled = {s.request for s in self.active if s.request.cancelled and s.request.cancelled()}
        if cancelled:
            self._drop(cancelled, CancelledError("request cancelled"))

    def _drop(self, requests: set[_Request], error: BaseException) -> None:
        """Fail these requests alone: their running sentences leave (rows freed), their queued
        sentences are forgotten, every other request keeps decoding."""
        keep = []
        for s in self.active:
            if s.request in requests:
                self._release(s)
            else:
                keep.append(s)
        self.active = keep
        with self._cond:
            self.pending = deque(r for r in self.pending if r not in requests)
        for r in requests:
            if not r.failed:
                r.failed = True
                r.callback(None, error)

    def _step(self) -> None:
        self._drop_cancelled()
        if not self.active:
            return
        g = self.g
        finished: list[_Sentence] = []
        for k in list(self._groups):
            memory = self._groups[k] = self._groups[k].fitted()
            group = memory.members  # in memory-row order: every per-sentence input follows it
            t_lo = min(s.start for s in group)
            t_len = max(g - t_lo, 1)  # >= 1: a fresh batch attends a masked dummy slot
            b = len(group)
            cache_rows = np.empty((b, k, t_len), dtype=np.int32)
            past_mask = np.zeros((b, t_len), dtype=bool)
            for row, s in enumerate(group):
                off, t = s.start - t_lo, s.search.t
                cache_rows[row] = s.rows[0]
                cache_rows[row, :, off : off + t] = s.table[:, :t]
                past_mask[row, off : off + t] = True
            src_mask = np.arange(memory.width)[None, :] < np.array([s.src_len for s in group])[:, None]
            feeds = {
                "input_ids": np.stack([s.search.tokens for s in group]).astype(np.int32),
                "position": np.array([s.search.t for s in group], dtype=np.int32),
                "cache_rows": cache_rows,
                "past_mask": past_mask,
                "src_mask": src_mask,
            }
            for i in range(self.spec.layers):
                feeds[f"past_key.{i}"] = self.past_keys[i][t_lo : t_lo + t_len]
                feeds[f"past_value.{i}"] = self.past_values[i][t_lo : t_lo + t_len]
                feeds[f"memory_key.{i}"] = memory.keys[i][:b]  # rows [0, b): contiguous, read in place
                feeds[f"memory_value.{i}"] = memory.values[i][:b]
            out = self.runtime.run_step(feeds)
            write_rows = self.arrays.asarray(np.concatenate([s.rows for s in group]))
            n = self.spec.layers
            for i in range(n):  # scattered into the pool where it lives (on the GPU: a device kernel)
                self.past_keys[i][g, write_rows] = out[1 + i].reshape(-1, *out[1 + i].shape[2:])
                self.past_values[i][g, write_rows] = out[1 + n + i].reshape(-1, *out[1 + n + i].shape[2:])
            for s in group:
                s.table[:, s.search.t] = s.rows
            searches = [s.search for s in group]
            advance(searches, self._to_search(out[0], k))
            for s in group:
                if s.search.done:
                    finished.append(s)
                else:
                    s.table = s.table[s.search.parents]
        self.g += 1
        self.stats["steps"] += 1
        if finished:
            done = set(map(id, finished))
            self.active = [s for s in self.active if id(s) not in done]
            for s in finished:
                self._release(s)
                self._finish(s)
        if self.active and self.g + 1 >= self.pool_time:
            self._compact()

    def _to_search(self, log_probs, beam: int) -> np.ndarray | Candidates:
        """The step's log-probs as the search reads them, on the host: each hypothesis' best
        2K + 1 tokens, picked where the array lives, or the whole array."""
        arrays = self.arrays
        if self.preselect:
            picked = _preselect(log_probs, 2 * beam + 1, arrays.xp)
            if picked is not None:
                values, tokens, ambiguous = picked
                if not bool(arrays.asnumpy(ambiguous)):
                    return Candidates(arrays.asnumpy(values), arrays.asnumpy(tokens), self.spec.vocab)
                self.stats["preselect_declined"] += 1  # a tie at the cut-off: exactness needs them all
        return arrays.asnumpy(log_probs)

    def _release(self, s: _Sentence) -> None:
        self.free_rows.extend(s.rows.tolist())
        beam = s.search.options.beam_size
        group = self._groups[beam]
        group.remove(s)
        if not group.members:
            del self._groups[beam]  # a later sentence starts a fresh group, as wide as it needs

    def _finish(self, s: _Sentence) -> None:
        request = s.request
        if request.failed:
            return
        request.results[s.index] = s.search.results()
        request.remaining -= 1
        self.stats["sentences"] += 1
        if request.remaining == 0:
            self.stats["requests"] += 1
            request.callback(request.results, None)  # type: ignore[arg-type]


class _MemoryGroup:
    """Cross-attention memory of the running sentences of one beam width, one row each.

    Per layer, buffers ``(capacity, h, d_k, width)`` / ``(capacity, h, width, d_k)`` hold the
    members' encoder outputs in rows ``[0, count)``, in ``members`` order, so a step feeds
    ``buffer[:count]`` in place: nothing is restacked per step. A sentence that leaves is
    replaced by the last row (one row copy per layer); one that joins is written into the next
    row. ``width`` covers the longest source seen; positions past a sentence's own length are
    masked (their contents are stale but finite). It grows by reallocation (in steps of 16) when a
    longer source joins and shrinks when it is more than twice what the members need (``fitted``).
    """

    def __init__(self, arrays: ArrayBackend, spec: ModelSpec, dtype, capacity: int, width: int,
                 previous: _MemoryGroup | None = None):
        self.arrays, self.spec, self.dtype, self.capacity, self.width = arrays, spec, dtype, capacity, width
        self.keys = [arrays.zeros((capacity, spec.heads, spec.d_k, width), dtype) for _ in range(spec.layers)]
        self.values = [arrays.zeros((capacity, spec.heads, width, spec.d_k), dtype) for _ in range(spec.layers)]
        self.members: list[_Sentence] = []
        if previous is not None and previous.members:
            b, w = len(previous.members), min(previous.width, width)
            for layer in range(spec.layers):
                self.keys[layer][:b, :, :, :w] = previous.keys[layer][:b, :, :, :w]
                self.values[layer][:b, :, :w] = previous.values[layer][:b, :, :w]
            self.members = previous.members

    def widest(self) -> int:
        return max((s.src_len for s in self.members), default=0)

    @staticmethod
    def round_width(need: int, limit: int) -> int:
        """Widths in steps of 16 (at most ``limit``), so that sources a little longer than the
        last do not reallocate the buffers every time."""
        return min(limit, -(-need // 16) * 16) if need else 16

    def add(self, s: _Sentence, keys: list, values: list) -> None:
        """Append ``s`` with its encoder outputs (per layer (h, d_k, S) / (h, S, d_k), S >= src_len)."""
        row, n = len(self.members), s.src_len
        for layer in range(self.spec.layers):
            self.keys[layer][row, :, :, :n] = keys[layer][:, :, :n]
            self.values[layer][row, :, :n] = values[layer][:, :n]
        s.mem_row = row
        self.members.append(s)

    def remove(self, s: _Sentence) -> None:
        row, last = s.mem_row, len(self.members) - 1
        if row != last:
            moved = self.members[last]
            for buf in (*self.keys, *self.values):
                buf[row] = buf[last]
            self.members[row], moved.mem_row = moved, row
        self.members.pop()
        s.mem_row = -1

    def fitted(self) -> _MemoryGroup:
        """This group, or a narrower copy when it is more than twice as wide as its members need
        (the decoder's cross-attention costs in proportion to the width it is given)."""
        need = self.round_width(self.widest(), self.spec.max_source_len)
        if self.width <= 2 * need:
            return self
        return _MemoryGroup(self.arrays, self.spec, self.dtype, self.capacity, need, previous=self)


class CancelledError(RuntimeError):
    pass


def wait_idle(engine: InflightBatcher, timeout: float = 5.0) -> None:
    """Test helper: wait until nothing is pending or running."""
    deadline = time.monotonic() + timeout
    while (engine.pending or engine.active) and time.monotonic() < deadline:
        time.sleep(0.01)
