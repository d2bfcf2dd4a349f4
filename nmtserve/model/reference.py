"""The PyTorch reference decode: the shared beam search driving ``Transformer.decode_step``
through ``TorchRuntime`` (the graph contract's step runtime, as every backend).

Tests compare every other backend (ONNX Runtime, TensorRT, the served model) against this.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from .. import graphs
from ..decoding.search import (
    NO_PREFIX,
    BeamBatch,
    Hypothesis,
    SearchOptions,
    TargetPrefix,
    beam_search,
)
from ..graphs import pad_batch
from ..runtime.lockstep import LockstepModel, step_model
from ..runtime.spec import ModelSpec
from .tokenizer import Tokenizer
from .transformer import Transformer


class TorchRuntime:
    """The PyTorch model as a step runtime with the graph contract (``nmtserve.graphs``), host
    (NumPy) arrays in and out, so the shared ``LockstepModel`` decodes with it as with the
    exported graphs. ``device``/``dtype`` run it elsewhere (scripts/gpu-check: CUDA, fp16); the
    host cache stays fp32 (fp16 values are exact in it)."""

    def __init__(self, model: Transformer, device: str = "cpu", dtype: torch.dtype = torch.float32):
        cfg = model.config
        self.model, self.device, self.dtype = model, torch.device(device), dtype
        if self.device.type != "cpu" or dtype != torch.float32:
            import copy  # noqa: PLC0415

            self.model = copy.deepcopy(model).to(self.device, dtype)
        self.model.eval()
        self.spec = ModelSpec(layers=cfg.decoder_layers, heads=cfg.h, d_k=cfg.d_k, vocab=cfg.tgt_vocab_size,
                              max_positions=cfg.max_positions, pad_id=cfg.pad_id, bos_id=cfg.bos_id,
                              eos_id=cfg.eos_id, unk_id=cfg.unk_id, src_vocab=cfg.src_vocab_size)
        self._float = np.float32

    def _in(self, x: np.ndarray) -> torch.Tensor:
        t = torch.from_numpy(np.ascontiguousarray(x))
        return t.to(self.device, self.dtype if t.is_floating_point() else t.dtype)

    @staticmethod
    def _out(t: torch.Tensor) -> np.ndarray:
        return t.float().cpu().numpy() if t.is_floating_point() else t.cpu().numpy()

    def encode(self, src_ids: np.ndarray) -> tuple[list[np.ndarray], list[np.ndarray]]:
        src = torch.from_numpy(np.ascontiguousarray(src_ids, dtype=np.int64)).to(self.device)
        with torch.no_grad():
            kv = self.model.memory_kv(self.model.encode(src))
        # Contiguous once here, so that every step's feeds convert without a copy.
        return ([np.ascontiguousarray(self._out(k)) for k, _ in kv],
                [np.ascontiguousarray(self._out(v)) for _, v in kv])

    def run_step(self, feeds: dict[str, np.ndarray], outputs: Sequence[str] = graphs.STEP_OUTPUTS) -> dict[str, np.ndarray]:
        n = self.spec.layers
        with torch.no_grad():
            log_probs, new_key, new_value, attention = self.model.decode_step(
                self._in(feeds["input_ids"]).long(), self._in(feeds["position"]).long(), self._in(feeds["past_key"]),
                self._in(feeds["past_value"]), self._in(feeds["cache_rows"]).long(), self._in(feeds["past_mask"]),
                [self._in(feeds[graphs.memory_key(i)]) for i in range(n)],
                [self._in(feeds[graphs.memory_value(i)]) for i in range(n)], self._in(feeds["src_mask"]),
                return_attention=True,
            )
            out = {"log_probs": log_probs, "new_key": new_key, "new_value": new_value, graphs.ATTENTION: attention}
            if {"top_log_probs", "top_ids"} & set(outputs):
                top, ids = torch.topk(log_probs, self.spec.dims.candidates, dim=-1)
                out.update(top_log_probs=top, top_ids=ids.to(torch.int32))
        return {name: self._out(out[name]) for name in outputs}

    def step_model(self, src_ids: np.ndarray, beam: int, max_steps: int) -> LockstepModel:
        return step_model(self, src_ids, beam, max_steps)


def reference_decode(
    model: Transformer, batch: Sequence[Sequence[int]], options: SearchOptions,
    prefixes: Sequence[TargetPrefix] | None = None, constraints=None,
) -> list[list[Hypothesis]]:
    """Beam-search a batch of source id lists (each ending with EOS) with the PyTorch model,
    each sentence with its target prefix and its terminology constraints if given."""
    cfg = model.config
    lengths = [len(ids) for ids in batch]
    prefixes = list(prefixes) if prefixes is not None else [NO_PREFIX] * len(batch)
    max_steps = max(BeamBatch.steps_for(options, n, p) for n, p in zip(lengths, prefixes, strict=True))
    stepper = TorchRuntime(model).step_model(pad_batch(batch, cfg.pad_id), options.beam_size, max_steps)
    stepper.want_attention = options.alignment
    return beam_search(stepper, len(batch), lengths, options, bos_id=cfg.bos_id, eos_id=cfg.eos_id, prefixes=prefixes,
                       constraints=constraints)


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
