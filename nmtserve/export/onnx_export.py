"""ONNX export of the encoder and the incremental decoder, driven by ``nmtserve.graphs``."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

import torch
from torch import Tensor, nn

from .. import graphs
from ..model.transformer import Transformer

log = logging.getLogger(__name__)

# 17: LayerNormalization is a single op (fewer nodes per step, fused by ORT and TensorRT).
OPSET = 17


def dims_of(model: Transformer) -> graphs.Dims:
    c = model.config
    return graphs.Dims(layers=c.decoder_layers, heads=c.h, d_k=c.d_k, vocab=c.tgt_vocab_size)


class EncoderGraph(nn.Module):
    """src_ids -> cross-attention K/V of every decoder layer (the memory is not an output)."""

    def __init__(self, model: Transformer):
        super().__init__()
        self.model = model

    def forward(self, src_ids: Tensor) -> tuple[Tensor, ...]:
        kv = self.model.memory_kv(self.model.encode(src_ids))
        return tuple(t for pair in kv for t in pair)


class DecoderGraph(nn.Module):
    """Flat positional I/O in ``graphs.decoder_inputs`` / ``decoder_outputs`` order."""

    def __init__(self, model: Transformer):
        super().__init__()
        self.model = model
        self.layers = model.config.decoder_layers

    def forward(self, input_ids: Tensor, position: Tensor, *rest: Tensor) -> tuple[Tensor, ...]:
        n = self.layers
        past_k, past_v = list(rest[:n]), list(rest[n : 2 * n])
        cache_rows, past_mask = rest[2 * n], rest[2 * n + 1]
        mem_k, mem_v = list(rest[2 * n + 2 : 3 * n + 2]), list(rest[3 * n + 2 : 4 * n + 2])
        src_mask = rest[4 * n + 2]
        log_probs, new_k, new_v = self.model.decode_step(
            input_ids, position, past_k, past_v, cache_rows, past_mask, mem_k, mem_v, src_mask
        )
        return (log_probs, *new_k, *new_v)


def example_decoder_inputs(model: Transformer, batch: int = 2, beam: int = 3, past: int = 4, src: int = 5) -> tuple[Tensor, ...]:
    """Inputs of the right dtypes and distinct sizes for every dynamic axis (so tracing keeps them)."""
    c = model.config
    d = dims_of(model)
    rows = batch * beam
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(4, c.tgt_vocab_size, (batch, beam), generator=g, dtype=torch.int32)
    position = torch.full((batch,), past, dtype=torch.int32)
    past_kv = [torch.randn(past, rows, d.heads, d.d_k, generator=g) for _ in range(2 * d.layers)]
    cache_rows = torch.randint(0, rows, (batch, beam, past), generator=g, dtype=torch.int32)
    past_mask = torch.ones(batch, past, dtype=torch.bool)
    mem_k = [torch.randn(batch, d.heads, d.d_k, src, generator=g) for _ in range(d.layers)]
    mem_v = [torch.randn(batch, d.heads, src, d.d_k, generator=g) for _ in range(d.layers)]
    src_mask = torch.ones(batch, src, dtype=torch.bool)
    src_mask[0, -1] = False
    return (ids, position, *past_kv, cache_rows, past_mask, *mem_k, *mem_v, src_mask)


def _export(module: nn.Module, args: tuple, path: Path, inputs: list[graphs.Tensor], outputs: list[graphs.Tensor]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    # The exporter restores the wrapper's training flag afterwards, recursively: a wrapper left in
    # training mode would switch the wrapped model's dropout back on for everything that follows.
    module.eval()
    with warnings.catch_warnings(), torch.no_grad():
        # The TorchScript exporter: stable symbolic shapes via dynamic_axes and If/Loop-free
        # graphs for these modules. Its deprecation warning is not actionable for us yet.
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module, args, str(path),
            input_names=[t.name for t in inputs],
            output_names=[t.name for t in outputs],
            dynamic_axes=graphs.dynamic_axes(inputs + outputs),
            opset_version=OPSET,
            do_constant_folding=True,
            dynamo=False,
        )


def export_encoder(model: Transformer, path: Path) -> Path:
    model.eval()
    src = torch.tensor([[5, 6, 7, 8, model.config.eos_id], [9, 10, model.config.eos_id, 0, 0]], dtype=torch.int32)
    _export(EncoderGraph(model), (src,), path, graphs.encoder_inputs(), graphs.encoder_outputs(dims_of(model)))
    return path


def export_decoder(model: Transformer, path: Path) -> Path:
    model.eval()
    d = dims_of(model)
    _export(DecoderGraph(model), example_decoder_inputs(model), path, graphs.decoder_inputs(d), graphs.decoder_outputs(d))
    return path
