"""The fused CPU decoder graph (``nmtserve.export.cpu_graph``): the decoder contract, checked
step by step against PyTorch's ``decode_step`` for every layout the model config has, and what
the export does with it. Whole beam decodes against PyTorch: tests/test_export_parity.py (both
graphs); against transformers: the Marian and multilingual export tests (the default graph)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from nmtserve import graphs
from nmtserve.export.cpu_graph import (
    CONTRIB,
    UnsupportedModel,
    build_cpu_decoder,
    build_cpu_encoder,
)
from nmtserve.export.onnx_export import export_decoder
from nmtserve.export.pipeline import ExportError, ExportOptions, export
from nmtserve.export.quantize import quantize_int8, weight_matmuls
from nmtserve.model.config import TransformerConfig
from nmtserve.model.transformer import Transformer
from nmtserve.runtime.onnxruntime import session_options

DEMO = Path(__file__).resolve().parents[1] / "models" / "en-fr-numbers"
# Every branch of the config that reaches the decoder step.
LAYOUTS = {
    "paper": dict(),
    "pre_norm_gelu_untied": dict(pre_norm=True, activation="gelu", share_embeddings=False, tie_output=False,
                                 src_vocab_size=53),
    "marian": dict(activation="swish", position_layout="concat", final_logits_bias=True),
    "mbart": dict(pre_norm=True, activation="gelu", learned_positions=True, position_offset=2, embedding_norm=True,
                  scale_embedding=False),
    "m2m100": dict(pre_norm=True, activation="relu", position_layout="m2m100", position_offset=2),
    # torch.nn.Transformer: post-norm layers and a final LayerNorm per stack
    "nn_transformer": dict(final_norm=True, share_embeddings=False, tie_output=False, src_vocab_size=53),
    # eole: a post-norm encoder with a final LayerNorm before a pre-norm decoder
    "eole_postnorm_encoder": dict(pre_norm=True, encoder_pre_norm=False, final_norm=True),
}


def _model(**kw) -> Transformer:
    base = dict(src_vocab_size=67, tgt_vocab_size=67, d_model=32, h=4, d_ff=48, encoder_layers=1, decoder_layers=3,
                dropout=0.0, max_positions=64)
    torch.manual_seed(1)
    model = Transformer(TransformerConfig(**{**base, **kw})).eval()
    with torch.no_grad():
        for p in model.parameters():  # LayerNorm and bias terms off their defaults too
            if p.dim() == 1:
                p.normal_(0.0, 0.3)
        model.generator.weight.mul_(3.0)
        if kw.get("final_logits_bias"):
            model.final_logits_bias.normal_()
    return model


def _feeds(model: Transformer, batch: int, beam: int, past: int, src: int, seed: int) -> dict[str, np.ndarray]:
    c = model.config
    rng = np.random.default_rng(seed)
    rows = batch * beam + 3  # a pool with spare rows, as the engine's
    cache = (past, rows, c.decoder_layers, c.h, c.d_k)
    past_mask = np.ones((batch, past), bool)
    past_mask[0, : past // 2] = False  # a sentence that joined later
    src_mask = np.ones((batch, src), bool)
    src_mask[-1, src // 2 + 1:] = False
    return graphs.decoder_feeds(
        input_ids=rng.integers(3, c.tgt_vocab_size, (batch, beam)).astype(np.int32),
        position=rng.integers(0, 20, batch).astype(np.int32),
        past_key=rng.standard_normal(cache, np.float32), past_value=rng.standard_normal(cache, np.float32),
        cache_rows=rng.integers(0, rows, (batch, beam, past)).astype(np.int32), past_mask=past_mask,
        memory_keys=[rng.standard_normal((batch, c.h, c.d_k, src), np.float32) for _ in range(c.decoder_layers)],
        memory_values=[rng.standard_normal((batch, c.h, src, c.d_k), np.float32) for _ in range(c.decoder_layers)],
        src_mask=src_mask,
    )


def _torch_step(model: Transformer, feeds: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n = model.config.decoder_layers
    t = {k: torch.from_numpy(v) for k, v in feeds.items()}
    with torch.no_grad():
        log_probs, k, v = model.decode_step(
            t["input_ids"].long(), t["position"].long(), t["past_key"], t["past_value"], t["cache_rows"].long(),
            t["past_mask"], [t[graphs.memory_key(i)] for i in range(n)], [t[graphs.memory_value(i)] for i in range(n)],
            t["src_mask"])
    return log_probs.numpy(), k.numpy(), v.numpy()


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_fused_step_equals_pytorchs_decode_step(tmp_path, layout):
    model = _model(**LAYOUTS[layout])
    path = build_cpu_decoder(model, tmp_path / "decoder.onnx")
    session = ort.InferenceSession(str(path), session_options(1), providers=["CPUExecutionProvider"])
    names = [t.name for t in graphs.decoder_outputs(graphs.Dims(3, 4, 8, 67))]
    # (batch, beam, past, source): one sentence, greedy, a fresh batch's single dummy slot, wide.
    for seed, shape in enumerate([(1, 4, 6, 9), (3, 1, 4, 5), (2, 3, 1, 7), (5, 2, 11, 13)]):
        feeds = _feeds(model, *shape, seed=seed)
        out = dict(zip(names, session.run(names, feeds), strict=True))
        log_probs, new_key, new_value = _torch_step(model, feeds)
        real = np.isfinite(log_probs)
        np.testing.assert_array_equal(np.isfinite(out["log_probs"]), real)  # pad is -inf in both
        np.testing.assert_allclose(out["log_probs"][real], log_probs[real], atol=2e-5, rtol=0)
        np.testing.assert_allclose(out["new_key"], new_key, atol=2e-5, rtol=0)
        np.testing.assert_allclose(out["new_value"], new_value, atol=2e-5, rtol=0)
        m = out["top_ids"].shape[-1]
        np.testing.assert_array_equal(out["top_ids"], np.argsort(-out["log_probs"], axis=-1, kind="stable")[..., :m])


@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_encoder_written_from_the_weights_equals_pytorchs(tmp_path, layout):
    model = _model(**LAYOUTS[layout], encoder_layers=2)
    path = build_cpu_encoder(model, tmp_path / "encoder.onnx")
    session = ort.InferenceSession(str(path), session_options(1), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    assert names == [t.name for t in graphs.encoder_outputs(graphs.Dims(3, 4, 8, 67))]
    rng = np.random.default_rng(0)
    pad, eos = model.config.pad_id, model.config.eos_id
    for batch, length in [(1, 1), (1, 9), (3, 7), (4, 13)]:
        src = rng.integers(4, model.config.src_vocab_size, (batch, length)).astype(np.int32)
        src[:, -1] = eos
        src[-1, length // 2:] = pad  # a shorter sentence, padded
        src[-1, length // 2] = eos
        got = session.run(names, {"src_ids": src})
        with torch.no_grad():
            want = [t.numpy() for pair in model.memory_kv(model.encode(torch.from_numpy(src).long())) for t in pair]
        for name, g, w in zip(names, got, want, strict=True):
            assert g.shape == w.shape, name
            np.testing.assert_allclose(g, w, atol=3e-5, rtol=0, err_msg=name)


def test_the_fused_graph_keeps_the_decoder_contract_with_fewer_nodes(tmp_path):
    """Same inputs and outputs (names, types, symbolic axes) as the portable export, with about a
    third of its nodes as written and under 85% after ONNX Runtime's own optimizer (at one
    sentence each node is a few microseconds of overhead)."""
    model = _model()
    fused = onnx.load(str(build_cpu_decoder(model, tmp_path / "fused.onnx")))
    portable = onnx.load(str(export_decoder(model, tmp_path / "portable.onnx")))

    def io(m):
        return [(v.name, v.type.tensor_type.elem_type, [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim])
                for v in (*m.graph.input, *m.graph.output)]

    assert io(fused) == io(portable)
    assert {n.domain for n in fused.graph.node} <= {"", CONTRIB}
    assert len(fused.graph.node) <= 0.4 * len(portable.graph.node)

    def optimized_nodes(path):
        so = session_options(1)
        so.optimized_model_filepath = str(tmp_path / f"{path.stem}.opt.onnx")
        ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        return len(onnx.load(so.optimized_model_filepath).graph.node)

    fused_nodes, portable_nodes = optimized_nodes(tmp_path / "fused.onnx"), optimized_nodes(tmp_path / "portable.onnx")
    # (0.85: the self-attention softmax is six nodes, its sum in float64 so that a row's result does not
    # depend on where its past sits in the batch's window: cpu_graph._softmax_in_any_window)
    assert fused_nodes <= 0.85 * portable_nodes, (fused_nodes, portable_nodes)


def test_int8_quantizes_every_weight_matmul_of_the_fused_graph(tmp_path):
    """Q/K/V (one MatMul), the cross-attention query, both output projections, the FFN and the
    vocabulary projection: 6 per layer + 1, found by name for --int8-keep-fp32's groups too."""
    model = _model()
    path = build_cpu_decoder(model, tmp_path / "decoder.onnx")
    names = weight_matmuls(onnx.load(str(path)))
    assert len(names) == 6 * 3 + 1
    result = quantize_int8(path, tmp_path / "int8.onnx", keep_fp32=("output",))
    assert result.quantized == 6 * 3 and result.kept == ["/generator/Gemm"]  # tied: the table, transposed
    assert sum("_proj" in n for n in names) == 4 * 3 and sum("/ffn/" in n for n in names) == 2 * 3
    session = ort.InferenceSession(str(result.path), session_options(1), providers=["CPUExecutionProvider"])
    feeds = _feeds(model, 2, 3, 4, 5, seed=0)
    top = session.run(["top_log_probs"], feeds)[0]
    reference = _torch_step(model, feeds)[0]
    assert np.abs(top[..., 0] - reference.max(-1)).max() < 0.5  # int8 is close, not equal


def test_a_model_the_builder_does_not_cover_is_refused_by_name():
    model = _model()
    model.half()
    with pytest.raises(UnsupportedModel, match="float32"):
        build_cpu_decoder(model, "unused.onnx")


def test_export_serves_the_fused_graph_on_the_cpu_target_and_the_portable_one_when_asked(tmp_path):
    common = dict(max_source_len=32, max_target_len=32, parity_sentences=4)
    fused = export(DEMO, ExportOptions(repository=tmp_path / "fused", **common))
    assert fused.decoder_graph.startswith("decoder graph: fused"), fused.summary()
    assert fused.parity.passed
    served = onnx.load(str(tmp_path / "fused" / "generate" / "1" / "decoder.onnx"), load_external_data=False)
    assert any(n.domain == CONTRIB for n in served.graph.node)
    portable = export(DEMO, ExportOptions(repository=tmp_path / "portable", decoder_graph="portable", **common))
    assert not portable.decoder_graph
    served = onnx.load(str(tmp_path / "portable" / "generate" / "1" / "decoder.onnx"), load_external_data=False)
    assert all(n.domain in ("", "ai.onnx") for n in served.graph.node)
    with pytest.raises(ExportError, match="fused decoder graph is for ONNX Runtime on a CPU"):
        export(DEMO, ExportOptions(repository=tmp_path / "gpu", target="gpu", decoder_graph="fused", **common))


def _mapped_kib(folder: Path) -> list[int]:
    """Resident KiB of each mapping of a data file under ``folder`` (/proc/self/smaps)."""
    out, current = [], ""
    with open("/proc/self/smaps", encoding="utf-8") as smaps:
        for line in smaps:
            fields = line.split()
            if "-" in fields[0] and not fields[0].endswith(":"):
                current = fields[5] if len(fields) > 5 else ""
            elif fields[0] == "Rss:" and current.endswith(".data") and current.startswith(str(folder)):
                out.append(int(fields[1]))
    return out


@pytest.mark.skipif(not Path("/proc/self/smaps").is_file(), reason="reads Linux's /proc/self/smaps")
def test_the_tied_table_is_resident_once_the_sessions_are_built(tmp_path):
    """The decoder's Gemm packs the tied table and its Gather reads the mapped file: the pages the
    packing read are given back (``release_mapped_weights``), and the step still reads right."""
    from nmtserve.export.weights import SharedWeights
    from nmtserve.runtime.onnxruntime import OnnxModel
    from nmtserve.runtime.spec import ModelSpec

    model = _model(tgt_vocab_size=8192, src_vocab_size=8192, d_model=256, d_ff=64, decoder_layers=1)
    shared = SharedWeights()
    encoder = build_cpu_encoder(model, tmp_path / "encoder.onnx", 0, shared)
    decoder = build_cpu_decoder(model, tmp_path / "decoder.onnx", 4, 0, shared)
    table_kib = 8192 * 256 * 4 // 1024
    bare = ort.InferenceSession(str(decoder), session_options(1), providers=["CPUExecutionProvider"])
    assert max(_mapped_kib(tmp_path)) >= table_kib  # what the packing leaves resident
    del bare
    c = model.config
    spec = ModelSpec(layers=1, heads=c.h, d_k=c.d_k, vocab=c.tgt_vocab_size, max_positions=c.max_positions,
                     pad_id=c.pad_id, bos_id=c.bos_id, eos_id=c.eos_id, unk_id=c.unk_id, src_vocab=c.src_vocab_size)
    runtime = OnnxModel(encoder, decoder, spec, threads=1)
    assert _mapped_kib(tmp_path) and max(_mapped_kib(tmp_path)) < table_kib // 8
    feeds = _feeds(model, 2, 3, 4, 5, seed=0)
    log_probs, _, _ = _torch_step(model, feeds)
    out = runtime.run_step(feeds, ("log_probs",))["log_probs"]
    real = np.isfinite(log_probs)
    np.testing.assert_allclose(out[real], log_probs[real], atol=2e-5, rtol=0)
