"""Exported ONNX graphs (run by ONNX Runtime) against the PyTorch model."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from nmtserve.decoding.search import SearchOptions
from nmtserve.export.onnx_export import dims_of, export_decoder, export_encoder
from nmtserve.export.parity import check_parity
from nmtserve.model.config import TransformerConfig
from nmtserve.model.transformer import Transformer
from nmtserve.runtime.onnxruntime import OnnxModel
from nmtserve.runtime.spec import ModelSpec

VARIANTS = {
    "paper": dict(),
    "pre_norm_gelu_untied": dict(pre_norm=True, activation="gelu", share_embeddings=False, tie_output=False, src_vocab_size=53),
    "marian_like": dict(activation="swish", position_layout="concat", final_logits_bias=True),
}


def build(tmp_path, **kw):
    base = dict(src_vocab_size=61, tgt_vocab_size=61, d_model=32, h=4, d_ff=48, encoder_layers=2,
                decoder_layers=2, dropout=0.0, max_positions=128)
    base.update(kw)
    torch.manual_seed(0)
    model = Transformer(TransformerConfig(**base)).eval()
    with torch.no_grad():  # sharpen the output so that beams diverge and EOS is reachable
        model.generator.weight.mul_(4.0)
        if base.get("final_logits_bias"):
            model.final_logits_bias.normal_()
    export_encoder(model, tmp_path / "encoder.onnx")
    export_decoder(model, tmp_path / "decoder.onnx")
    c = model.config
    d = dims_of(model)
    spec = ModelSpec(layers=d.layers, heads=d.heads, d_k=d.d_k, vocab=d.vocab, max_positions=c.max_positions,
                     pad_id=c.pad_id, bos_id=c.bos_id, eos_id=c.eos_id, unk_id=c.unk_id)
    return model, OnnxModel(tmp_path / "encoder.onnx", tmp_path / "decoder.onnx", spec, threads=1)


def sources(n: int, vocab: int, seed: int = 0) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [[*rng.integers(4, vocab, size=rng.integers(1, 20)).tolist(), 2] for _ in range(n)]


@pytest.mark.parametrize("variant", VARIANTS)
def test_onnx_matches_pytorch_over_whole_beam_decodes(tmp_path, variant):
    model, onnx_model = build(tmp_path, **VARIANTS[variant])
    opts = SearchOptions(beam_size=4, max_length=40, max_length_a=1.5, max_length_b=3, num_hypotheses=2)
    report = check_parity(model, onnx_model, sources(50, model.config.src_vocab_size), opts, batch_size=13)
    assert report.sentences == 50 and report.steps > 50
    assert report.max_abs_diff_log_probs <= 1e-4, report.summary()
    assert report.max_abs_diff_memory <= 1e-4, report.summary()
    assert report.token_mismatches == [], report.summary()


def test_parity_check_catches_a_wrong_graph(tmp_path):
    model, onnx_model = build(tmp_path)
    with torch.no_grad():
        model.decoder_layers[0].ffn.fc2.weight.mul_(1.5)  # PyTorch now differs from the export
    report = check_parity(model, onnx_model, sources(4, model.config.src_vocab_size), SearchOptions(beam_size=2, max_length=8))
    assert not report.passed
    assert report.max_abs_diff_log_probs > 1e-3


def test_greedy_and_single_sentence_batches(tmp_path):
    model, onnx_model = build(tmp_path)
    report = check_parity(model, onnx_model, sources(5, model.config.src_vocab_size, seed=3), SearchOptions(beam_size=1, max_length=12), batch_size=1)
    assert report.passed, report.summary()


def test_export_leaves_the_model_in_eval_mode_so_dropout_stays_off(tmp_path):
    model, onnx_model = build(tmp_path, dropout=0.3)
    assert not any(m.training for m in model.modules())
    report = check_parity(model, onnx_model, sources(4, model.config.src_vocab_size), SearchOptions(beam_size=2, max_length=8))
    assert report.passed, report.summary()
