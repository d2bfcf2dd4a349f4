"""Bookkeeping of the decoder's self-attention cache, shared by every backend.

The cache buffers themselves (numpy, torch, device memory) belong to the step model; this
class owns the small index tables the decoder graph reads (see ``nmtserve.model.transformer``):

* every hypothesis slot ``(sentence, beam)`` has a fixed cache row it writes its new K/V to;
* ``cache_rows (b, K, T)`` says, for each live hypothesis and each past time, which row holds its
  ancestor's entry. Reordering beams gathers this table, never the cache;
* time 0 of the first step is a masked dummy so that every step has ``T >= 1``.
"""

from __future__ import annotations

import numpy as np


class CacheIndex:
    """Index tables for ``batch_size`` sentences of ``beam`` hypotheses, decoded in lockstep."""

    def __init__(self, batch_size: int, beam: int, max_steps: int):
        self.beam = beam
        self.max_steps = max_steps
        self.rows = batch_size * beam  # R: cache rows to allocate
        # Fixed write row of each live hypothesis; rows of finished sentences are simply unused.
        self.write_rows = np.arange(self.rows, dtype=np.int64).reshape(batch_size, beam)
        self.table = np.zeros((batch_size, beam, max(max_steps, 1)), dtype=np.int64)
        self.step_count = 0  # steps already written (= the next step's position)

    def reorder(self, parents: np.ndarray | None, batch_index: np.ndarray | None) -> None:
        """Apply the search's choice of surviving sentences and beam parents."""
        if batch_index is not None:
            self.table = self.table[batch_index]
            self.write_rows = self.write_rows[batch_index]
        if parents is not None:
            self.table = np.take_along_axis(self.table, parents[:, :, None], axis=1)

    def inputs(self) -> tuple[np.ndarray, np.ndarray, int]:
        """(cache_rows (b, K, T), past_mask (b, T), T) for the next step."""
        b = self.table.shape[0]
        if self.step_count == 0:
            # A masked dummy time step: same graph, no zero-length dimension.
            rows = self.write_rows[:, :, None]
            return np.ascontiguousarray(rows), np.zeros((b, 1), dtype=bool), 1
        t = self.step_count
        return np.ascontiguousarray(self.table[:, :, :t]), np.ones((b, t), dtype=bool), t

    def advance(self) -> tuple[int, np.ndarray]:
        """Record that the step ran; returns (time, flat write rows (b*K,)) for its new K/V."""
        t = self.step_count
        if t >= self.max_steps:
            raise RuntimeError(f"decoder cache is full ({self.max_steps} steps)")
        self.table[:, :, t] = self.write_rows
        self.step_count += 1
        return t, self.write_rows.reshape(-1)
