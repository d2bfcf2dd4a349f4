"""ONNX export of the encoder and the incremental decoder, driven by ``nmtserve.graphs``."""

from __future__ import annotations

import logging
import tempfile
import warnings
from pathlib import Path

import torch
from torch import Tensor, nn

from .. import graphs
from ..model.transformer import Transformer
from .weights import data_file

log = logging.getLogger(__name__)

# 17: LayerNormalization is a single op (fewer nodes per step, fused by ORT and TensorRT).
OPSET = 17
# A graph whose weights reach this is written with its weights in one external data file beside it
# (``<graph>.onnx.data``): protobuf cannot hold a message of 2 GB (NLLB-200 1.3B and up), and ONNX
# Runtime maps external weights instead of copying them (``nmtserve.export.weights``).
EXTERNAL_DATA_BYTES = 2**26


def save_with_external_data(model, path: Path) -> None:
    """Write the ONNX ``model`` to ``path`` with its weights in one file beside it (``data_file``)."""
    import onnx  # noqa: PLC0415 - a dependency of torch.onnx.export anyway

    onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location=data_file(path).name, size_threshold=1024)


def dims_of(model: Transformer, max_beam: int = graphs.DEFAULT_MAX_BEAM) -> graphs.Dims:
    c = model.config
    return graphs.Dims(layers=c.decoder_layers, heads=c.h, d_k=c.d_k, vocab=c.tgt_vocab_size, max_beam=max_beam)


class EncoderGraph(nn.Module):
    """src_ids -> cross-attention K/V of every decoder layer (the memory is not an output)."""

    def __init__(self, model: Transformer):
        super().__init__()
        self.model = model

    def forward(self, src_ids: Tensor) -> tuple[Tensor, ...]:
        kv = self.model.memory_kv(self.model.encode(src_ids))
        return tuple(t for pair in kv for t in pair)


class DecoderGraph(nn.Module):
    """``Transformer.decode_step`` plus each hypothesis' best ``candidates`` tokens (a TopK node:
    the served search reads only those, so only (N, 2K + 1) values leave the step instead of
    (N, V)). Positional I/O in ``graphs.decoder_inputs`` / ``decoder_outputs`` order."""

    def __init__(self, model: Transformer, dims: graphs.Dims):
        super().__init__()
        self.model = model
        self.layers, self.candidates = dims.layers, dims.candidates

    def forward(self, input_ids: Tensor, position: Tensor, past_key: Tensor, past_value: Tensor,
                cache_rows: Tensor, past_mask: Tensor, *rest: Tensor) -> tuple[Tensor, ...]:
        n = self.layers
        mem_k, mem_v, src_mask = list(rest[:n]), list(rest[n : 2 * n]), rest[2 * n]
        log_probs, new_key, new_value, attention = self.model.decode_step(
            input_ids, position, past_key, past_value, cache_rows, past_mask, mem_k, mem_v, src_mask,
            return_attention=True,
        )
        top_log_probs, top_ids = torch.topk(log_probs, self.candidates, dim=-1)  # sorted, best first
        return log_probs, top_log_probs, top_ids.to(torch.int32), new_key, new_value, attention


def example_decoder_inputs(model: Transformer, batch: int = 2, beam: int = 3, past: int = 4, src: int = 5) -> tuple[Tensor, ...]:
    """Inputs of the right dtypes and distinct sizes for every dynamic axis (so tracing keeps them)."""
    c = model.config
    d = dims_of(model)
    rows = batch * beam
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(4, c.tgt_vocab_size, (batch, beam), generator=g, dtype=torch.int32)
    position = torch.full((batch,), past, dtype=torch.int32)
    past_kv = [torch.randn(past, rows, d.layers, d.heads, d.d_k, generator=g) for _ in range(2)]
    cache_rows = torch.randint(0, rows, (batch, beam, past), generator=g, dtype=torch.int32)
    past_mask = torch.ones(batch, past, dtype=torch.bool)
    mem_k = [torch.randn(batch, d.heads, d.d_k, src, generator=g) for _ in range(d.layers)]
    mem_v = [torch.randn(batch, d.heads, src, d.d_k, generator=g) for _ in range(d.layers)]
    src_mask = torch.ones(batch, src, dtype=torch.bool)
    src_mask[0, -1] = False
    return (ids, position, *past_kv, cache_rows, past_mask, *mem_k, *mem_v, src_mask)


def _export(module: nn.Module, args: tuple, path: Path, inputs: list[graphs.Tensor], outputs: list[graphs.Tensor],
            external_data_bytes: int = EXTERNAL_DATA_BYTES) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    # The exporter restores the wrapper's training flag afterwards, recursively: a wrapper left in
    # training mode would switch the wrapped model's dropout back on for everything that follows.
    module.eval()
    with tempfile.TemporaryDirectory(prefix=".onnx-export-", dir=path.parent) as tmp:
        # Its own folder: over 2 GB the exporter writes a file per weight beside the graph.
        exported = Path(tmp) / path.name
        with warnings.catch_warnings(), torch.no_grad():
            # The TorchScript exporter: stable symbolic shapes via dynamic_axes and If/Loop-free
            # graphs for these modules. Its deprecation warning is not actionable for us yet.
            warnings.simplefilter("ignore")
            torch.onnx.export(
                module, args, str(exported),
                input_names=[t.name for t in inputs],
                output_names=[t.name for t in outputs],
                dynamic_axes=graphs.dynamic_axes(inputs + outputs),
                opset_version=OPSET,
                do_constant_folding=True,
                dynamo=False,
            )
        data_file(path).unlink(missing_ok=True)
        files = list(Path(tmp).iterdir())
        weights = sum(f.stat().st_size for f in files)  # the graph itself is a few hundred kB of it
        if weights < external_data_bytes and files == [exported]:
            exported.replace(path)
            return
        import onnx  # noqa: PLC0415 - a dependency of torch.onnx.export anyway

        save_with_external_data(onnx.load(str(exported)), path)  # the weights, wherever the exporter put them
        log.info("%s: %.2f GB of weights in %s", path.name, weights / 1e9, data_file(path).name)


def export_encoder(model: Transformer, path: Path, external_data_bytes: int = EXTERNAL_DATA_BYTES) -> Path:
    """``path``, and ``data_file(path)`` with the weights when they reach ``external_data_bytes``."""
    model.eval()
    src = torch.tensor([[5, 6, 7, 8, model.config.eos_id], [9, 10, model.config.eos_id, 0, 0]], dtype=torch.int32)
    _export(EncoderGraph(model), (src,), path, graphs.encoder_inputs(), graphs.encoder_outputs(dims_of(model)),
            external_data_bytes)
    return path


def export_decoder(model: Transformer, path: Path, max_beam: int = graphs.DEFAULT_MAX_BEAM,
                   external_data_bytes: int = EXTERNAL_DATA_BYTES) -> Path:
    """As ``export_encoder``, for the incremental decoder."""
    model.eval()
    d = dims_of(model, max_beam)
    _export(DecoderGraph(model, d), example_decoder_inputs(model), path, graphs.decoder_inputs(d),
            graphs.decoder_outputs(d), external_data_bytes)
    return path
