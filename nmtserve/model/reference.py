"""The PyTorch reference decode: the shared beam search driving ``Transformer.decode_step``.

Tests compare every other backend (ONNX Runtime, TensorRT, the served model) against this.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from ..decoding.cache import CacheIndex
from ..decoding.search import Hypothesis, SearchOptions, beam_search
from ..graphs import pad_batch
from .tokenizer import Tokenizer
from .transformer import Transformer


class TorchStepModel:
    """``StepModel`` over a PyTorch ``Transformer`` with a preallocated self-attention cache."""

    def __init__(self, model: Transformer, src_ids: np.ndarray, beam: int, max_steps: int):
        cfg = model.config
        if max_steps > cfg.max_positions:
            raise ValueError(f"max length {max_steps} exceeds the model's {cfg.max_positions} positions")
        self.model = model
        src = torch.from_numpy(np.ascontiguousarray(src_ids, dtype=np.int64))
        with torch.no_grad():
            kv = model.memory_kv(model.encode(src))
        self.memory_keys = [k for k, _ in kv]
        self.memory_values = [v for _, v in kv]
        self.src_mask = src != cfg.pad_id
        self.index = CacheIndex(src.shape[0], beam, max_steps)
        shape = (max_steps, self.index.rows, cfg.decoder_layers, cfg.h, cfg.d_k)
        self.past_key, self.past_value = torch.zeros(shape), torch.zeros(shape)

    def step(self, tokens: np.ndarray, parents: np.ndarray | None, batch_index: np.ndarray | None) -> np.ndarray:
        self.index.reorder(parents, batch_index)
        if batch_index is not None and len(batch_index) != self.src_mask.shape[0]:
            sel = torch.from_numpy(batch_index)
            self.memory_keys = [k[sel] for k in self.memory_keys]
            self.memory_values = [v[sel] for v in self.memory_values]
            self.src_mask = self.src_mask[sel]
        rows, past_mask, t_len = self.index.inputs()
        b = tokens.shape[0]
        with torch.no_grad():
            log_probs, new_k, new_v = self.model.decode_step(
                torch.from_numpy(tokens),
                torch.full((b,), self.index.step_count, dtype=torch.int64),
                self.past_key[:t_len],
                self.past_value[:t_len],
                torch.from_numpy(rows),
                torch.from_numpy(past_mask),
                self.memory_keys,
                self.memory_values,
                self.src_mask,
            )
        t, write_rows = self.index.advance()
        w = torch.from_numpy(write_rows)
        for buf, new in ((self.past_key, new_k), (self.past_value, new_v)):  # new: (B, K, L, h, d_k)
            buf[t, w] = new.reshape(-1, *new.shape[2:])
        return log_probs.numpy()


def reference_decode(
    model: Transformer, batch: Sequence[Sequence[int]], options: SearchOptions
) -> list[list[Hypothesis]]:
    """Beam-search a batch of source id lists (each ending with EOS) with the PyTorch model."""
    cfg = model.config
    lengths = [len(ids) for ids in batch]
    max_steps = max(options.max_length_for(n) for n in lengths)
    stepper = TorchStepModel(model, pad_batch(batch, cfg.pad_id), options.beam_size, max_steps)
    return beam_search(stepper, len(batch), lengths, options, bos_id=cfg.bos_id, eos_id=cfg.eos_id)


def translate(
    model: Transformer, tokenizer: Tokenizer, texts: Sequence[str], options: SearchOptions, batch_size: int = 32
) -> list[list[tuple[str, float]]]:
    """Translate texts with the reference decode; per text, (translation, score) n-best."""
    out: list[list[tuple[str, float]]] = []
    for start in range(0, len(texts), batch_size):
        chunk = [tokenizer.encode(t) for t in texts[start : start + batch_size]]
        for hyps in reference_decode(model, chunk, options):
            out.append([(tokenizer.decode(h.tokens), h.score) for h in hyps])
    return out
