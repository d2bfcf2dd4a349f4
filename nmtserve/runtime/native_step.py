"""The decoder's step in compiled code, from the fused CPU graph's weights (issue 49).

``nmtserve_native.DecoderStep`` (native/src/decoder_step.cpp) computes what
``nmtserve.export.cpu_graph``'s decoder computes for a step, in one call: no graph executor, no
shape nodes, the cache read where it lies, ~25 kernel calls a layer instead of ~60 nodes. The
graph stays the reference and the fallback: this module reads its weights out of the graph file
(the builder names them by role), so a repository needs nothing new, and checks the graph is one
the step can run: written by ``cpu_graph``, fp32 or int8 as ``quantize`` writes it (the portable
graph of the GPU target and graphs of other writers run on ONNX Runtime as before).

Its arithmetic is its own (fused multiply-adds in a fixed order, a polynomial ``exp``), so it
rounds differently from ONNX Runtime's kernels: tests/test_native_step.py holds it to the graph's
outputs within float32 noise, to the PyTorch reference's decodes token for token, and to batch
invariance bit for bit (a sentence's step is the same alone, in any batch and at any offset of its
past in the cache window: by construction, with no float64 sums).

Served by default wherever the graph allows it (``OnnxModel`` on the CPU provider) and it was
measured faster (bench/native_step.py): int8 at every size, fp32 up to ``FP32_LARGEST_D_MODEL``.
``NMTSERVE_NATIVE_STEP=0`` turns it off (ONNX Runtime runs the graph); ``=1`` asks for it at any
size and warns where it cannot be had.

The weights are read from the graph's data file through a read-only memory map, not loaded into
the graph's protobuf: the products' weights are packed into the step's own arrays and the tables
(embeddings, positions, norms) are read in place.

**int8** graphs (``nmtserve/export/quantize.py``'s: rows quantized alone, weights per column,
``MatMulIntegerToFloat`` / ``QGemm``) run compiled too, product by product in whichever precision
the graph holds it (``--int8-keep-fp32`` groups stay fp32): the rows are quantized as the graph
quantizes them and their codes summed in int32 (native/src/int8.h; AVX-512 VNNI, AVX2 or portable
code: the same bits from each), then scaled in the graph's order. Where float32 noise elsewhere
in the step moves a value across a rounding boundary of its row's codes, a code differs by one
from ONNX Runtime's: tests/test_native_step.py bounds the effect and holds the served decodes of
held-out sentences to ONNX Runtime's int8 decodes; int8 graphs in other forms (ONNX Runtime's
per-tensor dynamic quantization) stay on ONNX Runtime.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .. import graphs
from ..decoding import native
from . import vocabulary
from .spec import ModelSpec

log = logging.getLogger(__name__)

ENV = "NMTSERVE_NATIVE_STEP"
ACTIVATIONS = {"relu": 0, "gelu": 1, "swish": 2}
# nmtserve/export/quantize.py's constants, by its names (ZERO_POINT, the row scale's levels and floor).
INT8_SCHEME = {"int8/zero_point": 128, "int8/levels": 127.0, "int8/one": 1.0, "int8/tiny": 1e-30}


# Where the compiled step serves fp32 by default: measured against ONNX Runtime in alternating rounds
# (bench/native_step.py, bench/RESULTS.md session 19): faster at d_model 192 (demo: 1.5x one
# sentence, 1.08x bulk) and 256 (student: 1.19x / 1.33x), slower at 512 (opus-mt-base shape: 0.87-0.99x
# / 0.89-0.90x, its 58k-word projection). int8 is compiled at every size (base: 1.4-1.6x / 1.0x).
FP32_LARGEST_D_MODEL = 256


class Unsupported(ValueError):
    """The decoder graph is not one the compiled step runs (it stays on ONNX Runtime)."""


class _GraphReader:
    """A fused CPU graph, checked to be one the compiled ``what`` computes (written by cpu_graph.py
    as ``graph_name``, fp32 or int8 as quantize.py writes it), and the ``config`` and ``weights``
    being read out of it, by the builder's names, for ``DecoderStep`` / ``EncoderStep``."""

    def __init__(self, path: Path, graph_name: str, part: str, what: str):
        import onnx

        self.path = path
        self.g = g = onnx.load(str(path), load_external_data=False).graph
        if g.name != graph_name:
            raise Unsupported(f"{path.name} is not the fused CPU {part} (graph {g.name!r})")
        ops = {n.op_type for n in g.node}
        other = ops & {"DynamicQuantizeMatMul", "MatMulInteger", "DynamicQuantizeLinear", "QLinearMatMul", "MatMulNBits"}
        if other:
            raise Unsupported(f"{path.name} is quantized in a form the compiled {what} does not compute "
                              f"({', '.join(sorted(other))})")
        self.init = {t.name: t for t in g.initializer}
        self.nodes = {n.name: n for n in g.node}
        if ops & {"MatMulIntegerToFloat", "QGemm"}:
            _check_int8_scheme(path, self.init, self.nodes)
        self.weights: dict[str, np.ndarray] = {}
        self.config: dict = {"eps": {}}

    def array(self, name: str) -> np.ndarray:
        """An initializer's array (mapped where external); floats must be float32."""
        if name not in self.init:
            raise Unsupported(f"{self.path.name} has no initializer {name!r}")
        a = _initializer(self.init[name], self.path.parent)
        if a.dtype != np.float32 and a.dtype.kind == "f":
            raise Unsupported(f"{name} is {a.dtype}, not float32")
        return a

    def int8(self, name: str, suffix: str) -> tuple[np.ndarray, np.ndarray] | None:
        """``name``'s int8 codes and scales (quantize.py's ``{name}.int8_{suffix}``), if the graph has them."""
        codes, scale = f"{name}.int8_{suffix}", f"{name}.scale_{suffix}"
        if codes not in self.init:
            return None
        return _initializer(self.init[codes], self.path.parent), self.array(scale)

    def product(self, key: str, name: str, bias: str | None = None) -> None:
        """A product's weight (K, N) as ``key.w`` fp32, or ``key.w8`` / ``key.ws`` int8 per column;
        ``bias`` as ``key.b`` where the graph has it."""
        q = self.int8(name, "cols")
        if q is None:
            self.weights[f"{key}.w"] = self.array(name)
        else:
            self.weights[f"{key}.w8"], self.weights[f"{key}.ws"] = q
        if bias is not None and bias in self.init:
            self.weights[f"{key}.b"] = self.array(bias)

    def norm(self, key: str, node_name: str) -> None:
        """A LayerNormalization node's weight, bias and epsilon as ``key``."""
        self.weights[f"{key}.w"] = self.array(f"{node_name}.weight")
        self.weights[f"{key}.b"] = self.array(f"{node_name}.bias")
        self.config["eps"][key] = next((a.f for a in self.nodes[node_name].attribute if a.name == "epsilon"), 1e-5)

    def stack(self, embed: str, stack: str, first: str) -> tuple[bool, str]:
        """A stack's norms outside its layers (the embedding's, the first layer's input norm of a
        pre-norm stack, a final norm) -> (pre-norm, the activation)."""
        if f"/{embed}/norm" in self.nodes:
            self.norm("embed_norm", f"/{embed}/norm")
        pre_norm = f"/{stack}_layers.0/{first}/norm" in self.nodes
        if pre_norm:
            self.norm("first_norm", f"/{stack}_layers.0/{first}/norm")
        if f"/{stack}_norm" in self.nodes:
            self.norm("final_norm", f"/{stack}_norm")
        activation = next((a for a in ACTIVATIONS if f"/{stack}_layers.0/ffn/{a}" in self.nodes), None)
        if activation is None:
            raise Unsupported(f"the {stack}'s feed-forward activation is not relu, gelu or swish")
        return pre_norm, activation

    def result(self) -> tuple[dict, dict[str, np.ndarray]]:
        """(config with ``int8``, the weights contiguous: int8 codes (``*8`` keys) and float32)."""
        codes = {k for k in self.weights if k.endswith("8")}  # int8 codes: key.w8, embed.w8, generator.table8
        self.config["int8"] = bool(codes)
        return self.config, {k: np.ascontiguousarray(v, dtype=np.int8 if k in codes else np.float32)
                             for k, v in self.weights.items()}


def read_cpu_decoder(path: Path, spec: ModelSpec, share_table: bool = True) -> tuple[dict, dict[str, np.ndarray]]:
    """(config, weights) of a fused CPU decoder graph, as ``DecoderStep`` takes them. With
    ``share_table``, an int8 table that is both the embedding and the tied projection is held once:
    the step reads the embedding's rows out of the projection's packed panels (``embed_in_generator``)."""
    path = Path(path)
    r = _GraphReader(path, "nmtserve_decoder_cpu", "decoder", "step")
    init, array, weights, config = r.init, r.array, r.weights, r.config
    table = "tgt_embed.lut.weight"
    q = r.int8(table, "rows")
    if q is not None and any(n.op_type == "Gather" and n.input[0] == f"{table}.int8_rows" for n in r.g.node):
        weights["embed.w8"], weights["embed.rows_scale"] = q
    else:
        weights["embed"] = array(table)
    d = int(weights["embed.w8" if "embed.w8" in weights else "embed"].shape[1])
    weights["positions"] = array("tgt_embed.positions")
    config["embed_scale"] = float(array("/tgt_embed/scale").reshape(-1)[0]) if "/tgt_embed/scale" in init else 1.0
    config["position_offset"] = int(array("/tgt_embed/offset").reshape(-1)[0]) if "/tgt_embed/offset" in init else 0
    pre_norm, activation = r.stack("tgt_embed", "decoder", "sub_self")
    attention = r.nodes.get("/attention")
    if attention is None:
        raise Unsupported("the graph has no attention output")
    align = int(attention.input[0].split("/")[1].split(".")[1])  # /decoder_layers.{i}/cross_attn/probs_out
    for i in range(spec.layers):
        p = f"/decoder_layers.{i}"
        r.product(f"{i}.qkv", f"{p}.self_attn.qkv_proj.weight_t")
        weights[f"{i}.qkv.b"] = array(f"{p}.self_attn.qkv_proj.bias")
        r.product(f"{i}.cross_q", f"{p}.cross_attn.q_proj.weight_t")
        weights[f"{i}.cross_q.b"] = array(f"{p}.cross_attn.q_proj.bias")
        for key, name in (("self_out", f"{p}/self_attn/out_proj"), ("cross_out", f"{p}/cross_attn/out_proj"),
                          ("fc1", f"{p}/ffn/fc1"), ("fc2", f"{p}/ffn/fc2")):
            r.product(f"{i}.{key}", f"{name}.weight_t", f"{name}.bias")
        for key, name in (("self_norm", f"{p}/self_attn/out_proj/norm"), ("cross_norm", f"{p}/cross_attn/out_proj/norm"),
                          ("ffn_norm", f"{p}/ffn/fc2/norm")):
            r.norm(f"{i}.{key}", name)
    # The projection: Gemm on the table (tied; QGemm on its int8 rows), or MatMul on generator.weight_t.
    generator = {n.op_type for n in r.g.node if n.name.startswith("/generator/")}
    tied = bool(generator & {"Gemm", "QGemm"})
    if "QGemm" in generator:
        q = r.int8(table, "rows")
        if q is None:
            raise Unsupported(f"{path.name}: the int8 projection's table is missing")
        weights["generator.table8"], weights["generator.table_scale"] = q
        if share_table and "embed.w8" in weights:  # the same initializers (the Gather's and QGemm's)
            del weights["embed.w8"], weights["embed.rows_scale"]
            config["embed_in_generator"] = True
            config["table"] = _table_identity(r.init[f"{table}.int8_rows"], path.parent), np.array(q[1])
    elif tied:
        weights["generator.table"] = array(table)
    else:
        r.product("generator", "generator.weight_t")
    if "final_logits_bias" in init:
        weights["final_bias"] = array("final_logits_bias")
    weights["logits_mask"] = array("logits_mask")
    # A graph exported before the attention output (or with it taken out) does not offer it.
    config["has_attention"] = graphs.ATTENTION in {o.name for o in r.g.output}
    config.update(d_model=d, heads=spec.heads, layers=spec.layers, vocab=spec.vocab,
                  d_ff=int(weights["0.fc1.w" if "0.fc1.w" in weights else "0.fc1.w8"].shape[1]), candidates=int(array("/top/k")[0]),
                  activation=ACTIVATIONS[activation], alignment_layer=align, pre_norm=pre_norm, tied=tied)
    return r.result()


def read_cpu_encoder(path: Path, spec: ModelSpec, shared_table: tuple | None = None) -> tuple[dict, dict[str, np.ndarray]]:
    """(config, weights) of a fused CPU encoder graph (``cpu_graph.build_cpu_encoder``, fp32 or int8
    as ``quantize`` writes it), as ``EncoderStep`` takes them. ``shared_table``: a compiled decoder's
    int8 table (its ``table`` attribute); where the source's table is the same codes (the same bytes
    of the same file, or equal arrays) and scales, it is not read: ``embed_from_decoder``."""
    path = Path(path)
    r = _GraphReader(path, "nmtserve_encoder_cpu", "encoder", "encoder")
    init, array, weights = r.init, r.array, r.weights
    # The token table: the Gather of src_ids (its int8 rows and row scales where quantized).
    table = next((n.input[0] for n in r.g.node if n.op_type == "Gather" and n.input[1:] == ["src_ids"]
                  and not n.input[0].endswith(".scale_rows")), None)
    if table is None:
        raise Unsupported(f"{path.name}: no embedding table gathers src_ids")
    q = r.int8(table.removesuffix(".int8_rows"), "rows") if table.endswith(".int8_rows") else None
    if q is not None and shared_table is not None and _table_identity(init[table], path.parent) == shared_table[0] \
            and np.array_equal(q[1], shared_table[1]):
        r.config["embed_from_decoder"] = True
    elif q is not None:
        weights["embed.w8"], weights["embed.rows_scale"] = q
    else:
        weights["embed"] = array(table)
    weights["positions"] = array("src_embed.positions")
    pre_norm, activation = r.stack("src_embed", "encoder", "sub_attn")
    layers = 0
    while f"/encoder_layers.{layers}/self_attn/out_proj/norm" in r.nodes:
        p = f"/encoder_layers.{layers}"
        r.product(f"{layers}.qkv", f"{p}.self_attn.qkv_proj.weight_t", f"{p}.self_attn.qkv_proj.bias")
        for key, name in (("self_out", f"{p}/self_attn/out_proj"), ("fc1", f"{p}/ffn/fc1"), ("fc2", f"{p}/ffn/fc2")):
            r.product(f"{layers}.{key}", f"{name}.weight_t", f"{name}.bias")
        r.norm(f"{layers}.self_norm", f"{p}/self_attn/out_proj/norm")
        r.norm(f"{layers}.ffn_norm", f"{p}/ffn/fc2/norm")
        layers += 1
    if not layers:
        raise Unsupported(f"{path.name} has no encoder layers the compiled encoder knows")
    r.product("memory_kv", "memory_kv.weight_t", "memory_kv.bias")
    fc1 = weights["0.fc1.w" if "0.fc1.w" in weights else "0.fc1.w8"]
    r.config.update(
        d_model=int(weights["positions"].shape[1]), heads=spec.heads, layers=layers, memory_layers=spec.layers,
        d_ff=int(fc1.shape[1]), activation=ACTIVATIONS[activation], pre_norm=pre_norm,
        embed_scale=float(array("/src_embed/scale").reshape(-1)[0]) if "/src_embed/scale" in init else 1.0,
        position_offset=int(array("/src_embed/first_row").reshape(-1)[0]),
        pad_id=int(array("/mask/pad").reshape(-1)[0]))
    return r.result()


def _check_int8_scheme(path: Path, init: dict, nodes: dict) -> None:
    """An int8 graph is one the compiled step computes when nmtserve/export/quantize.py wrote it:
    rows quantized with max(max|x|, 1e-30) / 127 around 128, weights symmetric int8 per column or
    per table row (its constants, by the names it gives them)."""
    from onnx import numpy_helper

    for name, value in INT8_SCHEME.items():
        if name not in init or np.float32(numpy_helper.to_array(init[name]).reshape(-1)[0]) != np.float32(value):
            raise Unsupported(f"{path.name} is quantized, but not as nmtserve's int8 export writes it ({name})")
    for node in nodes.values():
        weight = {"MatMulIntegerToFloat": 1, "QGemm": 3}.get(node.op_type)
        if weight is not None and not node.input[weight].endswith((".int8_cols", ".int8_rows")):
            raise Unsupported(f"{path.name}: {node.name} is not one of nmtserve's int8 products")


def _table_identity(tensor, folder: Path) -> tuple:
    """What identifies an initializer's bytes: its external file, offset and length, or (inline) a
    digest of them."""
    from onnx import TensorProto

    if tensor.data_location == TensorProto.EXTERNAL:
        info = {e.key: e.value for e in tensor.external_data}
        return ("file", str((folder / info["location"]).resolve()), int(info.get("offset", 0)),
                info.get("length"), tuple(tensor.dims))
    from onnx import numpy_helper

    data = tensor.raw_data or numpy_helper.to_array(tensor).tobytes()
    return ("inline", hashlib.sha256(data).hexdigest(), tuple(tensor.dims))


def _initializer(tensor, folder: Path) -> np.ndarray:
    """An initializer's array; one in an external data file, mapped read-only (no copy)."""
    from onnx import TensorProto, helper, numpy_helper

    if tensor.data_location != TensorProto.EXTERNAL:
        return numpy_helper.to_array(tensor)
    info = {e.key: e.value for e in tensor.external_data}
    dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tensor.data_type))
    shape = tuple(tensor.dims)
    offset = int(info.get("offset", 0))
    count = int(np.prod(shape, dtype=np.int64))
    if "length" in info and int(info["length"]) != count * dtype.itemsize:
        raise Unsupported(f"{tensor.name}: its external data is {info['length']} bytes, not {count * dtype.itemsize}")
    return np.memmap(folder / info["location"], dtype=dtype, mode="r", offset=offset, shape=shape)


def _compiled_part(class_name: str, read, path: Path, spec: ModelSpec, fp32_largest_d_model: int | None,
                   what: str, d_model: Callable[[dict], int] = lambda config: config["d_model"],
                   **build) -> tuple[Any, dict]:
    """(``nmtserve_native.<class_name>`` built from the weights ``read`` reads (and ``build``'s
    keywords), the config read); Unsupported where the module lacks it, or for an fp32 graph whose
    ``d_model(config)`` is wider than ``fp32_largest_d_model`` (ONNX Runtime is faster there)."""
    built = getattr(native.module, class_name, None)
    if built is None:
        raise Unsupported("nmtserve_native is not installed")
    config, weights = read(path, spec)
    int8 = config.pop("int8")
    if fp32_largest_d_model is not None and not int8 and (width := d_model(config)) > fp32_largest_d_model:
        raise Unsupported(f"at d_model {width} its fp32 kernels are faster ({ENV}=1 asks for the compiled {what})")
    return built(config, weights, **build), config


class NativeDecoder:
    """``run_step`` of the decoder contract (``nmtserve.graphs``) on ``nmtserve_native.DecoderStep``."""

    def __init__(self, path: Path, spec: ModelSpec, fp32_largest_d_model: int | None = None,
                 share_table: bool = True):
        """``fp32_largest_d_model``: refuse an fp32 graph of a larger d_model (where ONNX Runtime is
        faster). ``share_table``: a tied int8 table held once, in the projection's panels (the
        embedding read from them; an encoder of the same table may read them too: ``table``)."""
        # The repository's restricted vocabularies (runtime/vocabulary.py: an export's opt-in), built into the step.
        restrictions = vocabulary.load(Path(path).parent) if vocabulary.enabled() else []
        self.vocabularies = vocabulary.Vocabularies(restrictions) if restrictions else None

        def read(path: Path, spec: ModelSpec) -> tuple[dict, dict[str, np.ndarray]]:
            config, weights = read_cpu_decoder(path, spec, share_table=share_table)
            if self.vocabularies is not None:
                config["vocabularies"] = self.vocabularies.arrays()
            return config, weights

        self.step, config = _compiled_part("DecoderStep", read, path, spec, fp32_largest_d_model, "step",
                                           lambda config: spec.heads * spec.d_k)  # the spec's, as it always was
        # (identity of the table's codes, its rows' scales) when the panels hold the embedding, else None
        self.table: tuple | None = config.get("table")
        self.has_attention = config["has_attention"]
        self.layers = spec.layers
        self.kernels = self.step.kernels

    def run_step(self, feeds: dict, outputs: Sequence[str] = graphs.STEP_OUTPUTS,
                 vocabularies: np.ndarray | None = None) -> dict:
        """The decoder graph's outputs for ``feeds``; ``vocabularies`` (int32, per sentence): its
        restricted vocabulary (``self.vocabularies``' index; -1: the whole), or None for none."""
        out = self.step.run(
            np.ascontiguousarray(feeds["input_ids"], dtype=np.int32), np.ascontiguousarray(feeds["position"], dtype=np.int32),
            np.ascontiguousarray(feeds["past_key"], dtype=np.float32), np.ascontiguousarray(feeds["past_value"], dtype=np.float32),
            np.ascontiguousarray(feeds["cache_rows"], dtype=np.int32), np.ascontiguousarray(feeds["past_mask"], dtype=bool),
            [np.ascontiguousarray(feeds[graphs.memory_key(i)], dtype=np.float32) for i in range(self.layers)],
            [np.ascontiguousarray(feeds[graphs.memory_value(i)], dtype=np.float32) for i in range(self.layers)],
            np.ascontiguousarray(feeds["src_mask"], dtype=bool),
            attention=graphs.ATTENTION in outputs, log_probs="log_probs" in outputs, vocabularies=vocabularies)
        return {name: out[name] for name in outputs}

    def run_pool(self, b: int, g: int, tokens: np.ndarray, steps: np.ndarray, pool_key: np.ndarray,
                 pool_value: np.ndarray, table: np.ndarray, start: np.ndarray, src_len: np.ndarray,
                 memory_keys: Sequence[np.ndarray], memory_values: Sequence[np.ndarray],
                 attention: bool = False, log_probs: bool = False, memory_rows: np.ndarray | None = None,
                 vocabularies: np.ndarray | None = None) -> dict:
        """The served engine's step on its own arrays, with no feeds built (``DecoderStep.run_pool``):
        rows ``[0, b)`` of a beam-width group (``tokens`` (>= b, K) and ``steps`` (>= b,) the search's,
        int64), each row's past the pool times ``[start, g)`` through ``table`` (rows, K, >= T) int32,
        its source the first ``src_len`` positions of ``memory_keys`` / ``memory_values`` (per layer
        (rows, h, d_k, S) / (rows, h, S, d_k)); sentence ``s``'s memory is row ``memory_rows[s]``
        (int64) where given, else row ``s``. The step's K/V go into ``pool_key`` / ``pool_value``
        (T, >= b * K, L, h, d_k) at time ``g``, hypothesis ``n`` in row ``n``, and ``table[:b, :, g]``
        records it. ``vocabularies`` (int32, >= b): sentence ``s``'s restricted vocabulary
        (``self.vocabularies``' index; -1: the whole), or None for none. Returns ``top_log_probs``
        and ``top_ids`` (and ``attention``, ``log_probs`` when asked)."""
        return self.step.run_pool(b, g, tokens, steps, pool_key, pool_value, table, start, src_len,
                                  list(memory_keys), list(memory_values), attention=attention, log_probs=log_probs,
                                  memory_rows=memory_rows, vocabularies=vocabularies)

    def run_steps(self, search, b: int, g: int, t_lo: int, max_steps: int, interrupt: np.ndarray, vocab: int,
                  pool_key: np.ndarray, pool_value: np.ndarray, table: np.ndarray, start: np.ndarray,
                  src_len: np.ndarray, memory_keys: Sequence[np.ndarray], memory_values: Sequence[np.ndarray],
                  *, loops: bool, confidence: bool, attention: bool, full_steps: bool, park: int = 1,
                  park_steps: int = 0, memory_rows: np.ndarray | None = None,
                  vocabularies: np.ndarray | None = None) -> int:
        """The engine's steps with no Python between them (``DecoderStep.run_steps``): from pool
        time ``g``, ``run_pool``'s step, the search's compiled step (``search``: the
        ``nmtserve_native.Step`` of the group's ``BeamBatch``) on the top 2K + 1 candidates, the
        ancestor table over ``[t_lo, g + 1)``; until ``park`` rows are done (or all, or
        ``park_steps`` steps after the first was: the done ones wait uncomputed), the pool's last
        time, ``max_steps``, a step needing every log-probability, or ``interrupt[0]`` set.
        Returns the steps run (>= 1)."""
        return self.step.run_steps(search, b, g, t_lo, max_steps, interrupt, vocab, pool_key, pool_value, table,
                                   start, src_len, list(memory_keys), list(memory_values), loops=loops,
                                   confidence=confidence, attention=attention, full_steps=full_steps,
                                   park=park, park_steps=park_steps, memory_rows=memory_rows,
                                   vocabularies=vocabularies)


class NativeEncoder:
    """``encode`` of the encoder contract (``nmtserve.graphs``) on ``nmtserve_native.EncoderStep``."""

    def __init__(self, path: Path, spec: ModelSpec, fp32_largest_d_model: int | None = None,
                 decoder: NativeDecoder | None = None):
        """``decoder``: a compiled decoder whose int8 table (held in its projection's panels) is read
        for the source's tokens where it is the same table, instead of holding it a second time."""
        table = decoder.table if decoder is not None else None
        read = functools.partial(read_cpu_encoder, shared_table=table)
        self.step, config = _compiled_part("EncoderStep", read, path, spec, fp32_largest_d_model, "encoder",
                                           table_from=decoder.step if decoder is not None and table is not None else None)
        self.shares_table = bool(config.get("embed_from_decoder"))
        self.kernels = self.step.kernels

    def encode(self, src_ids: np.ndarray) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """src_ids (B, S) -> per decoder layer memory keys (B, h, d_k, S) and values (B, h, S, d_k);
        the padding's positions are zeros."""
        keys, values = self.step.run(np.ascontiguousarray(src_ids, dtype=np.int32))
        return list(keys), list(values)


ENCODER_ENV = "NMTSERVE_NATIVE_ENCODER"


def _load(make, path: Path, spec: ModelSpec, part: str, off: str | None = None):
    """``make(path, spec, fp32_largest_d_model)`` where the graph allows it and ``NMTSERVE_NATIVE_STEP``
    (or ``off``) is not ``0``; ``NMTSERVE_NATIVE_STEP=1`` asks for it at any size and warns where it
    cannot be had. None: ``part`` stays on ONNX Runtime (portable graphs, other int8 forms, large fp32)."""
    setting = os.environ.get(ENV, "")
    if setting == "0" or (off is not None and os.environ.get(off, "") == "0"):
        return None
    try:
        built = make(path, spec, None if setting == "1" else FP32_LARGEST_D_MODEL)
    except Unsupported as exc:
        (log.warning if setting == "1" else log.info)("%s runs on ONNX Runtime: %s", part, exc)
        return None
    log.info("%s runs compiled (nmtserve_native, %s kernels)", part, built.kernels)
    return built


def load_encoder(path: Path, spec: ModelSpec, decoder: NativeDecoder | None = None) -> NativeEncoder | None:
    """The compiled encoder where the graph allows it and neither ``NMTSERVE_NATIVE_STEP`` nor
    ``NMTSERVE_NATIVE_ENCODER`` is ``0`` (the step's size rule); ``decoder``: the compiled decoder
    of the same model, whose table it reads where it is the same (NativeEncoder)."""
    return _load(functools.partial(NativeEncoder, decoder=decoder), path, spec, "the encoder", ENCODER_ENV)


def load(path: Path, spec: ModelSpec) -> NativeDecoder | None:
    """The compiled step for this decoder where the graph allows it and ``NMTSERVE_NATIVE_STEP`` is not ``0``."""
    return _load(NativeDecoder, path, spec, "the decoder step")
