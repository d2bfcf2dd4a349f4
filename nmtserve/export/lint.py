"""TensorRT-readiness lint of exported ONNX graphs, runnable without TensorRT.

Flags what the TensorRT ONNX parser rejects or handles badly: control flow (If/Loop/Scan),
operators outside its supported set, non-default domains, int64 graph I/O (TensorRT prefers
int32 and we promise int32 in ``nmtserve.graphs``), dynamic ranks, unnamed dynamic dimensions,
int64 constants outside the int32 range, and data-dependent shapes (NonZero).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

# Operators of the TensorRT 10 ONNX parser (onnx-tensorrt docs/operators.md) that export can
# produce for this architecture, minus control flow, which we reject on purpose.
TENSORRT_OPS = frozenset("""
Abs Add And ArgMax ArgMin Cast Ceil Clip Concat Constant ConstantOfShape Cos CumSum Div Einsum
Equal Erf Exp Expand Flatten Floor Gather GatherElements GatherND Gelu Gemm Greater GreaterOrEqual
HardSigmoid Identity LayerNormalization LeakyRelu Less LessOrEqual Log LogSoftmax MatMul Max Mean
Min Mod Mul Neg Not OneHot Or Pad Pow Range Reciprocal ReduceL2 ReduceLogSumExp ReduceMax ReduceMean
ReduceMin ReduceProd ReduceSum ReduceSumSquare Relu Reshape ScatterElements ScatterND Shape Sigmoid
Sign Sin Size Slice Softmax Softplus Split Sqrt Squeeze Sub Sum Tanh Tile TopK Transpose Trilu
Unsqueeze Where Xor
""".split())
CONTROL_FLOW = frozenset({"If", "Loop", "Scan"})
DATA_DEPENDENT = frozenset({"NonZero", "Unique", "NonMaxSuppression"})
# Slice bounds may be INT64_MAX ("to the end"); the parser clamps them.
_SLICE_BOUND_INPUTS = {1, 2}

_INT32 = np.iinfo(np.int32)


@dataclass(frozen=True)
class Finding:
    where: str
    problem: str

    def __str__(self) -> str:
        return f"{self.where}: {self.problem}"


def lint_model(model: onnx.ModelProto) -> list[Finding]:
    findings: list[Finding] = []
    graph = model.graph
    for opset in model.opset_import:
        if opset.domain not in ("", "ai.onnx"):
            findings.append(Finding("opset_import", f"non-standard domain {opset.domain!r}"))

    slice_bounds = {n.input[i] for n in graph.node if n.op_type == "Slice" for i in _SLICE_BOUND_INPUTS if i < len(n.input)}
    for node in graph.node:
        where = f"node {node.name or node.op_type}"
        if node.domain not in ("", "ai.onnx"):
            findings.append(Finding(where, f"operator {node.domain}::{node.op_type} is not a standard ONNX op"))
        elif node.op_type in CONTROL_FLOW:
            findings.append(Finding(where, f"{node.op_type}: control flow; TensorRT needs a static graph"))
        elif node.op_type in DATA_DEPENDENT:
            findings.append(Finding(where, f"{node.op_type}: data-dependent output shape"))
        elif node.op_type not in TENSORRT_OPS:
            findings.append(Finding(where, f"{node.op_type} is not supported by the TensorRT ONNX parser"))
        if node.op_type == "Constant" and node.output[0] not in slice_bounds:
            for attr in node.attribute:
                if attr.name == "value" and attr.t.data_type == TensorProto.INT64:
                    findings += _check_int64(where, numpy_helper.to_array(attr.t))
    for init in graph.initializer:
        external = init.data_location == TensorProto.EXTERNAL  # a weight; int64 constants are small
        if init.data_type == TensorProto.INT64 and init.name not in slice_bounds and not external:
            findings += _check_int64(f"initializer {init.name}", numpy_helper.to_array(init))

    for kind, values in (("input", graph.input), ("output", graph.output)):
        initializers = {i.name for i in graph.initializer}
        for value in values:
            if value.name in initializers:
                continue
            where = f"graph {kind} {value.name}"
            ttype = value.type.tensor_type
            if ttype.elem_type == TensorProto.INT64:
                findings.append(Finding(where, "int64 I/O; use int32 (TensorRT)"))
            if not ttype.HasField("shape"):
                findings.append(Finding(where, "no static rank"))
                continue
            for i, dim in enumerate(ttype.shape.dim):
                if not dim.HasField("dim_value") and not dim.dim_param:
                    findings.append(Finding(where, f"axis {i} is dynamic but unnamed"))
    return findings


def _check_int64(where: str, values: np.ndarray) -> list[Finding]:
    if values.size and (values.min() < _INT32.min or values.max() > _INT32.max):
        return [Finding(where, "int64 constant outside the int32 range (TensorRT casts to int32)")]
    return []


def lint_file(path: Path) -> list[Finding]:
    # The weights stay where they are (a graph over 2 GB keeps them in <graph>.data: no protobuf
    # holds them); the checker finds them from the path.
    model = onnx.load(str(path), load_external_data=False)
    onnx.checker.check_model(str(path))
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    return lint_model(inferred)
