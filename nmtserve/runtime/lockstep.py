"""One batch decoded step by step through any backend, and two backends compared step by step.

Every backend is a step runtime with the graph contract (``nmtserve.graphs``: ``encode`` ->
per-layer cross-attention K/V, ``run_step(feeds, outputs)``): ONNX Runtime (``OnnxModel``), PyTorch
(``nmtserve.model.reference.TorchRuntime``), TensorRT or ONNX Runtime CUDA seen from the host
(``HostView``). ``LockstepModel`` turns one into the ``StepModel`` the shared beam search drives
(the reference decode, the export's parity check, ``nmtserve gpu-check``, scripts/gpu-check), and
``Lockstep`` runs a candidate beside a reference on the reference's path, recording the largest
log-prob difference. The served engine drives the same runtimes directly (its own cache pool).
Torch-free.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from .. import graphs
from ..decoding.cache import CacheIndex
from .spec import ModelSpec

RELEVANT_LOG_PROB = -10.0  # tokens below this cannot reach a beam; fp16 error there does not matter


class StepRunner(Protocol):
    """A step runtime with host (NumPy) inputs and outputs: ``OnnxModel``, the PyTorch
    ``TorchRuntime``, or a device runtime seen from the host (``HostView``)."""

    spec: ModelSpec
    _float: Any

    def encode(self, src_ids: np.ndarray) -> tuple[list[np.ndarray], list[np.ndarray]]: ...

    def run_step(self, feeds: dict[str, np.ndarray], outputs: Sequence[str]) -> dict[str, np.ndarray]: ...


class LockstepModel:
    """``nmtserve.decoding.StepModel`` over any ``StepRunner`` for one batch decoded in lockstep
    (``beam_search`` drives it): the graph contract's feeds each step, the full log-probs back
    (what the parity checks compare), the step's K/V scattered into a host cache."""

    def __init__(self, model: StepRunner, memory_keys: list[np.ndarray], memory_values: list[np.ndarray],
                 src_mask: np.ndarray, beam: int, max_steps: int):
        spec = model.spec
        if max_steps > spec.max_positions:
            raise ValueError(f"max length {max_steps} exceeds the model's {spec.max_positions} positions")
        self.model = model
        self.memory_keys, self.memory_values = memory_keys, memory_values
        self.src_mask = np.ascontiguousarray(src_mask, dtype=bool)
        self.index = CacheIndex(src_mask.shape[0], beam, max_steps)
        shape = (max_steps, self.index.rows, spec.layers, spec.heads, spec.d_k)
        self.past_key = np.zeros(shape, model._float)
        self.past_value = np.zeros(shape, model._float)
        # Fetch the decoder's ``attention`` too (the search's ``SearchOptions.alignment``); the last
        # step's (b, K) most attended source positions are ``attention`` then.
        self.want_attention = False
        self.attention: np.ndarray | None = None

    def step(self, tokens: np.ndarray, parents: np.ndarray | None, batch_index: np.ndarray | None) -> np.ndarray:
        self.index.reorder(parents, batch_index)
        if batch_index is not None and len(batch_index) != self.src_mask.shape[0]:
            # A sentence finished: drop its rows from the per-sentence inputs (only on such steps).
            self.memory_keys = [np.ascontiguousarray(k[batch_index]) for k in self.memory_keys]
            self.memory_values = [np.ascontiguousarray(v[batch_index]) for v in self.memory_values]
            self.src_mask = np.ascontiguousarray(self.src_mask[batch_index])
        rows, past_mask, t_len = self.index.inputs()
        feeds = graphs.decoder_feeds(
            input_ids=np.ascontiguousarray(tokens, dtype=np.int32),
            position=np.full((tokens.shape[0],), self.index.step_count, dtype=np.int32),
            past_key=self.past_key[:t_len], past_value=self.past_value[:t_len], cache_rows=rows.astype(np.int32),
            past_mask=past_mask, memory_keys=self.memory_keys, memory_values=self.memory_values,
            src_mask=self.src_mask,
        )
        names = ("log_probs", "new_key", "new_value", graphs.ATTENTION) if self.want_attention else \
            ("log_probs", "new_key", "new_value")
        out = self.model.run_step(feeds, names)
        t, write_rows = self.index.advance()
        write_cache(self.past_key, self.past_value, t, write_rows, out)
        if self.want_attention:
            self.attention = np.asarray(out[graphs.ATTENTION]).argmax(-1)
        return out["log_probs"]


def write_cache(past_key, past_value, t: int, rows, out: dict) -> None:
    """Scatter a step's ``new_key`` / ``new_value`` (B, K, L, h, d_k) into the cache buffers
    (T, R, L, h, d_k) at time ``t``, hypothesis ``n`` of the flattened (B * K) into row ``rows[n]``."""
    for buf, new in ((past_key, out["new_key"]), (past_value, out["new_value"])):
        buf[t, rows] = new.reshape(-1, *new.shape[2:])


def step_model(runner: StepRunner, src_ids: np.ndarray, beam: int, max_steps: int) -> LockstepModel:
    """``runner`` as the beam search's step model for the padded batch ``src_ids``."""
    keys, values = runner.encode(src_ids)
    return LockstepModel(runner, keys, values, src_ids != runner.spec.pad_id, beam, max_steps)


class HostView:
    """A device-resident runtime (``TensorRTModel``, ``OnnxBoundModel`` on CUDA) with every output
    downloaded, so it can run in lockstep with a reference. Only for checks: the served engine
    keeps the cache on the device."""

    def __init__(self, runtime):
        self.runtime, self.spec, self._float = runtime, runtime.spec, runtime._float
        self.arrays = runtime.arrays

    def encode(self, src_ids):
        keys, values = self.runtime.encode(src_ids)
        return [self.arrays.asnumpy(k) for k in keys], [self.arrays.asnumpy(v) for v in values]

    def step_model(self, src_ids, beam: int, max_steps: int) -> LockstepModel:
        return step_model(self, src_ids, beam, max_steps)

    def run_step(self, feeds, outputs):
        return {name: self.arrays.asnumpy(x) for name, x in self.runtime.run_step(feeds, outputs).items()}


@dataclass
class Stats:
    steps: int = 0
    max_all: float = 0.0  # largest |candidate - reference| log-prob over every finite entry
    max_relevant: float = 0.0  # ... over the entries a beam can reach (reference >= RELEVANT_LOG_PROB)
    sentences: int = 0
    mismatched: int = 0
    decode_seconds: float = 0.0  # the candidate decoding alone

    def add_step(self, got: np.ndarray, want: np.ndarray) -> None:
        """One step's candidate log-probs against the reference's."""
        all_, rel = diffs(got, want)
        self.max_all = max(self.max_all, all_)
        self.max_relevant = max(self.max_relevant, rel)
        self.steps += 1


def diffs(got: np.ndarray, want: np.ndarray) -> tuple[float, float]:
    """max |got - want| over all finite entries, and over the entries the search can pick;
    inf where one is -inf (masked) and the other is not."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    finite = np.isfinite(want)
    if not np.array_equal(finite, np.isfinite(got)):
        return float("inf"), float("inf")
    with np.errstate(invalid="ignore"):  # -inf - -inf where both are masked; excluded below
        diff = np.abs(got - want)
    relevant = finite & (want >= RELEVANT_LOG_PROB)
    return float(diff[finite].max(initial=0.0)), float(diff[relevant].max(initial=0.0))


class Lockstep:
    """Steps reference and candidate with the same inputs; the search follows the reference."""

    def __init__(self, reference, candidate, stats: Stats):
        self.reference, self.candidate, self.stats = reference, candidate, stats

    def step(self, tokens, parents, batch_index):
        want = self.reference.step(tokens, parents, batch_index)
        self.stats.add_step(self.candidate.step(tokens, parents, batch_index), want)
        return want
