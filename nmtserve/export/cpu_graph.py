"""The decoder step for ONNX Runtime on a CPU: the same contract, fewer and fused nodes.

``torch.onnx.export`` of ``Transformer.decode_step`` writes the portable graph (standard ONNX
only: what TensorRT builds and ``lint`` guards). On a CPU at one sentence of beam 4, most of its
573 nodes (233 after ONNX Runtime's optimizer) are bookkeeping of a few microseconds each around
a little arithmetic: the shape chains of every traced ``view``, 3-D activations that keep each
Linear a MatMul and an Add, three projections where one would do. This module writes the same
step from the model's weights, for ONNX Runtime's CPU provider:

* activations are 2-D ``(N = B * K, d)`` throughout, so ONNX Runtime fuses MatMul + bias into
  Gemm and Gemm + ReLU into FusedGemm (``quantize_int8`` still finds the weight MatMuls);
* the self-attention's Q/K/V projections are one MatMul (weights side by side) and a Split; the
  1/sqrt(d_k) of the scores is folded into the query's weights;
* shapes are computed once at the top (from ``input_ids``, ``cache_rows`` and ``past_key``) and
  the masks become additive biases once, not per layer;
* attention keeps ``self_step``'s plan (the cache gathered a whole row at a time, a block-diagonal
  query, the new entry scored on its own so the cache is never concatenated).

(Tried and not used, measured on ONNX Runtime 1.32, demo model, one thread: the contrib
``MultiHeadAttention`` is slower here at every batch, its per-(hypothesis, head) products and the
concatenated cache outweigh the nodes it saves; ``SkipLayerNormalization`` is 1.4-4x slower than
Add + LayerNormalization at 4-256 rows of 192.)

The inputs and outputs are ``nmtserve.graphs``' decoder contract, unchanged, so the engine, the
parity check and int8 quantization take either graph. The export checks this graph against
PyTorch like the portable one and serves it on the CPU target; the GPU target keeps the portable
graph.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper

from .. import graphs
from ..model.transformer import Transformer, alignment_layer
from .onnx_export import EXTERNAL_DATA_BYTES
from .weights import SharedWeights, save_arrays, tensor_threshold

# ONNX Runtime's contrib domain: FusedMatMul (a transposed B), Gelu.
CONTRIB = "com.microsoft"
OPSET = 17
ACTIVATIONS = ("relu", "gelu", "swish")
# Added to a masked attention score: exp() of it is 0 in float32 next to any real score, as the
# reference's finfo.min fill (which, added rather than filled, would overflow to -inf).
MASK_FILTER = -1e9


class UnsupportedModel(ValueError):
    """The checkpoint uses something this builder does not write (the portable graph is served)."""


class _Builder:
    """Nodes and initializers, each name written once."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        # Initializers by name, as arrays: views of the model's weights where they can be (a
        # transposed view costs nothing until it is written, one at a time: ``weights.save_arrays``).
        self.arrays: dict[str, np.ndarray] = {}
        # Types of contrib ops' outputs: ONNX's shape inference (which the int8 quantizer runs)
        # does not know those ops, and would leave everything downstream untyped.
        self.value_info: list[onnx.ValueInfoProto] = []
        self._names: set[str] = set()

    def _claim(self, name: str) -> str:
        if name in self._names:
            raise AssertionError(f"cpu_graph: {name} written twice")
        self._names.add(name)
        return name

    def const(self, name: str, array: np.ndarray | torch.Tensor) -> str:
        if isinstance(array, torch.Tensor):
            array = array.detach().cpu().numpy()
        self.arrays[self._claim(name)] = np.asarray(array)
        return name

    def save(self, path: Path, name: str, inputs: list[graphs.Tensor], outputs: list[graphs.Tensor], doc: str,
             external_data_bytes: int, shared: SharedWeights | None) -> Path:
        """The graph written to ``path``: its weights in a data file beside it (aligned, streamed)
        once they reach ``external_data_bytes``, a tensor ``shared`` holds pointed at."""
        graph = helper.make_graph(self.nodes, name, [_value_info(t) for t in inputs], [_value_info(t) for t in outputs],
                                  value_info=self.value_info)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET), helper.make_opsetid(CONTRIB, 1)],
                                  producer_name="nmtserve", doc_string=doc)
        model.ir_version = 8
        external = sum(a.nbytes for a in self.arrays.values()) >= external_data_bytes
        return save_arrays(model, self.arrays, Path(path), external, shared, tensor_threshold(external_data_bytes))

    def ints(self, name: str, values) -> str:
        return self.const(name, np.asarray(values, np.int64))

    def op(self, op_type: str, inputs: list[str], name: str, outputs: int = 1, domain: str = "", **attrs) -> list[str]:
        self._claim(name)
        outs = [f"{name}_out{i}" if outputs > 1 else f"{name}_out" for i in range(outputs)]
        self.nodes.append(helper.make_node(op_type, inputs, outs, name=name, domain=domain or None, **attrs))
        if domain == CONTRIB:
            self.value_info += [helper.make_tensor_value_info(out, TensorProto.FLOAT, None) for out in outs]
        return outs

    def one(self, op_type: str, inputs: list[str], name: str, domain: str = "", **attrs) -> str:
        return self.op(op_type, inputs, name, 1, domain, **attrs)[0]


def _weight_t(linear: torch.nn.Linear) -> np.ndarray:
    """A Linear's weight as MatMul's B (in, out)."""
    return linear.weight.detach().float().numpy().T


def _check(model: Transformer) -> None:
    c = model.config
    if c.activation not in ACTIVATIONS:
        raise UnsupportedModel(f"activation {c.activation!r}")
    if c.d_model % c.h:
        raise UnsupportedModel(f"d_model {c.d_model} is not a multiple of {c.h} heads")
    if next(model.parameters()).dtype != torch.float32:
        raise UnsupportedModel("weights are not float32")


def build_cpu_decoder(model: Transformer, path: Path, max_beam: int = graphs.DEFAULT_MAX_BEAM,
                      external_data_bytes: int = EXTERNAL_DATA_BYTES, shared: SharedWeights | None = None) -> Path:
    """Write the fused CPU decoder step of ``model`` to ``path`` (contract: ``nmtserve.graphs``).
    ``shared``: what an earlier graph of the folder wrote (the encoder's: a shared vocabulary table
    is pointed at in its file, not written again)."""
    _check(model)
    c = model.config
    dims = graphs.Dims(layers=c.decoder_layers, heads=c.h, d_k=c.d_k, vocab=c.tgt_vocab_size, max_beam=max_beam)
    d, h, n_layers = c.d_model, c.h, c.decoder_layers
    b = _Builder()
    with torch.no_grad():
        common = _shared(b, d, h, n_layers)
        x = _embed(b, model, common)
        layers = list(model.decoder_layers)
        # Pre-norm: a sublayer reads LN(x), which the previous residual's LayerNorm writes; after
        # the last one the decoder's final norm.
        norms = [norm for layer in layers for norm in (layer.sub_self.norm, layer.sub_cross.norm, layer.sub_ffn.norm)]
        norms.append(model.decoder_norm if c.pre_norm else None)
        y = _layer_norm(b, x, norms[0], "/decoder_layers.0/sub_self/norm") if c.pre_norm else x
        new_k, new_v = [], []
        for i, layer in enumerate(layers):
            p = f"/decoder_layers.{i}"
            out, k_i, v_i = _self_attention(b, common, layer.self_attn, y, i, d, h, p)
            new_k.append(k_i)
            new_v.append(v_i)
            x, y = _residual(b, out, layer.self_attn.out_proj, f"{p}/self_attn/out_proj", x,
                             norms[3 * i + 1] if c.pre_norm else layer.sub_self.norm, c.pre_norm)
            out, probs = _cross_attention(b, common, layer.cross_attn, y, i, d, h, p)
            if i == alignment_layer(n_layers):  # the alignment attention: the heads' mean (B, K, S)
                b.nodes.append(helper.make_node("ReduceMean", [probs], [graphs.ATTENTION], name="/attention",
                                                axes=[1], keepdims=0))
            x, y = _residual(b, out, layer.cross_attn.out_proj, f"{p}/cross_attn/out_proj", x,
                             norms[3 * i + 2] if c.pre_norm else layer.sub_cross.norm, c.pre_norm)
            out = _ffn(b, layer.ffn, y, c.activation, p)
            x, y = _residual(b, out, layer.ffn.fc2, f"{p}/ffn/fc2", x,
                             norms[3 * i + 3] if c.pre_norm else layer.sub_ffn.norm, c.pre_norm)
        if c.final_norms and not c.pre_norm:  # a post-norm stack's final LayerNorm (torch's nn.Transformer)
            y = _layer_norm(b, y, model.decoder_norm, "/decoder_norm")
        _outputs(b, model, y, new_k, new_v, dims, common)

    return b.save(path, "nmtserve_decoder_cpu", graphs.decoder_inputs(dims), graphs.decoder_outputs(dims),
                  "decoder step, fused for ONNX Runtime's CPU provider", external_data_bytes, shared)


def build_cpu_encoder(model: Transformer, path: Path, external_data_bytes: int = EXTERNAL_DATA_BYTES,
                      shared: SharedWeights | None = None) -> Path:
    """Write the encoder of ``model`` to ``path`` from its weights (contract: ``nmtserve.graphs``):
    2-D activations (Gemm), one Q/K/V MatMul a layer, the key mask an additive bias made once, and
    every decoder layer's cross-attention keys and values from one MatMul over the memory.

    Written from the weights, streamed to the data file one tensor at a time, so it costs no copy
    of the model (``torch.onnx.export`` held the traced graph's weights, folded and serialized,
    beside the model: the largest part of an export's peak). ``shared`` is updated with what it
    wrote, for the decoder."""
    _check(model)
    c = model.config
    d, h, d_k = c.d_model, c.h, c.d_k
    pre = c.encoder_pre
    b = _Builder()
    with torch.no_grad():
        flat_d = b.ints("/shape/flat_d", [-1, d])
        bs = b.one("Shape", ["src_ids"], "/shape/bs")  # [B, S]
        bshd = b.one("Concat", [bs, b.ints("/shape/hd", [h, d_k])], "/shape/bshd", axis=0)
        padding = b.one("Equal", ["src_ids", b.const("/mask/pad", np.asarray(c.pad_id, np.int32))], "/mask/padding")
        src_bias = b.one("Where", [padding, b.const("/mask/masked", np.asarray(MASK_FILTER, np.float32)),
                                   b.const("/mask/real", np.asarray(0, np.float32))], "/mask/bias")
        src_bias = b.one("Unsqueeze", [src_bias, b.ints("/shape/axes12", [1, 2])], "/mask/bias_b11s")  # (B, 1, 1, S)
        emb = model.src_embed
        x = b.one("Gather", [b.const("src_embed.lut.weight", emb.lut.weight.float()), "src_ids"], "/src_embed/tokens", axis=0)
        if emb.scale != 1.0:
            x = b.one("Mul", [x, b.const("/src_embed/scale", np.asarray(emb.scale, np.float32))], "/src_embed/scaled")
        # Positions 0..S-1 are rows offset..offset+S-1 of the table: a Slice.
        first = b.ints("/src_embed/first_row", [emb.position_offset])
        end = b.one("Add", [b.one("Shape", ["src_ids"], "/shape/s", start=1, end=2), first], "/src_embed/end_row")
        pos = b.one("Slice", [b.const("src_embed.positions", emb.position_table.float()), first, end, b.ints("/shape/axis0", [0])],
                    "/src_embed/positions")
        x = b.one("Reshape", [b.one("Add", [x, pos], "/src_embed/sum"), flat_d], "/src_embed/flat")  # (N = B * S, d)
        if isinstance(emb.norm, torch.nn.LayerNorm):
            x = _layer_norm(b, x, emb.norm, "/src_embed/norm")
        layers = list(model.encoder_layers)
        norms = [norm for layer in layers for norm in (layer.sub_attn.norm, layer.sub_ffn.norm)]
        norms.append(model.encoder_norm if pre else None)
        y = _layer_norm(b, x, norms[0], "/encoder_layers.0/sub_attn/norm") if pre else x
        for i, layer in enumerate(layers):
            p = f"/encoder_layers.{i}"
            attn = layer.self_attn
            q, k, v = _qkv(b, attn, y, d, h, p)
            q, k, v = (b.one("Reshape", [t, bshd], f"{p}/self_attn/{n}_bshd") for t, n in ((q, "q"), (k, "k"), (v, "v")))
            q = b.one("Transpose", [q], f"{p}/self_attn/q_bhsd", perm=[0, 2, 1, 3])
            k = b.one("Transpose", [k], f"{p}/self_attn/k_bhds", perm=[0, 2, 3, 1])
            v = b.one("Transpose", [v], f"{p}/self_attn/v_bhsd", perm=[0, 2, 1, 3])
            scores = b.one("Add", [b.one("MatMul", [q, k], f"{p}/self_attn/scores"), src_bias], f"{p}/self_attn/scores_masked")
            probs = b.one("Softmax", [scores], f"{p}/self_attn/probs", axis=-1)
            out = b.one("Transpose", [b.one("MatMul", [probs, v], f"{p}/self_attn/mixed")], f"{p}/self_attn/out_bshd", perm=[0, 2, 1, 3])
            out = b.one("Reshape", [out, flat_d], f"{p}/self_attn/flat")
            x, y = _residual(b, out, attn.out_proj, f"{p}/self_attn/out_proj", x,
                             norms[2 * i + 1] if pre else layer.sub_attn.norm, pre)
            out = _ffn(b, layer.ffn, y, c.activation, p)
            x, y = _residual(b, out, layer.ffn.fc2, f"{p}/ffn/fc2", x,
                             norms[2 * i + 2] if pre else layer.sub_ffn.norm, pre)
        if c.final_norms and not pre:  # a post-norm stack's final LayerNorm (nn.Transformer, eole)
            y = _layer_norm(b, y, model.encoder_norm, "/encoder_norm")
        # Every decoder layer's cross-attention K and V of the memory ``y``: one MatMul (d, 2 * L * d).
        cross = [layer.cross_attn for layer in model.decoder_layers]
        weight = np.concatenate([w for a in cross for w in (_weight_t(a.k_proj), _weight_t(a.v_proj))], axis=1)
        bias = torch.cat([t for a in cross for t in (a.k_proj.bias, a.v_proj.bias)]).float()
        kv = b.one("MatMul", [y, b.const("memory_kv.weight_t", weight)], "/memory_kv/MatMul")
        kv = b.one("Add", [kv, b.const("memory_kv.bias", bias)], "/memory_kv/Add")
        parts = b.op("Split", [kv, b.ints("/memory_kv/split_sizes", [d] * 2 * len(cross))], "/memory_kv/split",
                     2 * len(cross), axis=1)
        for i in range(len(cross)):
            k = b.one("Reshape", [parts[2 * i], bshd], f"/memory_kv/{i}/k_bshd")
            v = b.one("Reshape", [parts[2 * i + 1], bshd], f"/memory_kv/{i}/v_bshd")
            b.nodes.append(helper.make_node("Transpose", [k], [graphs.memory_key(i)], name=f"/memory_kv/{i}/key", perm=[0, 2, 3, 1]))
            b.nodes.append(helper.make_node("Transpose", [v], [graphs.memory_value(i)], name=f"/memory_kv/{i}/value", perm=[0, 2, 1, 3]))
    dims = graphs.Dims(layers=c.decoder_layers, heads=h, d_k=d_k, vocab=c.tgt_vocab_size)
    return b.save(path, "nmtserve_encoder_cpu", graphs.encoder_inputs(), graphs.encoder_outputs(dims),
                  "encoder, written from the weights for ONNX Runtime's CPU provider", external_data_bytes, shared)


def _value_info(t: graphs.Tensor) -> onnx.ValueInfoProto:
    """A contract tensor as a graph input or output (float32: this graph's precision)."""
    return helper.make_tensor_value_info(t.name, helper.np_dtype_to_tensor_dtype(np.dtype(graphs.resolve_dtype(t))),
                                         list(t.axes))


@dataclass(frozen=True)
class _Shared:
    """Tensors computed once per step and read by every layer."""

    flat_d: str  # [-1, d]: (..., d) -> (N, d)
    bk: str  # [B, K]
    rows: str  # (N, T): row of layer 0's entry of each hypothesis' ancestor at each time, in the cache as (T * R * L, d)
    past_key: str  # (T * R * L, d)
    past_value: str
    src_bias: str  # (B, 1, 1, S): 0 at the source's real tokens, MASK_FILTER elsewhere
    bkhd: str  # [B, K, h, d_k]
    past_bias: str  # (N, 1, T): 0 at the past's real times, MASK_FILTER elsewhere
    eye: str  # (h, h, 1) identity: the block-diagonal query
    n1hd: str  # [-1, 1, h, d_k]
    nhd: str  # [-1, h, d]
    n_hh_dk: str  # [-1, h * h, d_k]
    diagonal: str  # [0, h + 1, 2h + 2, ...]: the diagonal blocks of (h * h, d_k)
    nd1: str  # [-1, d, 1]
    nh_dk: str  # [-1, h, d_k]
    axis1: str  # [1]
    last_axis: str  # [-1]
    zero_1: str  # [0]
    minus1: str  # [-1]
    end: str  # [INT64_MAX]


def _shared(b: _Builder, d: int, h: int, n_layers: int) -> _Shared:
    flat_d, axis1 = b.ints("/shape/flat_d", [-1, d]), b.ints("/shape/axis1", [1])
    bk = b.one("Shape", ["input_ids"], "/shape/bk")
    bkt = b.one("Shape", ["cache_rows"], "/shape/bkt")
    t_len = b.one("Slice", [bkt, b.ints("/shape/2", [2]), b.ints("/shape/3", [3])], "/shape/t")  # [T]
    minus1 = b.ints("/shape/minus1", [-1])
    nt = b.one("Concat", [minus1, t_len], "/shape/nt", axis=0)
    # (time t, cache row r, layer 0) is row (t * R + r) * L of the cache viewed as (T * R * L, d).
    past_shape = b.one("Shape", ["past_key"], "/shape/past")
    zero, one = b.const("/shape/zero", np.asarray(0, np.int64)), b.const("/shape/one", np.asarray(1, np.int64))
    times = b.one("Range", [zero, b.one("Gather", [past_shape, zero], "/shape/past_t", axis=0), one], "/rows/times")
    offset = b.one("Mul", [times, b.one("Gather", [past_shape, one], "/shape/past_r", axis=0)], "/rows/time_offset")
    rows = b.one("Add", ["cache_rows", b.one("Cast", [offset], "/rows/time_offset32", to=TensorProto.INT32)], "/rows/plus_time")
    rows = b.one("Mul", [rows, b.const("/rows/layers", np.asarray(n_layers, np.int32))], "/rows/layer0")
    rows = b.one("Reshape", [rows, nt], "/rows/flat")
    past_key, past_value = (b.one("Reshape", [name, flat_d], f"/{name}/flat") for name in ("past_key", "past_value"))
    bias = b.one("Where", ["past_mask", b.const("/past_bias/real", np.asarray(0, np.float32)),
                                        b.const("/past_bias/masked", np.asarray(MASK_FILTER, np.float32))], "/past_bias/bt")
    bias = b.one("Expand", [b.one("Unsqueeze", [bias, axis1], "/past_bias/b1t"), bkt], "/past_bias/bkt")
    n1t = b.one("Concat", [b.ints("/shape/minus1_1", [-1, 1]), t_len], "/shape/n1t", axis=0)
    bias = b.one("Reshape", [bias, n1t], "/past_bias/n1t")
    src_bias = b.one("Where", ["src_mask", "/past_bias/real", "/past_bias/masked"], "/src_bias/bs")
    src_bias = b.one("Unsqueeze", [src_bias, b.ints("/shape/axes12", [1, 2])], "/src_bias/b11s")
    d_k = d // h
    bkhd = b.one("Concat", [bk, b.ints("/shape/hd", [h, d_k])], "/shape/bkhd", axis=0)
    return _Shared(flat_d=flat_d, bk=bk, rows=rows, past_key=past_key, past_value=past_value,
                   src_bias=src_bias, bkhd=bkhd, past_bias=bias, eye=b.const("/shape/eye", np.eye(h, dtype=np.float32)[:, :, None]),
                   n1hd=b.ints("/shape/n1hd", [-1, 1, h, d_k]), nhd=b.ints("/shape/nhd", [-1, h, d]),
                   n_hh_dk=b.ints("/shape/n_hh_dk", [-1, h * h, d_k]), diagonal=b.ints("/shape/diagonal", [j * (h + 1) for j in range(h)]),
                   nd1=b.ints("/shape/nd1", [-1, d, 1]), nh_dk=b.ints("/shape/nh_dk", [-1, h, d_k]), axis1=axis1, last_axis=b.ints("/shape/last_axis", [-1]), zero_1=b.ints("/shape/zero_1", [0]),
                   minus1=minus1, end=b.ints("/shape/end", [np.iinfo(np.int64).max]))


def _embed(b: _Builder, model: Transformer, shared: _Shared) -> str:
    """Token embedding * scale + position row (+ LayerNorm): (N, d)."""
    emb = model.tgt_embed
    table = b.const("tgt_embed.lut.weight", emb.lut.weight.float())
    x = b.one("Gather", [table, "input_ids"], "/tgt_embed/tokens", axis=0)  # (B, K, d)
    if emb.scale != 1.0:
        x = b.one("Mul", [x, b.const("/tgt_embed/scale", np.asarray(emb.scale, np.float32))], "/tgt_embed/scaled")
    position = "position"
    if emb.position_offset:
        position = b.one("Add", [position, b.const("/tgt_embed/offset", np.asarray(emb.position_offset, np.int32))], "/tgt_embed/rows")
    pos = b.one("Gather", [b.const("tgt_embed.positions", emb.position_table.float()), position], "/tgt_embed/positions", axis=0)
    pos = b.one("Unsqueeze", [pos, shared.axis1], "/tgt_embed/positions_b1d")
    x = b.one("Add", [x, pos], "/tgt_embed/sum")
    x = b.one("Reshape", [x, shared.flat_d], "/tgt_embed/flat")
    if isinstance(emb.norm, torch.nn.LayerNorm):
        x = _layer_norm(b, x, emb.norm, "/tgt_embed/norm")
    return x


def _layer_norm(b: _Builder, x: str, norm: torch.nn.LayerNorm, name: str) -> str:
    return b.one("LayerNormalization", [x, b.const(f"{name}.weight", norm.weight.float()), b.const(f"{name}.bias", norm.bias.float())],
                 name, axis=-1, epsilon=float(norm.eps))


def _linear(b: _Builder, x: str, linear: torch.nn.Linear, name: str) -> str:
    """x @ W (+ b): a MatMul and an Add that ONNX Runtime fuses into a Gemm (2-D x)."""
    y = b.one("MatMul", [x, b.const(f"{name}.weight_t", _weight_t(linear))], f"{name}/MatMul")
    if linear.bias is not None:
        y = b.one("Add", [y, b.const(f"{name}.bias", linear.bias.float())], f"{name}/Add")
    return y


def _qkv(b: _Builder, attn, y: str, d: int, h: int, p: str) -> list[str]:
    """The self-attention's query, key and value of ``y`` (N, d): one MatMul on the three weights
    side by side and a Split; 1/sqrt(d_k) folded into the query's weights."""
    scale = 1.0 / math.sqrt(d // h)
    weight = np.concatenate([_weight_t(attn.q_proj) * scale, _weight_t(attn.k_proj), _weight_t(attn.v_proj)], axis=1)
    bias = torch.cat([attn.q_proj.bias * scale, attn.k_proj.bias, attn.v_proj.bias]).float()
    qkv = b.one("MatMul", [y, b.const(f"{p}.self_attn.qkv_proj.weight_t", weight)], f"{p}/self_attn/qkv_proj/MatMul")
    qkv = b.one("Add", [qkv, b.const(f"{p}.self_attn.qkv_proj.bias", bias)], f"{p}/self_attn/qkv_proj/Add")
    return b.op("Split", [qkv, b.ints(f"{p}/self_attn/split_sizes", [d, d, d])], f"{p}/self_attn/split", 3, axis=1)


def _self_attention(b: _Builder, shared: _Shared, attn, y: str, i: int, d: int, h: int, p: str) -> tuple[str, str, str]:
    """-> the attention output before out_proj (N, d), and the new key and value (N, d).

    As ``MultiHeadAttention.self_step``: the past is gathered a whole row (every head) at a time,
    every head is scored in one MatMul against a block-diagonal query (row j holds head j's query
    in block j), and the new entry is scored on its own, so the cache is never concatenated."""
    q, k, v = _qkv(b, attn, y, d, h, p)
    rows = shared.rows if i == 0 else b.one("Add", [shared.rows, b.const(f"{p}/rows/layer", np.asarray(i, np.int32))], f"{p}/rows")
    past_k = b.one("Gather", [shared.past_key, rows], f"{p}/self_attn/past_k", axis=0)  # (N, T, d)
    past_v = b.one("Gather", [shared.past_value, rows], f"{p}/self_attn/past_v", axis=0)
    q_blocks = b.one("Mul", [b.one("Reshape", [q, shared.n1hd], f"{p}/self_attn/q_n1hd"), shared.eye], f"{p}/self_attn/q_blocks")
    q_blocks = b.one("Reshape", [q_blocks, shared.nhd], f"{p}/self_attn/q_nhd")  # (N, h, d)
    s_past = b.one("FusedMatMul", [q_blocks, past_k], f"{p}/self_attn/scores_past", domain=CONTRIB, transB=1)  # (N, h, T)
    s_past = b.one("Add", [s_past, shared.past_bias], f"{p}/self_attn/scores_masked")
    # The new entry's score against the same block-diagonal query: (N, h, d) @ (N, d, 1).
    s_new = b.one("MatMul", [q_blocks, b.one("Reshape", [k, shared.nd1], f"{p}/self_attn/k_new_column")],
                  f"{p}/self_attn/scores_new")  # (N, h, 1)
    probs = _softmax_in_any_window(b, b.one("Concat", [s_past, s_new], f"{p}/self_attn/scores", axis=-1), f"{p}/self_attn/probs")
    p_past = b.one("Slice", [probs, shared.zero_1, shared.minus1, shared.last_axis], f"{p}/self_attn/probs_past")
    p_new = b.one("Slice", [probs, shared.minus1, shared.end, shared.last_axis], f"{p}/self_attn/probs_new")
    mixed = b.one("MatMul", [p_past, past_v], f"{p}/self_attn/mixed")  # (N, h, d): block j of row j is head j's
    mixed = b.one("Reshape", [mixed, shared.n_hh_dk], f"{p}/self_attn/mixed_blocks")  # (N, h * h, d_k)
    out = b.one("Gather", [mixed, shared.diagonal], f"{p}/self_attn/out_past", axis=1)  # blocks (j, j): (N, h, d_k)
    v_h = b.one("Reshape", [v, shared.nh_dk], f"{p}/self_attn/v_heads")
    out = b.one("Add", [out, b.one("Mul", [p_new, v_h], f"{p}/self_attn/out_new")], f"{p}/self_attn/out")
    return b.one("Reshape", [out, shared.flat_d], f"{p}/self_attn/flat"), k, v


def _softmax_in_any_window(b: _Builder, scores: str, name: str) -> str:
    """Softmax over the last axis whose result does not depend on where a row's real entries sit.

    A hypothesis' past sits at the times since its sentence joined the running batch: alone from
    time 0, in a batch from whatever step it joined, with masked entries before. ``Softmax``'s
    vectorized sum groups the entries by their offset, so the same scores summed at another
    offset round differently (1e-7 in the demo's scores, enough to flip an int8 activation code
    downstream). The sum here is taken in float64 and rounded once to float32: the same float32
    whatever the order, bar a double rounding on a tie (about 2e-9 of sums)."""
    top = b.one("ReduceMax", [scores], f"{name}/max", axes=[-1], keepdims=1)
    e = b.one("Exp", [b.one("Sub", [scores, top], f"{name}/shifted")], f"{name}/exp")
    total = b.one("ReduceSum", [b.one("Cast", [e], f"{name}/exp64", to=TensorProto.DOUBLE), b.ints(f"{name}/axis", [-1])],
                  f"{name}/sum64", keepdims=1)
    return b.one("Div", [e, b.one("Cast", [total], f"{name}/sum", to=TensorProto.FLOAT)], name)


def _cross_attention(b: _Builder, shared: _Shared, attn, y: str, i: int, d: int, h: int, p: str) -> tuple[str, str]:
    """A sentence's K beams are the rows of its query: (N, d) -> (B, h, K, d_k) against the memory
    keys (B, h, d_k, S) and values (B, h, S, d_k) -> (N, d)."""
    scale = 1.0 / math.sqrt(d // h)  # folded into the query's weights
    q = b.one("MatMul", [y, b.const(f"{p}.cross_attn.q_proj.weight_t", _weight_t(attn.q_proj) * scale)], f"{p}/cross_attn/q_proj/MatMul")
    q = b.one("Add", [q, b.const(f"{p}.cross_attn.q_proj.bias", (attn.q_proj.bias * scale).float())], f"{p}/cross_attn/q_proj/Add")
    q = b.one("Transpose", [b.one("Reshape", [q, shared.bkhd], f"{p}/cross_attn/q_bkhd")], f"{p}/cross_attn/q_bhkd", perm=[0, 2, 1, 3])
    scores = b.one("MatMul", [q, graphs.memory_key(i)], f"{p}/cross_attn/scores")  # (B, h, K, S)
    probs = b.one("Softmax", [b.one("Add", [scores, shared.src_bias], f"{p}/cross_attn/scores_masked")], f"{p}/cross_attn/probs", axis=-1)
    out = b.one("MatMul", [probs, graphs.memory_value(i)], f"{p}/cross_attn/mixed")  # (B, h, K, d_k)
    out = b.one("Transpose", [out], f"{p}/cross_attn/out_bkhd", perm=[0, 2, 1, 3])
    return b.one("Reshape", [out, shared.flat_d], f"{p}/cross_attn/flat"), probs


def _ffn(b: _Builder, ffn, y: str, activation: str, p: str) -> str:
    hidden = _linear(b, y, ffn.fc1, f"{p}/ffn/fc1")
    if activation == "relu":
        hidden = b.one("Relu", [hidden], f"{p}/ffn/relu")
    elif activation == "gelu":  # erf GELU, as torch's F.gelu
        hidden = b.one("Gelu", [hidden], f"{p}/ffn/gelu", domain=CONTRIB)
    else:
        hidden = b.one("Mul", [hidden, b.one("Sigmoid", [hidden], f"{p}/ffn/sigmoid")], f"{p}/ffn/swish")
    return hidden  # fc2 is the residual's projection


def _residual(b: _Builder, out: str, proj: torch.nn.Linear, name: str, x: str, norm: torch.nn.LayerNorm,
              pre_norm: bool) -> tuple[str, str]:
    """x + out @ W + bias, then ``norm``: -> (the residual stream, what the next sublayer reads).

    Post-norm: ``norm`` is the sublayer's own and LN(x + y) is both. Pre-norm: the stream is the
    sum and ``norm`` is the next sublayer's (the decoder's final norm after the last)."""
    total = b.one("Add", [x, _linear(b, out, proj, name)], f"{name}/residual")
    normed = _layer_norm(b, total, norm, f"{name}/norm")
    return (total, normed) if pre_norm else (normed, normed)


def _outputs(b: _Builder, model: Transformer, y: str, new_k: list[str], new_v: list[str], dims: graphs.Dims,
             shared: _Shared) -> None:
    gen = model.generator
    if gen.weight is model.tgt_embed.lut.weight:  # tied: the Gather's own table, held once (and once in int8)
        logits = b.one("Gemm", [y, "tgt_embed.lut.weight"], "/generator/Gemm", transB=1)
    else:
        logits = b.one("MatMul", [y, b.const("generator.weight_t", _weight_t(gen))], "/generator/MatMul")
    if model.config.final_logits_bias:
        logits = b.one("Add", [logits, b.const("final_logits_bias", model.final_logits_bias.float())], "/generator/bias")
    log_probs = b.one("LogSoftmax", [logits], "/log_softmax", axis=-1)
    log_probs = b.one("Add", [log_probs, b.const("logits_mask", model.logits_mask.float())], "/logits_mask")
    bkv = b.one("Concat", [shared.bk, b.ints("/shape/v", [dims.vocab])], "/shape/bkv", axis=0)
    bkc = b.one("Concat", [shared.bk, b.ints("/shape/c", [dims.candidates])], "/shape/bkc", axis=0)
    b.nodes.append(helper.make_node("Reshape", [log_probs, bkv], ["log_probs"], name="/log_probs"))
    top, ids = b.op("TopK", [log_probs, b.ints("/top/k", [dims.candidates])], "/top", 2, axis=-1, largest=1, sorted=1)
    b.nodes.append(helper.make_node("Reshape", [top, bkc], ["top_log_probs"], name="/top_log_probs"))
    ids = b.one("Cast", [ids], "/top/ids32", to=TensorProto.INT32)
    b.nodes.append(helper.make_node("Reshape", [ids, bkc], ["top_ids"], name="/top_ids"))
    new_shape = b.one("Concat", [shared.bk, b.ints("/shape/lhd", [dims.layers, dims.heads, dims.d_k])], "/shape/new_kv", axis=0)
    for name, parts in (("new_key", new_k), ("new_value", new_v)):
        stacked = b.one("Concat", parts, f"/{name}/stack", axis=1) if len(parts) > 1 else parts[0]  # (N, L * d)
        b.nodes.append(helper.make_node("Reshape", [stacked, new_shape], [name], name=f"/{name}"))
