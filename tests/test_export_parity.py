"""Exported ONNX graphs (run by ONNX Runtime) against the PyTorch model."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import build, sources

from nmtserve.decoding.search import SearchOptions
from nmtserve.export.parity import check_parity

VARIANTS = {
    "paper": dict(),
    "pre_norm_gelu_untied": dict(pre_norm=True, activation="gelu", share_embeddings=False, tie_output=False, src_vocab_size=53),
    "marian_like": dict(activation="swish", position_layout="concat", final_logits_bias=True),
    "post_norm_final_norm": dict(final_norm=True, share_embeddings=False, tie_output=False, src_vocab_size=53),
}


@pytest.mark.parametrize("graph", ["portable", "fused"])
@pytest.mark.parametrize("variant", VARIANTS)
def test_onnx_matches_pytorch_over_whole_beam_decodes(tmp_path, variant, graph):
    model, onnx_model = build(tmp_path, decoder_graph=graph, **VARIANTS[variant])
    opts = SearchOptions(beam_size=4, max_length=40, max_length_a=1.5, max_length_b=3, num_hypotheses=2)
    report = check_parity(model, onnx_model, sources(50, model.config.src_vocab_size), opts, batch_size=13)
    assert report.sentences == 50 and report.steps > 50
    assert report.max_abs_diff_log_probs <= 1e-4, report.summary()
    assert report.max_abs_diff_memory <= 1e-4, report.summary()
    assert report.token_mismatches == [], report.summary()


@pytest.mark.parametrize("graph", ["portable", "fused"])
def test_parity_check_catches_a_wrong_graph(tmp_path, graph):
    model, onnx_model = build(tmp_path, decoder_graph=graph)
    with torch.no_grad():
        model.decoder_layers[0].ffn.fc2.weight.mul_(1.5)  # PyTorch now differs from the export
    report = check_parity(model, onnx_model, sources(4, model.config.src_vocab_size), SearchOptions(beam_size=2, max_length=8))
    assert not report.passed
    assert report.max_abs_diff_log_probs > 1e-3


@pytest.mark.parametrize("graph", ["portable", "fused"])
def test_greedy_and_single_sentence_batches(tmp_path, graph):
    model, onnx_model = build(tmp_path, decoder_graph=graph)
    report = check_parity(model, onnx_model, sources(5, model.config.src_vocab_size, seed=3), SearchOptions(beam_size=1, max_length=12), batch_size=1)
    assert report.passed, report.summary()


def test_export_leaves_the_model_in_eval_mode_so_dropout_stays_off(tmp_path):
    model, onnx_model = build(tmp_path, dropout=0.3)
    assert not any(m.training for m in model.modules())
    report = check_parity(model, onnx_model, sources(4, model.config.src_vocab_size), SearchOptions(beam_size=2, max_length=8))
    assert report.passed, report.summary()


@pytest.mark.parametrize("graph", ["portable", "fused"])
def test_the_decoder_returns_each_hypothesis_best_tokens_as_the_search_ranks_them(tmp_path, graph):
    """``top_log_probs`` / ``top_ids`` are the full log-probs' best ``candidates`` tokens, best
    first, so the served search (which reads only these) ranks exactly as on the full array."""
    from nmtserve.export.onnx_export import example_decoder_inputs

    model, onnx_model = build(tmp_path, decoder_graph=graph)
    names = [t.name for t in __import__("nmtserve.graphs", fromlist=["x"]).decoder_inputs(onnx_model.spec.dims)]
    feeds = {n: x.numpy() for n, x in zip(names, example_decoder_inputs(model, batch=3, beam=4, past=5, src=6), strict=True)}
    out = onnx_model.run_step(feeds, ("log_probs", "top_log_probs", "top_ids"))
    m = onnx_model.spec.dims.candidates
    want_ids = np.argsort(-out["log_probs"], axis=-1, kind="stable")[..., :m]
    np.testing.assert_array_equal(out["top_ids"], want_ids)
    np.testing.assert_array_equal(out["top_log_probs"], np.take_along_axis(out["log_probs"], want_ids, -1))


def test_onnx_runtime_topk_breaks_ties_by_the_lower_index_as_onnx_specifies():
    """The exactness of graph-side candidate selection rests on this: among equal log-probs the
    lower token id ranks first (the search's rule). Checked on values full of ties."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("TopK", ["x", "k"], ["values", "indices"], axis=-1)], "topk",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, None])],
        [helper.make_tensor_value_info("values", TensorProto.FLOAT, [None, None]),
         helper.make_tensor_value_info("indices", TensorProto.INT64, [None, None])],
        initializer=[helper.make_tensor("k", TensorProto.INT64, [1], [9])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).integers(0, 4, (64, 300)).astype(np.float32)  # 4 distinct values
    values, indices = session.run(None, {"x": x})
    np.testing.assert_array_equal(indices, np.argsort(-x, axis=-1, kind="stable")[:, :9])
    assert onnx.checker.check_model(model) is None
