"""The exported graphs pass the TensorRT-readiness lint; the lint catches what TensorRT rejects."""

from __future__ import annotations

import onnx
import pytest
import torch
from onnx import TensorProto, helper

from nmtserve.export.lint import lint_file, lint_model
from nmtserve.export.onnx_export import export_decoder, export_encoder
from nmtserve.model.config import TransformerConfig
from nmtserve.model.transformer import Transformer


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    out = tmp_path_factory.mktemp("graphs")
    torch.manual_seed(0)
    model = Transformer(TransformerConfig(src_vocab_size=40, tgt_vocab_size=40, d_model=16, h=2, d_ff=32,
                                          encoder_layers=1, decoder_layers=2, activation="swish", pre_norm=True)).eval()
    return export_encoder(model, out / "encoder.onnx"), export_decoder(model, out / "decoder.onnx")


@pytest.mark.parametrize("which", [0, 1], ids=["encoder", "decoder"])
def test_exported_graphs_are_tensorrt_ready(exported, which):
    assert [str(f) for f in lint_file(exported[which])] == []


def test_exported_io_is_int32_bool_or_float(exported):
    for path in exported:
        graph = onnx.load(str(path)).graph
        types = {v.type.tensor_type.elem_type for v in list(graph.input) + list(graph.output)}
        assert types <= {TensorProto.INT32, TensorProto.BOOL, TensorProto.FLOAT}


def _bad_model() -> onnx.ModelProto:
    then = helper.make_graph([helper.make_node("Identity", ["x"], ["t"])], "then", [], [helper.make_tensor_value_info("t", TensorProto.FLOAT, None)])
    nodes = [
        helper.make_node("NonZero", ["ids"], ["nz"]),
        helper.make_node("If", ["cond"], ["y"], then_branch=then, else_branch=then),
        helper.make_node("Constant", [], ["big"], value=helper.make_tensor("v", TensorProto.INT64, [1], [2**40])),
        helper.make_node("Add", ["ids", "big"], ["out"]),
        helper.make_node("Custom", ["x"], ["c"], domain="com.example"),
    ]
    graph = helper.make_graph(
        nodes, "bad",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", None]),
         helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
         helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("out", TensorProto.INT64, ["batch", None])],
    )
    return helper.make_model(graph)


def test_lint_names_each_problem():
    text = "\n".join(str(f) for f in lint_model(_bad_model()))
    for fragment in ("If: control flow", "NonZero: data-dependent", "int64 I/O", "axis 1 is dynamic but unnamed",
                     "outside the int32 range", "com.example::Custom", "graph input x: no static rank"):
        assert fragment in text, fragment
