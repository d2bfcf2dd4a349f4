"""The graph contract, written down once as data.

``nmtserve.export`` drives ``torch.onnx.export`` from it, the Triton config writer derives
``config.pbtxt`` inputs/outputs from it, and every runtime (ONNX Runtime, TensorRT, Triton BLS)
feeds the graphs by these names. Torch-free: the serving processes import it.

Axis names are symbolic dimensions in the ONNX graphs and TensorRT optimization profiles.
Integer inputs are int32 (what TensorRT prefers); masks are bool, True = real.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Tensor:
    name: str
    dtype: str  # numpy dtype name; "float" follows the graph precision (float32 / float16)
    axes: tuple[str | int, ...]


@dataclass(frozen=True)
class Dims:
    """Sizes the graphs depend on (from the model config)."""

    layers: int  # decoder layers
    heads: int
    d_k: int
    vocab: int


def encoder_inputs() -> list[Tensor]:
    return [Tensor("src_ids", "int32", ("batch", "src_len"))]


def encoder_outputs(d: Dims) -> list[Tensor]:
    out = []
    for i in range(d.layers):
        out.append(Tensor(f"memory_key.{i}", "float", ("batch", d.heads, d.d_k, "src_len")))  # pre-transposed
        out.append(Tensor(f"memory_value.{i}", "float", ("batch", d.heads, "src_len", d.d_k)))
    return out


def decoder_inputs(d: Dims) -> list[Tensor]:
    out = [
        Tensor("input_ids", "int32", ("batch", "beam")),
        Tensor("position", "int32", ("batch",)),
    ]
    out += [Tensor(f"past_key.{i}", "float", ("past_len", "rows", d.heads, d.d_k)) for i in range(d.layers)]
    out += [Tensor(f"past_value.{i}", "float", ("past_len", "rows", d.heads, d.d_k)) for i in range(d.layers)]
    out += [
        Tensor("cache_rows", "int32", ("batch", "beam", "past_len")),
        Tensor("past_mask", "bool", ("batch", "past_len")),
    ]
    out += [Tensor(f"memory_key.{i}", "float", ("batch", d.heads, d.d_k, "src_len")) for i in range(d.layers)]
    out += [Tensor(f"memory_value.{i}", "float", ("batch", d.heads, "src_len", d.d_k)) for i in range(d.layers)]
    out.append(Tensor("src_mask", "bool", ("batch", "src_len")))
    return out


def decoder_outputs(d: Dims) -> list[Tensor]:
    out = [Tensor("log_probs", "float", ("batch", "beam", d.vocab))]
    out += [Tensor(f"new_key.{i}", "float", ("batch", "beam", d.heads, d.d_k)) for i in range(d.layers)]
    out += [Tensor(f"new_value.{i}", "float", ("batch", "beam", d.heads, d.d_k)) for i in range(d.layers)]
    return out


def dynamic_axes(tensors: list[Tensor]) -> dict[str, dict[int, str]]:
    """``torch.onnx.export``'s ``dynamic_axes`` for these tensors."""
    return {t.name: {i: a for i, a in enumerate(t.axes) if isinstance(a, str)} for t in tensors}


def shape_of(t: Tensor, sizes: dict[str, int]) -> tuple[int, ...]:
    """Concrete shape of ``t`` given the size of each symbolic axis it uses."""
    try:
        return tuple(sizes[a] if isinstance(a, str) else a for a in t.axes)
    except KeyError as exc:
        raise ValueError(f"{t.name}: no size given for axis {exc.args[0]!r}") from None


def resolve_dtype(t: Tensor, float_dtype: str = "float32") -> str:
    return float_dtype if t.dtype == "float" else t.dtype


def pad_batch(batch: Sequence[Sequence[int]], pad_id: int, dtype: type = np.int64) -> np.ndarray:
    """Right-pad id lists into a (B, S) array: the encoder's ``src_ids`` layout."""
    width = max(len(ids) for ids in batch)
    out: np.ndarray = np.full((len(batch), width), pad_id, dtype=dtype)
    for i, ids in enumerate(batch):
        out[i, : len(ids)] = ids
    return out
