"""int8 graphs for the CPU whose rows never see each other: a sentence's numbers do not depend on its batch.

ONNX Runtime's dynamic quantization (``quantize_dynamic``) quantizes a MatMul's activations per
tensor: one scale for the whole batch, set by its largest value. With in-flight batching a
sentence's neighbours are whoever else is using the server, so the same sentence got another
translation in another batch (1 of 1,000 held-out sentences on the demo, and CTranslate2's users
hit the same: OpenNMT/CTranslate2#693). This module writes int8 graphs where every quantity a row's
result depends on is computed from that row alone:

* **activations per row**: ``scale = max|a| / 127`` over the row's last axis, ``a / scale``
  rounded to uint8 around 128 (``QuantizeLinear``), so a row's codes are its own;
* **weights per output channel**, symmetric int8 (``[-127, 127]``, zero point 0);
* the product is ``MatMulIntegerToFloat`` (``Gemm`` with ``transB``: ``QGemm``): the uint8 x int8
  dot products are summed in int32, exactly, whatever the batch or the kernel's tiling, then scaled
  per column; one elementwise ``Mul`` applies the row's scale. Nothing in it reduces across rows.

Chosen by measurement (ONNX Runtime 1.32, one thread, AVX-512/VNNI, K x N = 1024 x 4096; per call
at 1 / 4 / 64 / 256 rows): per-tensor dynamic 88 / 122 / 1,397 / 5,674 us; this per-row form
90 / 123 / 1,850 / 6,717 us; ``MatMulNBits`` with 8-bit weights (its int8 path quantizes A per
block of a row) 105 / 276 / 3,972 / 17,282 us, and its 1-row and 2-row kernels round differently at
a block of 128 (542 of 1,600 rows differed alone and in a batch); int8 x int8 ``MatMulInteger``
(zero-centred activations) runs a reference kernel, 100x slower. fp32 MatMul: 345 / 602 / 7,445 /
25,166 us.

**Vocabulary tables** (``Gather`` of a ``[V, d]`` table whose V is a vocabulary size) are int8 per
row too: the gathered rows are cast and scaled by their own row's scale. A table the decoder also
projects onto (tied weights: ``Gemm(y, table, transB=1)`` in the fused graph) is one int8
initializer that the ``Gather`` and the ``QGemm`` share: the table's row scale is the
projection's column scale.

Everything else stays fp32: LayerNorms, softmax, the attention products of two activations, the
graphs' inputs and outputs (fp32 caches, log-probs, TopK candidates), so the repository layout,
engine and step contract do not change. A user can keep groups in fp32 (``KEEP_GROUPS``).

Rewriting reads one weight at a time (mapped from external data), so quantizing costs about the
int8 graph in memory, not a second fp32 copy.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from .weights import SharedWeights

log = logging.getLogger(__name__)

# Weight MatMuls (and tables) a user can keep in fp32, by the module path in node names.
KEEP_GROUPS: dict[str, str] = {
    "output": "/generator/",  # the decoder's projection onto the vocabulary
    "attention": "_proj",  # q/k/v/out projections, self- and cross-attention (and the memory K/V)
    "ffn": "/ffn/",
    "embeddings": "embed",  # the vocabulary tables the encoder and decoder gather from
}
CONTRIB = "com.microsoft"
ZERO_POINT = 128  # activations: int8 codes -127..127 stored as uint8 around 128


@dataclass(frozen=True)
class QuantizeResult:
    path: Path
    quantized: int  # weight MatMuls now int8
    kept: list[str]  # weight MatMuls (and tables) left fp32, by name
    tables: int = 0  # vocabulary tables now int8


def weight_matmuls(model) -> list[str]:
    """Names of the MatMul / Gemm nodes whose B input is a 2-D float initializer (the ones quantized)."""
    weights = {t.name: t for t in model.graph.initializer}
    return [n.name for n in model.graph.node if _weight_of(n, weights) is not None]


def _weight_of(node, weights: dict):
    """The float weight a MatMul / Gemm (no transA) multiplies by, or None."""
    from onnx import TensorProto, helper  # noqa: PLC0415

    if node.op_type not in ("MatMul", "Gemm") or len(node.input) < 2 or node.input[1] not in weights:
        return None
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    if node.op_type == "Gemm" and (attrs.get("transA", 0) or attrs.get("alpha", 1.0) != 1.0 or attrs.get("beta", 1.0) != 1.0):
        return None
    w = weights[node.input[1]]
    return w if w.data_type == TensorProto.FLOAT and len(w.dims) == 2 else None


def _table_of(node, weights: dict, rows: set[int]):
    """The float [V, d] table a Gather (axis 0) reads, V one of ``rows`` (the vocabulary sizes), or None."""
    from onnx import TensorProto  # noqa: PLC0415

    if node.op_type != "Gather" or node.input[0] not in weights or any(a.name == "axis" and a.i for a in node.attribute):
        return None
    t = weights[node.input[0]]
    return t if t.data_type == TensorProto.FLOAT and len(t.dims) == 2 and t.dims[0] in rows else None


def parse_keep(text: str | Iterable[str]) -> tuple[str, ...]:
    """``"output,ffn"`` -> ("ffn", "output"); unknown names raise ValueError naming the choices."""
    items = [t.strip() for t in (text.split(",") if isinstance(text, str) else text) if t.strip()]
    unknown = [t for t in items if t not in KEEP_GROUPS]
    if unknown:
        raise ValueError(f"--int8-keep-fp32: unknown group(s) {', '.join(unknown)}; choose from {', '.join(KEEP_GROUPS)}")
    return tuple(sorted(set(items)))


def symmetric_int8(w: np.ndarray, axis: int, chunk: int = 4096) -> tuple[np.ndarray, np.ndarray]:
    """A 2-D ``w`` as int8 codes in [-127, 127] with one scale per column (``axis`` 0) or per row
    (``axis`` 1). Works ``chunk`` rows at a time, so a mapped 1 GB table is never copied whole in fp32."""
    rows = w.shape[0]
    if axis == 0:
        amax = np.zeros(w.shape[1], np.float32)
        for i in range(0, rows, chunk):
            amax = np.maximum(amax, np.abs(np.asarray(w[i:i + chunk], np.float32)).max(axis=0))
    else:
        amax = np.concatenate([np.abs(np.asarray(w[i:i + chunk], np.float32)).max(axis=1) for i in range(0, rows, chunk)])
    scale = (np.where(amax > 0, amax, 127.0) / 127.0).astype(np.float32)
    codes = np.empty(w.shape, np.int8)
    for i in range(0, rows, chunk):
        part = np.asarray(w[i:i + chunk], np.float32) / (scale if axis == 0 else scale[i:i + chunk, None])
        codes[i:i + chunk] = np.clip(np.rint(part), -127, 127)
    return codes, scale


class _Rewriter:
    def __init__(self, model, folder: Path):
        from onnx import helper  # noqa: PLC0415

        self.helper = helper
        self.model = model
        self.folder = folder
        self.weights = {t.name: t for t in model.graph.initializer}
        self.opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 17)
        self.nodes: list = []
        self.added: list = []  # new initializers
        self._quantized: dict[tuple[str, int], tuple[str, str]] = {}  # (weight, axis) -> (codes, scales)
        self._rows: dict[str, tuple[str, str]] = {}  # activation -> (uint8 codes, row scale)
        self._consts: dict[str, str] = {}
        self._n = 0

    def name(self, base: str) -> str:
        self._n += 1
        return f"{base}/q8_{self._n}"

    def const(self, key: str, array: np.ndarray) -> str:
        from onnx import numpy_helper  # noqa: PLC0415

        if key not in self._consts:
            self.added.append(numpy_helper.from_array(np.asarray(array), f"int8/{key}"))
            self._consts[key] = f"int8/{key}"
        return self._consts[key]

    def node(self, op: str, inputs: list[str], base: str, domain: str = "", output: str | None = None, **attrs) -> str:
        out = output or self.name(base) + f"/{op}"
        self.nodes.append(self.helper.make_node(op, inputs, [out], name=self.name(base), domain=domain or None, **attrs))
        return out

    def weight(self, name: str, axis: int) -> tuple[str, str]:
        """int8 codes and per-slice scales of initializer ``name`` (axis 0: per column of a [K, N]
        MatMul weight; axis 1: per row of a [V, d] table)."""
        from onnx import numpy_helper  # noqa: PLC0415

        from .weights import tensor_array  # noqa: PLC0415

        key = (name, axis)
        if key not in self._quantized:
            codes, scales = symmetric_int8(tensor_array(self.weights[name], self.folder), axis)
            suffix = "cols" if axis == 0 else "rows"
            self.added += [numpy_helper.from_array(codes, f"{name}.int8_{suffix}"),
                           numpy_helper.from_array(scales, f"{name}.scale_{suffix}")]
            self._quantized[key] = (f"{name}.int8_{suffix}", f"{name}.scale_{suffix}")
        return self._quantized[key]

    def rows(self, a: str, base: str) -> tuple[str, str]:
        """Per-row uint8 codes of activation ``a`` and the row scales (``[..., 1]``)."""
        if a not in self._rows:
            magnitude = self.node("Abs", [a], base)
            if self.opset >= 18:
                amax = self.node("ReduceMax", [magnitude, self.const("last_axis", np.asarray([-1], np.int64))], base, keepdims=1)
            else:
                amax = self.node("ReduceMax", [magnitude], base, axes=[-1], keepdims=1)
            amax = self.node("Max", [amax, self.const("tiny", np.asarray(1e-30, np.float32))], base)
            scale = self.node("Div", [amax, self.const("levels", np.asarray(127.0, np.float32))], base)
            scaled = self.node("Div", [a, scale], base)
            codes = self.node("QuantizeLinear", [scaled, self.const("one", np.asarray(1.0, np.float32)),
                                                 self.const("zero_point", np.asarray(ZERO_POINT, np.uint8))], base)
            self._rows[a] = (codes, scale)
        return self._rows[a]

    def product(self, node, trans_b: bool) -> None:
        """MatMul(a, W) or Gemm(a, W[, C]): ``MatMulIntegerToFloat`` on W per column; with ``transB``
        (W a [N, K] table, shared with its Gather) ``QGemm`` on W per row. Then the row's scale,
        then C."""
        codes, scale = self.rows(node.input[0], node.name)
        one, zero_point = self.const("one", np.asarray(1.0, np.float32)), self.const("zero_point", np.asarray(ZERO_POINT, np.uint8))
        if trans_b:
            w, ws = self.weight(node.input[1], 1)
            rows = self.weights[node.input[1]].dims[0]
            zeros = self.const(f"zeros_{rows}", np.zeros(rows, np.int8))
            y = self.node("QGemm", [codes, one, zero_point, w, ws, zeros], node.name, domain=CONTRIB, transB=1)
        else:
            w, ws = self.weight(node.input[1], 0)
            y = self.node("MatMulIntegerToFloat", [codes, w, one, ws, zero_point], node.name, domain=CONTRIB)
        bias = node.input[2] if len(node.input) > 2 and node.input[2] else None
        y = self.node("Mul", [y, scale], node.name, output=None if bias else node.output[0])
        if bias:
            self.node("Add", [y, bias], node.name, output=node.output[0])

    def gather(self, node) -> None:
        from onnx import TensorProto  # noqa: PLC0415

        w, ws = self.weight(node.input[0], 1)
        codes = self.node("Gather", [w, node.input[1]], node.name, axis=0)
        values = self.node("Cast", [codes], node.name, to=TensorProto.FLOAT)
        scale = self.node("Gather", [ws, node.input[1]], node.name, axis=0)
        if self.opset >= 13:
            scale = self.node("Unsqueeze", [scale, self.const("last_axis", np.asarray([-1], np.int64))], node.name)
        else:
            scale = self.node("Unsqueeze", [scale], node.name, axes=[-1])
        self.node("Mul", [values, scale], node.name, output=node.output[0])


def quantize_int8(source: Path, destination: Path, keep_fp32: Iterable[str] = (), tables: Iterable[int] = (),
                  shared: SharedWeights | None = None, min_bytes: int | None = None) -> QuantizeResult:
    """Write ``destination``: ``source`` with its weight MatMuls (and its ``Gather`` tables of
    ``tables`` rows: the vocabulary sizes) in int8, except the ``keep_fp32`` groups.

    Its weights go to a data file beside it when the source's are in one (``nmtserve.export.weights``);
    ``shared``: what an earlier graph of the destination folder wrote there (a table both hold is
    pointed at, not written twice); ``min_bytes``: the smallest tensor written there (default
    ``weights.EXTERNAL_TENSOR_BYTES``)."""
    import onnx  # noqa: PLC0415 - export-only dependency
    from onnx import helper  # noqa: PLC0415

    from .weights import EXTERNAL_TENSOR_BYTES, data_file, write_graph  # noqa: PLC0415

    source, destination = Path(source), Path(destination)
    model = onnx.load(str(source), load_external_data=False)
    rw = _Rewriter(model, source.parent)
    patterns = [KEEP_GROUPS[g] for g in parse_keep(keep_fp32)]
    table_rows = set(tables)
    kept: list[str] = []
    quantized = int8_tables = 0
    for node in model.graph.node:
        weight = _weight_of(node, rw.weights)
        is_table = _table_of(node, rw.weights, table_rows) is not None
        if weight is None and not is_table:
            rw.nodes.append(node)
            continue
        if any(p in node.name for p in patterns):
            kept.append(node.name)
            rw.nodes.append(node)
            continue
        if is_table:
            rw.gather(node)
            int8_tables += 1
            continue
        rw.product(node, trans_b=node.op_type == "Gemm" and any(a.name == "transB" and a.i for a in node.attribute))
        quantized += 1
    used = {i for n in rw.nodes for i in n.input}
    initializers = [t for t in model.graph.initializer if t.name in used] + rw.added
    del model.graph.node[:]
    model.graph.node.extend(rw.nodes)
    del model.graph.initializer[:]
    model.graph.initializer.extend(initializers)
    if not any(o.domain == CONTRIB for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid(CONTRIB, 1))
    destination.parent.mkdir(parents=True, exist_ok=True)
    write_graph(model, destination, source.parent, external=data_file(source).is_file(), shared=shared,
                min_bytes=min_bytes or EXTERNAL_TENSOR_BYTES)
    result = QuantizeResult(destination, quantized=quantized, kept=kept, tables=int8_tables)
    log.info("%s: %d weight MatMuls and %d vocabulary tables in int8 (rows quantized alone), %d kept in fp32",
             source.name, quantized, int8_tables, len(kept))
    return result
