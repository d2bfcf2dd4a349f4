"""The graph contract, written down once as data.

``nmtserve.export`` drives ``torch.onnx.export`` from it, the Triton config writer derives
``config.pbtxt`` inputs/outputs from it, and every runtime (ONNX Runtime, TensorRT, Triton BLS)
feeds the graphs by these names. Torch-free: the serving processes import it.

Axis names are symbolic dimensions in the ONNX graphs and TensorRT optimization profiles.
Integer inputs are int32 (what TensorRT prefers); masks are bool, True = real.
"""

from __future__ import annotations

from collections.abc import Container, Sequence
from dataclasses import dataclass

import numpy as np

# The widest beam a repository serves unless the export's --beam-size is wider: the decoder's
# TopK width (2 * max_beam + 1), the TensorRT profile's beam axis and the engine's limit follow it.
DEFAULT_MAX_BEAM = 8


@dataclass(frozen=True)
class Tensor:
    name: str
    dtype: str  # numpy dtype name; "float" follows the graph precision (float32 / float16)
    axes: tuple[str | int, ...]


@dataclass(frozen=True)
class Dims:
    """Sizes the graphs depend on (from the model config and the export's widest beam)."""

    layers: int  # decoder layers
    heads: int
    d_k: int
    vocab: int
    max_beam: int = DEFAULT_MAX_BEAM  # widest beam served: the decoder returns each hypothesis' best 2 * max_beam + 1 tokens

    @property
    def candidates(self) -> int:
        """Tokens per hypothesis in ``top_log_probs`` / ``top_ids``: a beam of K reads the first
        ``2K + 1`` of them (its top ``2K`` continuations, one more for a masked EOS; see
        ``nmtserve.decoding.search``)."""
        return min(self.vocab, 2 * self.max_beam + 1)


def encoder_inputs() -> list[Tensor]:
    return [Tensor("src_ids", "int32", ("batch", "src_len"))]


def memory_key(i: int) -> str:
    return f"memory_key.{i}"


def memory_value(i: int) -> str:
    return f"memory_value.{i}"


def encoder_outputs(d: Dims) -> list[Tensor]:
    out = []
    for i in range(d.layers):
        out.append(Tensor(memory_key(i), "float", ("batch", d.heads, d.d_k, "src_len")))  # pre-transposed
        out.append(Tensor(memory_value(i), "float", ("batch", d.heads, "src_len", d.d_k)))
    return out


def decoder_inputs(d: Dims) -> list[Tensor]:
    """The self-attention cache of every layer is one time-major tensor per K and V,
    ``(T, R, L, h, d_k)``: a preallocated pool's window ``[t0, t0 + T)`` is one contiguous slice,
    a step binds two cache inputs whatever the depth, and the new entries of a step's ``B * K``
    hypotheses, written to rows ``[0, B * K)`` at one time, are one contiguous block."""
    cache_axes = ("past_len", "rows", d.layers, d.heads, d.d_k)
    return [
        Tensor("input_ids", "int32", ("batch", "beam")),
        Tensor("position", "int32", ("batch",)),
        Tensor("past_key", "float", cache_axes),
        Tensor("past_value", "float", cache_axes),
        Tensor("cache_rows", "int32", ("batch", "beam", "past_len")),
        Tensor("past_mask", "bool", ("batch", "past_len")),
        *(Tensor(memory_key(i), "float", ("batch", d.heads, d.d_k, "src_len")) for i in range(d.layers)),
        *(Tensor(memory_value(i), "float", ("batch", d.heads, "src_len", d.d_k)) for i in range(d.layers)),
        Tensor("src_mask", "bool", ("batch", "src_len")),
    ]


ATTENTION = "attention"
# Decoder outputs a graph may lack (exported by an older version): a runtime checks for them.
OPTIONAL_OUTPUTS = (ATTENTION,)


def decoder_outputs(d: Dims) -> list[Tensor]:
    """``log_probs`` in full (parity checks, custom loops), each hypothesis' best ``candidates``
    tokens (best first; equal log-probs: lower token id first, ONNX TopK's rule), which is all
    the served search reads, and the new step's K/V of every layer, laid out as the cache's rows."""
    new_axes = ("batch", "beam", d.layers, d.heads, d.d_k)
    return [
        Tensor("log_probs", "float", ("batch", "beam", d.vocab)),
        Tensor("top_log_probs", "float", ("batch", "beam", d.candidates)),
        Tensor("top_ids", "int32", ("batch", "beam", d.candidates)),
        Tensor("new_key", "float", new_axes),
        Tensor("new_value", "float", new_axes),
        # The last decoder layer's cross-attention averaged over its heads: word alignments. Read
        # only when a sentence asks for them; graphs exported before it lack it (``OPTIONAL_OUTPUTS``).
        Tensor(ATTENTION, "float", ("batch", "beam", "src_len")),
    ]


def served_decoder_outputs(d: Dims, present: Container[str]) -> list[Tensor]:
    """``decoder_outputs`` of a graph or plan whose outputs are ``present``: the optional ones it
    lacks (exported before them) left out."""
    return [t for t in decoder_outputs(d) if t.name not in OPTIONAL_OUTPUTS or t.name in present]


def decoder_feeds(*, input_ids, position, past_key, past_value, cache_rows, past_mask, memory_keys: Sequence,
                  memory_values: Sequence, src_mask) -> dict:
    """The decoder's inputs by name (``decoder_inputs``' names, written once), from arrays of any
    backend: what every step runtime is fed (the engine, lockstep decodes, the parity checks)."""
    feeds = {"input_ids": input_ids, "position": position, "past_key": past_key, "past_value": past_value,
             "cache_rows": cache_rows, "past_mask": past_mask, "src_mask": src_mask}
    for i, (k, v) in enumerate(zip(memory_keys, memory_values, strict=True)):
        feeds[memory_key(i)], feeds[memory_value(i)] = k, v
    return feeds


def split_memory(outputs: dict, layers: int) -> tuple[list, list]:
    """The encoder's outputs by name -> (per-layer memory keys, per-layer memory values)."""
    return [outputs[memory_key(i)] for i in range(layers)], [outputs[memory_value(i)] for i in range(layers)]


# What a step of the served search fetches: everything but the full log-probs.
STEP_OUTPUTS = ("top_log_probs", "top_ids", "new_key", "new_value")


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
