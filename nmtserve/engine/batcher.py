"""In-flight batching: decoding steps of concurrent requests run as one batch.

(One job, one module of ~700 lines: admission, the per-beam groups with their cache pools and
the decode loop share the same arrays and invariants, and split apart they would pass them
around; the search itself is ``nmtserve.decoding``.)

Sentences (not requests) are the unit: a request's sentences join the running batch at the
next step boundary as capacity allows, and each leaves the moment its search is done, so a
short request never waits for a long one. Waiting requests take the free rows in turn, one
sentence each (round robin, ``_admit``): a bulk request of 100,000 sentences gets its share of
the batch, and a one-sentence request behind it starts at the next free row.

Running sentences are kept per beam width in a ``_Group``, one row each, in the order the step
feeds them; every per-sentence input of a step is a slice of the group's arrays, so a step costs
a fixed number of array operations however many sentences run (no Python per sentence):

* the search state is a ``BeamBatch`` (``nmtserve.decoding.search``);
* the self-attention cache is a preallocated time-major pool per K and V for all layers,
  ``(T_pool, R, L, h, d_k)`` with ``R = capacity * K`` rows. Each step writes at one global
  time ``g``, hypothesis ``k`` of row ``r`` into cache row ``r * K + k``: the step's new
  entries are one contiguous block ``[0, b * K)`` (a copy, no scatter). A row's ``table`` says
  which cache row held each hypothesis' ancestor at each global time (cache indirection, see
  ``nmtserve.model.transformer``); when a sentence moves to another row its history stays where
  it was written and the table keeps pointing there (a cache row is written by one hypothesis
  per time, so rows never collide). The graph sees the window ``[t_lo, g)`` of the pool (one
  contiguous slice) and a mask of each sentence's own times in it. When ``g`` reaches the end
  of the pool, the live window is copied to the front;
* the cross-attention memory of the group's sentences, a row per sentence, fed in place.

A sentence that leaves is replaced by the group's last row (one row copy per array). Groups
grow with the sentences in flight (rows double up to ``max_sentences``) and the pool's length
with the longest target they may reach, instead of being sized for the worst case up front.

The pool and the memory live in the runtime's ``arrays`` backend (``nmtserve.runtime.arrays``):
NumPy for the CPU runtimes, CuPy on a GPU, where they never leave the device. A step hands the
runtime small host tables (ids, positions, ``cache_rows``, masks) and gets back each
hypothesis' best ``2 * max_beam + 1`` tokens (chosen inside the decoder graph) for the search,
and the new K/V, which it scatters into the pool where the pool lives. A group holding a sentence
with terms (``submit(constraints=)``, per sentence like its target prefix) asks for the full
``log_probs`` instead while that sentence runs (``BeamBatch.wants_log_probs``).

With the compiled step (``pool_step``: the decoder on the group's own arrays) and one live beam
width, whole runs of steps are one call (``pool_steps``, ``_steps_compiled``): the decoder, the
search's compiled step and the ancestor table, with no Python and no GIL between steps, until
sentences are done (``park_after``: one, or an eighth of a large running batch, each waiting at most
``PARK_STEPS`` steps, uncomputed), a request is queued (``_interrupt``), the pool's window ends or
``COMPILED_STEPS`` ran. It does what the per-step path does on the same arrays in the same order:
the same bits (tests/test_native_loop.py).

Torch-free and Triton-free: the runtime is anything with ``spec``, ``encode(src_ids)`` and
``run_step(feeds) -> {name: array}`` (``OnnxModel`` in-process, ``TensorRTModel`` on a GPU, or
BLS calls to the ``decoder`` model).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from .. import defaults, graphs
from ..decoding import native
from ..decoding.constraints import Constraint
from ..decoding.search import (
    NO_PREFIX,
    BeamBatch,
    Candidates,
    Hypothesis,
    SearchOptions,
    TargetPrefix,
)
from ..graphs import pad_batch
from ..runtime.arrays import HOST, ArrayBackend
from ..runtime.spec import ModelSpec

log = logging.getLogger(__name__)


class StepRuntime(Protocol):
    """``encode`` returns per-layer memory K/V in the runtime's arrays (``arrays``; NumPy when the
    runtime has none). ``run_step`` takes host or backend arrays and returns the requested
    decoder outputs by name (``graphs.STEP_OUTPUTS`` by default), in backend arrays."""

    spec: ModelSpec

    def encode(self, src_ids: np.ndarray) -> tuple[list, list]: ...

    def run_step(self, feeds: dict, outputs: Sequence[str] = graphs.STEP_OUTPUTS) -> dict: ...


Callback = Callable[[list[list[Hypothesis]] | None, BaseException | None], None]
# A step of a group where some sentence asks for word alignments also fetches the attention.
ALIGNING_OUTPUTS = (*graphs.STEP_OUTPUTS, graphs.ATTENTION)
# The most steps one compiled call runs (``InflightBatcher._steps_compiled``): cancellations are
# looked at between calls, so a cancelled sentence costs at most this many more steps.
COMPILED_STEPS = 32
# A sentence done inside a compiled call waits there, parked (not computed, its rows untouched),
# until 1/PARK_SHARE of the running batch is done too or PARK_STEPS more steps ran: one return to
# Python retires several (each return costs ~0.3 ms of Python around the call at 64 x 4 rows,
# session 28). A lone request's sentences are retired at once (fewer than PARK_SHARE rows).
# NMTSERVE_PARK=0: each done sentence returns at once.
PARK_SHARE = 8
PARK_STEPS = 4


def park_after(rows: int) -> int:
    """How many done sentences a compiled call waits for among ``rows`` running ones."""
    return max(1, rows // PARK_SHARE)


def has_attention(runtime) -> bool:
    """Whether ``runtime``'s decoder has the ``attention`` output (runtimes say; graphs exported
    before it existed do not have it)."""
    return bool(getattr(runtime, "has_attention", False))


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
    queued_at: float = field(default_factory=time.monotonic)
    prefixes: Sequence[TargetPrefix] = ()  # per sentence; () for none
    constraints: Sequence[Sequence[Constraint]] = ()  # per sentence, its terms; () for none

    def __post_init__(self) -> None:
        self.results = [None] * len(self.sources)
        self.remaining = len(self.sources)

    def prefix(self, i: int) -> TargetPrefix:
        return self.prefixes[i] if self.prefixes else NO_PREFIX

    def terms(self, i: int) -> Sequence[Constraint]:
        return self.constraints[i] if self.constraints else ()


def check_request(sources: Sequence[Sequence[int]], options: SearchOptions, spec: ModelSpec, max_beam: int,
                  prefixes: Sequence[TargetPrefix] | None = None, attention: bool = True,
                  constraints: Sequence[Sequence[Constraint]] | None = None) -> None:
    """What a loop refuses at submit, checked before any part of a request is queued
    (``attention``: whether the runtime's decoder has the ``attention`` output)."""
    if options.beam_size > max_beam:
        raise ValueError(f"beam_size {options.beam_size} exceeds this server's maximum {max_beam}")
    if options.alignment and not attention:
        raise ValueError("this model's decoder graph has no attention output (exported before alignments "
                         "existed): re-export it with this version for word alignments")
    too_long = [i for i, src in enumerate(sources) if len(src) > spec.max_source_len]
    if too_long:  # the encoder's profile (TensorRT) and positions end there
        raise ValueError(f"source {too_long[0]} has more than max_source_len={spec.max_source_len} tokens")
    if prefixes:
        if len(prefixes) != len(sources):
            raise ValueError(f"{len(prefixes)} target prefixes for {len(sources)} sentences")
        too_long = [i for i, p in enumerate(prefixes) if len(p.tokens) >= spec.max_target_len]
        if too_long:
            raise ValueError(f"the target prefix of sentence {too_long[0]} has {len(prefixes[too_long[0]].tokens)} "
                             f"tokens, the most is {spec.max_target_len - 1} (max_target_len - 1)")
    if constraints:  # what BeamBatch.add refuses, refused before the engine thread meets it
        if len(constraints) != len(sources):
            raise ValueError(f"{len(constraints)} lists of terms for {len(sources)} sentences")
        if any(constraints) and options.rule != "transformers":
            raise ValueError(f"terms are decoded with transformers' beam search rule, not {options.rule}'s")
        both = [i for i, t in enumerate(constraints) if t and prefixes and prefixes[i].tokens]
        if both:
            raise ValueError(f"sentence {both[0]} has both terms and forced tokens (a target prefix)")


def _wait_for(submit: Callable, sources: Sequence[Sequence[int]], options: SearchOptions,
              timeout: float | None, prefixes: Sequence[TargetPrefix] | None = None,
              constraints: Sequence[Sequence[Constraint]] | None = None) -> list[list[Hypothesis]]:
    """``submit`` a request and block until its callback runs; its error is raised here."""
    done = threading.Event()
    box: dict = {}

    def callback(results, error):
        box["results"], box["error"] = results, error
        done.set()

    submit(sources, options, callback, prefixes=prefixes, constraints=constraints)
    if not done.wait(timeout):
        raise TimeoutError("translation did not finish in time")
    if box["error"] is not None:
        raise box["error"]
    return box["results"]


class EngineStopped(RuntimeError):
    pass


class RequestCancelled(RuntimeError):
    pass


class EngineBusy(RuntimeError):
    """Overload: the queue is full, or a request waited longer than the queue timeout. Retryable
    (the server answers UNAVAILABLE)."""


@dataclass(frozen=True)
class QueueLimits:
    """How much waiting work the engine holds (sentences not yet decoding), and for how long."""

    max_queued: int | None = defaults.MAX_QUEUED_SENTENCES  # sentences; None: unbounded
    timeout_s: float | None = defaults.QUEUE_TIMEOUT_S  # a request none of whose sentences started decoding by then fails

    def check(self, queued: int, more: int) -> None:
        if self.max_queued is not None and queued + more > self.max_queued:
            raise EngineBusy(f"server busy: {queued} sentences are waiting and this request adds {more}, over the "
                             f"queue limit of {self.max_queued}; retry later")


# The cache pools' headroom in steps (``_reserve``): the live window is copied to the front of a
# pool about every ``slack`` steps. 64 steps where a step's K/V are small (the demo's), fewer where
# they are not: at NLLB-200-600M's 12 layers x 1024, a step of 128 rows is 12.6 MB, and 64 steps of
# headroom were half the server's memory under load. The slack is what ``POOL_SLACK_BYTES`` holds
# at the loop's widest batch, at least ``MIN_POOL_SLACK`` steps.
POOL_SLACK_BYTES = 64 << 20
# The most memory (K and V of every layer, float32) a batch's encoder outputs take at once (_admit).
# 8 MB: NLLB-200-600M int8, the multilingual benchmark's bulk, peak 1,154 -> 1,098 MB in process
# against 32 MB, the same time (0.98x, 3 alternating pairs: the encoder's weights are read once a
# chunk, and a chunk is still ~80 tokens there); the demo and student shapes' batches fit one chunk.
ENCODE_CHUNK_BYTES = 8 << 20
MAX_POOL_SLACK, MIN_POOL_SLACK = 64, 8


def default_pool_slack(spec, rows: int, itemsize: int) -> int:
    """The pool headroom in steps for ``rows`` hypotheses of ``spec``'s K/V cache."""
    per_step = 2 * rows * spec.layers * spec.heads * spec.d_k * itemsize
    return max(MIN_POOL_SLACK, min(MAX_POOL_SLACK, POOL_SLACK_BYTES // max(per_step, 1)))


class InflightBatcher:
    """Runs the decode loop in a background thread; ``submit`` from any thread."""

    def __init__(self, runtime: StepRuntime, max_sentences: int | None = None, max_beam: int = graphs.DEFAULT_MAX_BEAM,
                 pool_slack: int | None = None, limits: QueueLimits | None = None):
        spec = runtime.spec
        self.limits = limits or QueueLimits()
        self.runtime, self.spec = runtime, spec
        self.max_sentences = max_sentences or spec.max_batch
        self.max_beam = max_beam
        # Hypotheses for max_sentences at the served default beam; wider beams admit fewer at once.
        self.max_rows = self.max_sentences * max(1, min(max_beam, spec.beam_size))
        self._float = getattr(runtime, "_float", np.float32)
        self.slack = pool_slack if pool_slack is not None else default_pool_slack(spec, self.max_rows, np.dtype(self._float).itemsize)
        self.arrays: ArrayBackend = getattr(runtime, "arrays", HOST)
        self.arrays.activate()
        # The compiled step's own entry on the pools (``NativeDecoder.run_pool``): no feeds built,
        # the new K/V written in place; ``None`` where the step is ONNX Runtime's or on a device.
        self.pool_step = getattr(runtime, "pool_step", None) if self.arrays is HOST else None
        # Its steps with no Python between them (``NativeDecoder.run_steps``: the decoder, the
        # compiled search and the ancestor table in one call, until a sentence is done or a request
        # arrives: ``_interrupt``), for one live beam width whose search allows it; NMTSERVE_NATIVE_LOOP=0: off.
        compiled_loop = os.environ.get("NMTSERVE_NATIVE_LOOP", "1") != "0"
        self.pool_steps: Callable[..., int] | None = (
            getattr(runtime, "pool_steps", None) if self.pool_step is not None and compiled_loop else None)
        # The repository's restricted vocabularies (runtime/vocabulary.py; an export's opt-in) where
        # the compiled host step applies them, else None: every sentence decodes with the whole vocabulary.
        self.vocabularies = getattr(runtime, "vocabularies", None) if self.pool_step is not None else None
        self._interrupt = np.zeros(1, np.int32)  # set when a request is queued or the engine stops
        self.park_steps = PARK_STEPS if os.environ.get("NMTSERVE_PARK", "1") != "0" else 0
        self.pool_time = 0  # steps the groups' cache pools hold (_reserve)
        self.g = 0  # global time of the next step
        self.pending: deque[_Request] = deque()
        self._cond = threading.Condition()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._groups: dict[int, _Group] = {}  # beam width -> its running sentences
        # Counters since start; "peak_running" is the largest running batch since take_peak().
        # "request_seconds": queue + decode time of every answered request, summed (its average
        # is request_seconds / requests).
        self.stats: dict[str, float] = {"steps": 0, "sentences": 0, "requests": 0, "request_seconds": 0.0,
                                         "tokens": 0, "max_batch_seen": 0, "peak_running": 0}

    # ---- public API -----------------------------------------------------------------
    def start(self) -> InflightBatcher:
        self._thread = threading.Thread(target=self._loop, name="nmtserve-batcher", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        with self._cond:
            self._stopping = True
            self._interrupt[0] = 1
            self._cond.notify_all()
        if self._thread:
            self._thread.join(timeout)

    @property
    def capacity(self) -> int:
        """Sentences the running batch can hold."""
        return self.max_sentences

    @property
    def running(self) -> int:
        """Sentences decoding now."""
        return sum(g.size for g in self._groups.values())

    @property
    def queued(self) -> int:
        """Sentences waiting to join the running batch."""
        with self._cond:
            return sum(len(r.sources) - r.next_sentence for r in self.pending)

    @property
    def rows_in_use(self) -> int:
        """Hypotheses decoding now (cache rows written per step)."""
        return sum(g.size * g.k for g in self._groups.values())

    def submit(self, sources: Sequence[Sequence[int]], options: SearchOptions, callback: Callback,
               cancelled: Callable[[], bool] | None = None, prefixes: Sequence[TargetPrefix] | None = None,
               constraints: Sequence[Sequence[Constraint]] | None = None) -> None:
        """Queue sentences (id lists ending with EOS), each with its target prefix and its terms
        (``constraints``) if any; ``callback(results, error)`` runs in the engine thread."""
        check_request(sources, options, self.spec, self.max_beam, prefixes, has_attention(self.runtime), constraints)
        request = _Request([list(s) for s in sources], options, callback, cancelled=cancelled,
                           prefixes=list(prefixes or ()), constraints=list(constraints or ()))
        if not request.sources:
            callback([], None)
            return
        with self._cond:
            if self._stopping:
                raise EngineStopped("the decoding engine is shutting down")
            self.limits.check(sum(len(r.sources) - r.next_sentence for r in self.pending), len(request.sources))
            self.pending.append(request)
            self._interrupt[0] = 1  # compiled steps return to admit it
            self._cond.notify()

    def translate(self, sources: Sequence[Sequence[int]], options: SearchOptions, timeout: float | None = None,
                  prefixes: Sequence[TargetPrefix] | None = None,
                  constraints: Sequence[Sequence[Constraint]] | None = None) -> list[list[Hypothesis]]:
        """Blocking convenience wrapper (tests, benchmarks)."""
        return _wait_for(self.submit, sources, options, timeout, prefixes, constraints)

    def take_peak(self) -> int:
        """The largest running batch since the previous call (the metrics reporter's)."""
        peak, self.stats["peak_running"] = self.stats["peak_running"], self.running
        return int(peak)

    # ---- the loop -----------------------------------------------------------------
    def _loop(self) -> None:
        self.arrays.activate()  # CUDA device and stream are per thread
        engaged = False  # told the compiled step this loop has work (it lends idle cores only to a lone loop)
        while True:
            with self._cond:
                if engaged and not self.pending and not self.running:
                    engaged = _engage(-1)
                while not self._stopping and not self.pending and not self.running:
                    self._cond.wait()
                if self._stopping:
                    if engaged:
                        _engage(-1)
                    self._fail_all(EngineStopped("the decoding engine is shutting down"))
                    return
            if not engaged:
                engaged = _engage(+1)
            try:
                self._admit()
                if self.running:
                    self._step()
            except Exception as exc:  # a runtime failure fails the running requests, not the server
                log.exception("decoding step failed")
                self._fail_all(exc)

    def _fail_all(self, exc: BaseException) -> None:
        requests = {r for g in self._groups.values() for r in g.requests()}
        with self._cond:
            requests |= set(self.pending)
            self.pending.clear()
        self._groups.clear()
        for r in requests:
            if not r.failed:
                r.failed = True
                r.callback(None, exc)

    def _expire(self) -> None:
        """Fail the queued requests none of whose sentences started within the queue timeout
        (under the lock)."""
        limit = self.limits.timeout_s
        if limit is None:
            return
        now = time.monotonic()
        expired = [r for r in self.pending if r.next_sentence == 0 and now - r.queued_at > limit]
        if not expired:
            return
        self.pending = deque(r for r in self.pending if r not in expired)
        for request in expired:
            request.failed = True
            request.callback(None, EngineBusy(f"server busy: the request waited {now - request.queued_at:.1f} s "
                                              f"in the queue, over the queue timeout of {limit:g} s; retry later"))

    def _admit(self) -> None:
        """Start queued sentences in the free rows, one sentence of each waiting request in turn
        (round robin): a request of one sentence waits behind a bulk request for at most one
        sentence of each request ahead of it, never for the bulk's whole queue."""
        admitted: list[tuple[_Request, int]] = []
        rows_needed, free_rows = 0, self.max_rows - self.rows_in_use
        with self._cond:
            self._interrupt[0] = 0  # what is queued now is seen here; a later request sets it again
            capacity = self.max_sentences - self.running
            self._expire()
            while self.pending and capacity > 0:
                request = self.pending.popleft()
                if request.cancelled and request.cancelled():
                    request.failed = True
                    request.callback(None, RequestCancelled("request cancelled"))
                    continue
                k = request.options.beam_size
                if rows_needed + k > free_rows:
                    self.pending.appendleft(request)  # its turn stays first
                    break
                rows_needed += k
                admitted.append((request, request.next_sentence))
                request.next_sentence += 1
                capacity -= 1
                if request.next_sentence < len(request.sources):
                    self.pending.append(request)  # the next request's turn
        if not admitted:
            return
        sources = [r.sources[i] for r, i in admitted]
        longest = max(self._steps(r, i) for r, i in admitted)
        self._reserve(longest)
        # On the host, encoded in chunks whose memories take at most ENCODE_CHUNK_BYTES, each added
        # to its group before the next is encoded: the encoder's outputs are a copy of what the
        # groups keep, and a long batch's whole copy at once was a peak of its own (NLLB-200, 8
        # sentences of 100 tokens: 88 MB a loop). A sentence's memory is the same in any batch on
        # CPU; a GPU encodes the batch at once (its parallelism).
        spec = self.spec
        per_sentence = 2 * spec.layers * spec.heads * spec.d_k * max(len(s) for s in sources) * 4
        chunk = max(1, ENCODE_CHUNK_BYTES // per_sentence) if self.arrays is HOST else len(sources)
        for lo in range(0, len(sources), chunk):
            part = sources[lo : lo + chunk]
            try:
                keys, values = self.runtime.encode(pad_batch(part, self.spec.pad_id, np.int32))
            except Exception as exc:  # fails the requests being admitted, not the ones decoding
                log.exception("encoding %d sentences failed", len(part))
                self._drop({r for r, _ in admitted}, exc)
                return
            by_beam: dict[int, list[int]] = {}  # the chunk's sentences of each beam width, in order
            for row, (request, _) in enumerate(admitted[lo : lo + chunk]):
                by_beam.setdefault(request.options.beam_size, []).append(row)
            for beam, rows in by_beam.items():
                group = self._group(beam, max(len(part[row]) for row in rows))
                first = group.size
                for row in rows:
                    request, i = admitted[lo + row]
                    group.add(request, i, self.g, len(part[row]), steps=self._steps(request, i))
                group.set_memories(first, rows, keys, values)
            del keys, values
        running = self.running
        self.stats["max_batch_seen"] = max(self.stats["max_batch_seen"], running)
        self.stats["peak_running"] = max(self.stats["peak_running"], running)

    def _steps(self, request: _Request, i: int) -> int:
        """The most steps sentence ``i`` may take: its maximum length after its prompt, within
        the export's target length (the decoder's positions and profile end there)."""
        steps = BeamBatch.steps_for(request.options, len(request.sources[i]), request.prefix(i))
        return min(steps, self.spec.max_target_len)

    def _reserve(self, longest: int) -> None:
        """Make the pools long enough for sentences of up to ``longest`` steps: the longest live
        sentence plus slack, so that compaction runs at most every ~slack steps."""
        if not self.running:
            self.g = 0  # nothing live: the pools' window starts over, no copy needed
        elif self.g + 1 >= self.pool_time:
            self._compact()
        need = max(longest, max((g.longest() for g in self._groups.values()), default=0)) + self.slack + 2
        if need > self.pool_time:
            self._grow_pools(need)

    def _grow_pools(self, steps: int) -> None:
        self.pool_time = steps
        for group in self._groups.values():
            group.resize_pool()

    def _compact(self) -> None:
        lo = min((int(g.start[: g.size].min()) for g in self._groups.values() if g.size), default=self.g)
        if lo == 0:  # a sentence has been running since the window began: make room instead
            self._grow_pools(2 * self.pool_time)
            return
        for group in self._groups.values():
            if group.size:  # an idle group's pool holds nothing live
                group.shift(lo, self.g)
        self.g -= lo

    def _group(self, beam: int, src_len: int) -> _Group:
        """The group of a beam width, with memory wide enough for ``src_len`` source tokens (a
        memory wider than its rows need is narrowed by the next step's ``fit_width``)."""
        group = self._groups.get(beam)
        if group is None:
            group = self._groups[beam] = _Group(self, beam, src_len)
        if src_len > group.width:
            group.fit_width(src_len)
        return group

    def _drop_cancelled(self) -> None:
        cancelled = {r for g in self._groups.values() for r in g.requests() if r.cancelled and r.cancelled()}
        if cancelled:
            self._drop(cancelled, RequestCancelled("request cancelled"))

    def _drop(self, requests: set[_Request], error: BaseException) -> None:
        """Fail these requests alone: their running sentences leave (rows freed), their queued
        sentences are forgotten, every other request keeps decoding."""
        for beam, group in list(self._groups.items()):
            leaving = [row for row, (request, _) in enumerate(group.members) if request in requests]
            if leaving:
                self._remove(beam, np.array(leaving))
        with self._cond:
            self.pending = deque(r for r in self.pending if r not in requests)
        for r in requests:
            if not r.failed:
                r.failed = True
                r.callback(None, error)

    def _remove(self, beam: int, rows: np.ndarray) -> None:
        # An emptied group stays, with its pool: the next burst of this beam width reuses it.
        self._groups[beam].remove(rows)

    def _step(self) -> None:
        """One decoder step of every beam-width group: its feeds, the decoder, the new K/V into
        the pool, the searches advanced, the finished sentences handed back."""
        self._drop_cancelled()
        if self.pool_steps is not None:
            live = [beam for beam, group in self._groups.items() if group.size]
            if len(live) == 1 and self._steps_compiled(live[0]):
                return
        for beam in list(self._groups):
            group = self._groups[beam]
            if not group.size:
                continue
            group.fit_width(0)
            t_lo = int(group.start[: group.size].min())  # the oldest row's start: the window read
            outputs = ALIGNING_OUTPUTS if group.search.wants_attention else graphs.STEP_OUTPUTS
            if group.search.wants_log_probs:  # rare: fairseq's last step, or a sentence with terms
                outputs = (*outputs, "log_probs")
            if self.pool_step is not None:  # compiled: reads and writes the group's arrays in place
                b, search = group.size, group.search
                out = self.pool_step(b, self.g, search.tokens, search.t, group.past_key, group.past_value, group.table,
                                     group.start, group.src_len, group.keys, group.values,
                                     attention=graphs.ATTENTION in outputs, log_probs="log_probs" in outputs,
                                     memory_rows=group.slot, vocabularies=group.restricted())
            else:
                feeds = self._feeds(group, t_lo)
                out = self.runtime.run_step(feeds) if outputs is graphs.STEP_OUTPUTS else self.runtime.run_step(feeds, outputs)
                self._store_new_kv(group, out)
            self._advance(group, out, t_lo)
            self._retire_finished(beam, group)
        self.g += 1
        self.stats["steps"] += 1
        if self.running and self.g + 1 >= self.pool_time:
            self._compact()

    def _steps_compiled(self, beam: int) -> bool:
        """Steps of the one live group with no Python between them (``pool_steps``), until a
        sentence is done (retired here), a request arrives, the pool's window ends or
        ``COMPILED_STEPS`` ran; the same arrays, in the same order, as ``_step``'s path. False
        where the group's search needs Python between its steps (``BeamBatch.compiled_steps``)."""
        group = self._groups[beam]
        search = group.search.compiled_steps()
        if search is None or self.pool_steps is None:
            return False
        group.fit_width(0)
        b = group.size
        steps = self.pool_steps(b=b, g=self.g, t_lo=int(group.start[:b].min()), max_steps=COMPILED_STEPS,
                                interrupt=self._interrupt, vocab=self.spec.vocab, pool_key=group.past_key,
                                pool_value=group.past_value, table=group.table, start=group.start,
                                src_len=group.src_len, memory_keys=group.keys, memory_values=group.values,
                                park=park_after(b) if self.park_steps else 1, park_steps=self.park_steps,
                                memory_rows=group.slot, vocabularies=group.restricted(), **search)
        self._retire_finished(beam, group)
        self.g += steps
        self.stats["steps"] += steps
        if self.running and self.g + 1 >= self.pool_time:
            self._compact()
        return True

    def _feeds(self, group: _Group, t_lo: int) -> dict[str, Any]:
        """The decoder's inputs for the group's rows ``[0, size)``, over pool times ``[t_lo, g)``."""
        g, b = self.g, group.size
        t_len = max(g - t_lo, 1)  # >= 1: a fresh batch attends a masked dummy slot
        times = np.arange(t_lo, t_lo + t_len)
        return graphs.decoder_feeds(
            input_ids=group.search.tokens[:b].astype(np.int32),
            position=group.search.t[:b].astype(np.int32),
            past_key=group.past_key[t_lo : t_lo + t_len],
            past_value=group.past_value[t_lo : t_lo + t_len],
            cache_rows=np.ascontiguousarray(group.table[:b, :, t_lo : t_lo + t_len]),
            past_mask=(times >= group.start[:b, None]) & (times < g),
            # rows [0, b): contiguous, read in place
            memory_keys=[k[:b] for k in group.keys], memory_values=[v[:b] for v in group.values],
            src_mask=np.arange(group.width)[None, :] < group.src_len[:b, None],
        )

    def _store_new_kv(self, group: _Group, out: dict[str, Any]) -> None:
        """The step's K/V at pool time g: one contiguous block; each hypothesis reads its own row."""
        g, b, k = self.g, group.size, group.k
        for buf, new in ((group.past_key, out["new_key"]), (group.past_value, out["new_value"])):
            buf[g, : b * k] = new.reshape(b * k, *new.shape[2:])
        group.table[:b, :, g] = np.arange(b * k).reshape(b, k)

    def _advance(self, group: _Group, out: dict[str, Any], t_lo: int) -> None:
        """The searches take the step's candidates; the ancestor table follows the parents."""
        g, b, k = self.g, group.size, group.k
        m = out["top_ids"].shape[-1] if group.search.wants_all_candidates else min(2 * k + 1, out["top_ids"].shape[-1])
        attention = out.get(graphs.ATTENTION)
        if attention is not None:  # each hypothesis' most attended source position (b, K)
            attention = self.arrays.asnumpy(attention.argmax(-1))
        if "log_probs" in out:
            group.search.advance(self.arrays.asnumpy(out["log_probs"]), attention)
        else:
            group.search.advance(Candidates(self.arrays.asnumpy(out["top_log_probs"][..., :m]),
                                            self.arrays.asnumpy(out["top_ids"][..., :m]), self.spec.vocab), attention)
        if group.search.native and native.module is not None:  # compiled, as the search's step
            native.module.follow_parents(group.table, group.search.parents, b, t_lo, g + 1)
        else:
            window = group.table[:b, :, t_lo : g + 1]
            group.table[:b, :, t_lo : g + 1] = window[np.arange(b)[:, None], group.search.parents[:b]]

    def _retire_finished(self, beam: int, group: _Group) -> None:
        done = np.flatnonzero(group.search.done[: group.size])
        if len(done):
            for row in done.tolist():
                self._finish(group, row)
            self._remove(beam, done)

    def _finish(self, group: _Group, row: int) -> None:
        request, index = group.members[row]
        if request.failed:
            return
        request.results[index] = results = group.search.results(row)
        request.remaining -= 1
        self.stats["sentences"] += 1
        self.stats["tokens"] += len(results[0].tokens) if results else 0
        if request.remaining == 0:
            self.stats["requests"] += 1
            self.stats["request_seconds"] += time.monotonic() - request.queued_at
            request.callback(request.results, None)  # type: ignore[arg-type]


def _engage(delta: int) -> bool:
    """Tell the compiled step a decode loop has work (+1) or is idle again (-1) (native/src/team.h:
    a lone loop's steps borrow the idle cores); returns whether the loop now counts as engaged."""
    if native.module is not None:  # ABI 5 and later have engage
        native.module.engage(delta)
    return delta > 0


class _Group:
    """The running sentences of one beam width ``K``, one row each, in the order a step feeds them.

    Per row: the search state (``search``, a ``BeamBatch``), its global start time, its source
    length, its ancestor ``table`` ``(K, T_pool)`` (indexed by global time), its cache rows
    ``[r * K, r * K + K)`` of the pool ``past_key`` / ``past_value`` ``(T_pool, capacity * K, L,
    h, d_k)``, and its cross-attention memory (per layer ``(h, d_k, width)`` / ``(h, width,
    d_k)``; positions past the source are masked: their contents are stale but finite). Rows
    ``[0, size)`` are live; ``remove`` moves the last rows into the holes, so every array stays a
    dense prefix that a step slices without copying.
    """

    def __init__(self, engine: InflightBatcher, beam: int, src_len: int):
        self.engine, self.spec, self.arrays = engine, engine.spec, engine.arrays
        self.k = beam
        self.members: list[tuple[_Request, int]] = []
        self.capacity = 0
        self.width = self.round_width(src_len)
        self.search = BeamBatch(beam, bos_id=self.spec.bos_id, eos_id=self.spec.eos_id, capacity=8,
                                max_steps=engine.spec.max_target_len)
        self.start = np.zeros(0, np.int64)
        self.src_len = np.zeros(0, np.int64)
        # Per row its restricted vocabulary (engine.vocabularies' index; -1: the whole one).
        self.vocabulary = np.zeros(0, np.int32)
        self.table = np.zeros((0, beam, engine.pool_time), np.int32)
        self.keys: list = []
        self.values: list = []
        self.past_key: Any = None
        self.past_value: Any = None
        # Cache rows ever written are [0, rows_written): a step writes rows [0, size * K). The rest
        # of a pool (and its times from the engine's ``g`` on) holds nothing to keep, and a pool is
        # zeros never touched there (no memory), so copies and moves leave it out.
        self.rows_written = 0
        # Where the compiled step runs on the host (``pool_step``) it reads each row's memory
        # through ``slot`` (row r's memory is row slot[r] of keys / values; rows past the live ones
        # hold the free slots): a sentence's memory stays where it was written and ``remove``
        # moves a slot number instead of the memory (a demo row's is ~220 KB). Elsewhere (ONNX
        # Runtime feeds, a GPU) row r's memory is row r and moves with it.
        self.slotted = engine.pool_step is not None
        self.slot = np.zeros(0, np.int64)
        self._resize(min(8, engine.max_sentences), self.width)

    @property
    def size(self) -> int:
        return len(self.members)

    def requests(self) -> set[_Request]:
        return {r for r, _ in self.members}

    def restricted(self) -> np.ndarray | None:
        """The rows' vocabularies for the step, or None where the repository restricts none."""
        return self.vocabulary if self.engine.vocabularies is not None else None

    def longest(self) -> int:
        """The most steps any live row may take, counted from its start."""
        return int(self.search.max_len[: self.size].max()) if self.size else 0

    def round_width(self, need: int) -> int:
        """Memory widths in steps of 16 (at most max_source_len), so that sources a little longer
        than the last do not reallocate the buffers every time."""
        return min(self.spec.max_source_len, -(-max(need, 1) // 16) * 16)

    def _resize(self, capacity: int, width: int) -> None:
        """(Re)allocate the per-row arrays for ``capacity`` rows and memory ``width``, keeping the rows."""
        b, spec, dtype = self.size, self.spec, self.engine._float
        keys = [self.arrays.zeros((capacity, spec.heads, spec.d_k, width), dtype) for _ in range(spec.layers)]
        values = [self.arrays.zeros((capacity, spec.heads, width, spec.d_k), dtype) for _ in range(spec.layers)]
        w = min(width, self.width)
        kept = self.capacity if self.slotted else b  # slotted: live memories may be in any row
        for layer in range(len(self.keys)):
            keys[layer][:kept, :, :, :w] = self.keys[layer][:kept, :, :, :w]
            values[layer][:kept, :, :w] = self.values[layer][:kept, :, :w]
        self.keys, self.values, self.width = keys, values, width
        if capacity != self.capacity:  # the new memory rows are free slots, after the old ones
            self.slot = np.concatenate([self.slot[: self.capacity], np.arange(self.capacity, capacity, dtype=np.int64)])
            for name in ("start", "src_len", "vocabulary", "table"):
                old = getattr(self, name)
                new = np.zeros((capacity, *old.shape[1:]), old.dtype)
                new[:b] = old[:b]
                setattr(self, name, new)
            self.capacity = capacity
            self.resize_pool()

    def resize_pool(self) -> None:
        """(Re)allocate the cache pool for the group's capacity and the engine's pool length,
        keeping what is there (a history row may be anywhere below the old row count)."""
        spec, time = self.spec, self.engine.pool_time
        shape = (time, self.capacity * self.k, spec.layers, spec.heads, spec.d_k)
        if self.past_key is not None and self.past_key.shape == shape:
            return
        key, value = self.arrays.zeros(shape, self.engine._float), self.arrays.zeros(shape, self.engine._float)
        if self.past_key is not None:  # what was written: times before g, rows below rows_written
            t, r = min(self.engine.g, self.past_key.shape[0]), min(self.rows_written, self.past_key.shape[1])
            key[:t, :r], value[:t, :r] = self.past_key[:t, :r], self.past_value[:t, :r]
        self.past_key, self.past_value = key, value
        if self.table.shape[2] < time:
            table = np.zeros((self.capacity, self.k, time), np.int32)
            table[:, :, : self.table.shape[2]] = self.table
            self.table = table

    def fit_width(self, src_len: int) -> None:
        """Widen the memory for a source of ``src_len`` tokens, or narrow it once it is more than
        twice what the rows need (the decoder's cross-attention costs in proportion to its width)."""
        widest = max(src_len, int(self.src_len[: self.size].max()) if self.size else 0)
        need = self.round_width(widest)
        if need > self.width or self.width > 2 * need:
            self._resize(self.capacity, need)

    def add(self, request: _Request, index: int, start: int, src_len: int, keys: list | None = None,
            values: list | None = None, steps: int | None = None) -> None:
        """Append a sentence to take at most ``steps`` steps, with its encoder outputs (per layer
        (h, d_k, S) / (h, S, d_k), S >= src_len), or without them: ``set_memories`` then writes
        the memories of the sentences appended together, in one copy a layer."""
        if self.size == self.capacity:
            self._resize(min(2 * self.capacity, self.engine.max_sentences), self.width)
        row = self.size
        prefix = request.prefix(index)
        self.search.add(request.options, src_len, prefix, max_steps=steps, constraints=request.terms(index))
        self.start[row], self.src_len[row] = start, src_len
        vocabularies = self.engine.vocabularies
        self.vocabulary[row] = vocabularies.index(prefix.tokens) if vocabularies is not None else -1
        if keys is not None and values is not None:
            m = int(self.slot[row]) if self.slotted else row
            for layer in range(self.spec.layers):
                self.keys[layer][m, :, :, :src_len] = keys[layer][:, :, :src_len]
                self.values[layer][m, :, :src_len] = values[layer][:, :src_len]
        self.members.append((request, index))
        self.rows_written = max(self.rows_written, self.size * self.k)

    def set_memories(self, first: int, rows: list[int], keys: list, values: list) -> None:
        """The memories of rows ``[first, first + len(rows))``: rows ``rows`` of an encoder batch's
        outputs (per layer (B, h, d_k, S) / (B, h, S, d_k)), their first ``min(S, width)``
        positions in one copy a layer. Past a source's length these are the encoder's outputs at
        padding (finite; zeros from the compiled encoder), which no step reads: a row attends its
        first ``src_len`` positions, all below the group's width (``_group``)."""
        n, width = len(rows), min(keys[0].shape[-1], self.width)
        if int(self.src_len[first : first + n].max()) > width:
            raise ValueError(f"a source longer than its encoder batch or the memory ({width} positions)")
        picked = slice(rows[0], rows[-1] + 1) if rows == list(range(rows[0], rows[-1] + 1)) else rows
        to = self.slot[first : first + n] if self.slotted else slice(first, first + n)
        for layer in range(self.spec.layers):
            self.keys[layer][to, :, :, :width] = keys[layer][picked, :, :, :width]
            self.values[layer][to, :, :width] = values[layer][picked, :, :width]

    def remove(self, rows: np.ndarray) -> None:
        """Drop ``rows``: the last live rows move into their places, the search's arrays and the
        group's in one call (``move_rows``). Plain Python for the holes: a few rows of at most the
        running batch, right after the compiled steps left numpy's code cold (session 28: the
        numpy version of these lines took ~65 us a call there)."""
        b = self.size
        gone = set(np.asarray(rows, dtype=np.int64).tolist())
        n = b - len(gone)
        holes = [r for r in sorted(gone) if r < n]  # the holes below the new end, lowest first ...
        tail = [r for r in range(b - 1, n - 1, -1) if r not in gone]  # ... take the live rows past it, last first
        order = list(range(n))
        for hole, row in zip(holes, tail, strict=True):
            order[hole] = row
        if self.slotted:  # the live rows' slots in their new order, then the freed ones
            slots = self.slot[:b].tolist()
            self.slot[:b] = [slots[r] for r in order] + [slots[r] for r in sorted(gone)]
        if holes:
            moved, src = np.array(holes, dtype=np.int64), np.array(tail, dtype=np.int64)
            host: list[Any] = [*self.search.row_arrays(), self.start, self.src_len, self.vocabulary, self.table]
            if self.arrays is HOST and not self.slotted:  # the memories are host arrays too: one move of every row
                host += [*self.keys, *self.values]
            if native.module is not None:
                native.module.move_rows(host, moved, src)
            else:
                for array in host:
                    array[moved] = array[src]
            if self.arrays is not HOST:
                dev_moved, dev_src = self.arrays.asarray(moved), self.arrays.asarray(src)
                for buf in (*self.keys, *self.values):
                    buf[dev_moved] = buf[dev_src]
        self.search.keep_rows(order)
        self.members = [self.members[r] for r in order]

    def shift(self, lo: int, g: int) -> None:
        """Move the live window ``[lo, g)`` of the pool (and the tables) to the front."""
        span, r = g - lo, self.rows_written
        for buf in (self.past_key, self.past_value):  # on the backend's device
            # In blocks of at most ``lo`` times: a block's source and destination never overlap and
            # no source is overwritten before it moves, so no temporary of the window (an NLLB-200
            # pool's window is tens of MB) is made. Rows never written stay untouched.
            for t in range(0, span, lo):
                n = min(lo, span - t)
                buf[t : t + n, :r] = buf[lo + t : lo + t + n, :r]
        self.table[:, :, :span] = self.table[:, :, lo:g].copy()
        self.start[: self.size] -= lo


class EnginePool:
    """Several ``InflightBatcher`` loops over one runtime, for a CPU with more cores than one
    loop keeps busy: each loop runs its own batch (its own groups and cache pools) in its own
    thread. A one-sentence request goes to the loop with the fewest sentences running or queued;
    a larger one is split over the loops (``submit``).

    The runtime is shared: ONNX Runtime sessions may be run from several threads at once, and
    with one intra-op thread each call runs on its caller's thread, so two loops keep two cores
    busy without ORT's spinning worker threads (which fight the loops' Python threads for the
    cores, see bench/RESULTS.md). GPU runtimes use one loop (``workers=1``)."""

    def __init__(self, runtime: StepRuntime, workers: int, max_sentences: int | None = None,
                 max_beam: int = graphs.DEFAULT_MAX_BEAM,
                 pool_slack: int | None = None, limits: QueueLimits | None = None):
        total = max_sentences or runtime.spec.max_batch
        share = max(1, -(-total // workers))
        # The queue limit holds for the pool as a whole (checked here); each loop keeps the timeout.
        self.limits = limits or QueueLimits()
        per_loop = QueueLimits(max_queued=None, timeout_s=self.limits.timeout_s)
        self.engines = [InflightBatcher(runtime, max_sentences=share, max_beam=max_beam, pool_slack=pool_slack,
                                        limits=per_loop)
                        for _ in range(workers)]
        self.spec, self.max_beam = runtime.spec, max_beam
        self._lock = threading.Lock()

    def start(self) -> EnginePool:
        for engine in self.engines:
            engine.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        for engine in self.engines:
            engine.stop(timeout)

    def submit(self, sources: Sequence[Sequence[int]], options: SearchOptions, callback: Callback,
               cancelled: Callable[[], bool] | None = None, prefixes: Sequence[TargetPrefix] | None = None,
               constraints: Sequence[Sequence[Constraint]] | None = None) -> None:
        """A request of one sentence goes to the least-loaded loop; a larger one is split evenly
        over the loops (so a bulk request keeps every core busy) and answered once, in order,
        when every part is done, or with the first part's error."""
        sources = list(sources)
        check_request(sources, options, self.spec, self.max_beam, prefixes, has_attention(self.engines[0].runtime),
                      constraints)
        self.limits.check(self.queued, len(sources))
        parts = min(len(self.engines), len(sources))
        if parts <= 1:
            with self._lock:  # two submits at once must not both pick the same idle loop
                engine = min(self.engines, key=lambda e: e.running + e.queued)
                engine.submit(sources, options, callback, cancelled=cancelled, prefixes=prefixes,
                              constraints=constraints)
            return
        bounds = [len(sources) * i // parts for i in range(parts + 1)]
        results: list = [None] * len(sources)
        state = {"left": parts, "failed": False}
        lock = threading.Lock()

        def part_done(lo: int):
            def done(part: list | None, error: BaseException | None) -> None:
                with lock:
                    if state["failed"]:
                        return
                    if error is not None or part is None:
                        state["failed"] = True
                    else:
                        results[lo : lo + len(part)] = part
                        state["left"] -= 1
                        if state["left"]:
                            return
                if state["failed"]:
                    callback(None, error)
                else:
                    callback(results, None)
            return done

        with self._lock:
            for engine, lo, hi in zip(self.engines, bounds, bounds[1:], strict=False):
                engine.submit(sources[lo:hi], options, part_done(lo), cancelled=cancelled,
                              prefixes=prefixes[lo:hi] if prefixes else None,
                              constraints=constraints[lo:hi] if constraints else None)

    def translate(self, sources: Sequence[Sequence[int]], options: SearchOptions, timeout: float | None = None,
                  prefixes: Sequence[TargetPrefix] | None = None,
                  constraints: Sequence[Sequence[Constraint]] | None = None) -> list[list[Hypothesis]]:
        """Blocking convenience wrapper (tests, benchmarks)."""
        return _wait_for(self.submit, sources, options, timeout, prefixes, constraints)

    def take_peak(self) -> int:
        return sum(e.take_peak() for e in self.engines)

    @property
    def capacity(self) -> int:
        return sum(e.capacity for e in self.engines)

    @property
    def running(self) -> int:
        return sum(e.running for e in self.engines)

    @property
    def queued(self) -> int:
        return sum(e.queued for e in self.engines)

    @property
    def stats(self) -> dict:
        """The loops' counters added up (a copy)."""
        return {k: sum(e.stats[k] for e in self.engines) for k in self.engines[0].stats}
