"""The encoder in compiled code (``nmtserve_native.EncoderStep``, issue 49) against its references:
PyTorch's encoder and the fused CPU graph it reads its weights from (every layout the config has,
fp32 within float32 noise, int8 within a code's noise of ONNX Runtime's int8 graph), batch
invariance to the bit, and bad sources refused by name. The served decodes with it (held-out
sentences equal to the PyTorch reference, int8 equal to ONNX Runtime's) are in
tests/test_native_step.py, which runs the engine on both compiled parts."""

from __future__ import annotations

import os

import numpy as np
import onnxruntime as ort
import pytest
import torch
from helpers import needs_exact_ort_int8

from nmtserve.decoding import native
from nmtserve.export.cpu_graph import build_cpu_decoder, build_cpu_encoder
from nmtserve.runtime import native_step
from nmtserve.runtime.onnxruntime import session_options
from tests.test_cpu_graph import LAYOUTS, _model
from tests.test_native_step import _int8, _spec

pytestmark = pytest.mark.skipif(native.module is None and not os.environ.get("CI"),
                                reason="nmtserve_native is not installed (scripts/setup.sh builds it)")


def _sources(model, batch: int, length: int, seed: int) -> tuple[np.ndarray, list[int]]:
    """(B, S) ids, every sentence ending with EOS, the later ones shorter and padded; their lengths."""
    rng = np.random.default_rng(seed)
    c = model.config
    src = rng.integers(4, c.src_vocab_size, (batch, length)).astype(np.int32)
    lengths = [max(1, length - 3 * b) for b in range(batch)]
    for b, n in enumerate(lengths):
        src[b, n - 1] = c.eos_id
        src[b, n:] = c.pad_id
    return src, lengths


def _real(arrays: list[np.ndarray], lengths: list[int]) -> list[np.ndarray]:
    """Each sentence's real positions of the memory keys (B, h, d_k, S) and values (B, h, S, d_k), flat."""
    keys, values = arrays[0::2], arrays[1::2]
    out = []
    for k, v in zip(keys, values, strict=True):
        out.append(np.concatenate([k[b, :, :, :n].ravel() for b, n in enumerate(lengths)]))
        out.append(np.concatenate([v[b, :, :n].ravel() for b, n in enumerate(lengths)]))
    return out


def _native(encoder, src) -> list[np.ndarray]:
    keys, values = encoder.encode(src)
    return [a for pair in zip(keys, values, strict=True) for a in pair]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_compiled_encoder_equals_pytorch_and_the_graph(tmp_path, layout):
    model = _model(**LAYOUTS[layout], encoder_layers=2)
    path = build_cpu_encoder(model, tmp_path / "encoder.onnx")
    session = ort.InferenceSession(str(path), session_options(1), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    encoder = native_step.NativeEncoder(path, _spec(model))
    for seed, (batch, length) in enumerate([(1, 1), (1, 9), (3, 7), (4, 13), (2, 40)]):
        src, lengths = _sources(model, batch, length, seed)
        got = _native(encoder, src)
        graph = session.run(names, {"src_ids": src})
        with torch.no_grad():
            want = [t.numpy() for pair in model.memory_kv(model.encode(torch.from_numpy(src).long())) for t in pair]
        for name, g, w, o in zip(names, _real(got, lengths), _real(want, lengths), _real(graph, lengths), strict=True):
            np.testing.assert_allclose(g, w, atol=3e-5, rtol=0, err_msg=f"{layout} {name} vs PyTorch")
            np.testing.assert_allclose(g, o, atol=3e-5, rtol=0, err_msg=f"{layout} {name} vs the graph")
        for key in got[0::2]:  # the padding's positions: zeros (the decoder never reads them)
            for b, n in enumerate(lengths):
                assert not key[b, :, :, n:].any()


@needs_exact_ort_int8
@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_compiled_encoder_computes_int8_graphs_as_onnx_runtime(tmp_path, layout):
    """Their int32 sums are exact and their scalings round alike; float32 noise between the
    products can move a value across a rounding boundary of its row's codes (one code, 1/127 of the
    row's largest value): rare, and small (as the decoder step's, tests/test_native_step.py)."""
    model = _model(**LAYOUTS[layout], encoder_layers=2)
    path = _int8(model, build_cpu_encoder(model, tmp_path / "encoder.onnx"))
    session = ort.InferenceSession(str(path), session_options(1), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    encoder = native_step.NativeEncoder(path, _spec(model))
    assert "int8" in encoder.kernels
    for seed, (batch, length) in enumerate([(1, 9), (3, 7), (4, 13)]):
        src, lengths = _sources(model, batch, length, seed)
        for name, g, o in zip(names, _real(_native(encoder, src), lengths), _real(session.run(names, {"src_ids": src}), lengths),
                              strict=True):
            diff = np.abs(g - o)
            assert np.median(diff) < 1e-5 and diff.max() < 0.1, (layout, name, float(np.median(diff)), float(diff.max()))


@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_a_sentence_encodes_to_the_same_bits_alone_and_in_any_batch(tmp_path, precision):
    model = _model(**LAYOUTS["marian"], encoder_layers=2)
    path = build_cpu_encoder(model, tmp_path / "encoder.onnx")
    if precision == "int8":
        path = _int8(model, path)
    encoder = native_step.NativeEncoder(path, _spec(model))
    src, lengths = _sources(model, 5, 17, seed=3)
    batch = _native(encoder, src)
    reordered = [a[::-1] for a in _native(encoder, np.ascontiguousarray(src[::-1]))]
    for b, n in enumerate(lengths):
        wider = np.full((1, 31), model.config.pad_id, np.int32)  # more padding than the batch had
        wider[0, :n] = src[b, :n]
        ways = {"alone": (_native(encoder, np.ascontiguousarray(src[b : b + 1, :n])), 0),
                "padded wider": (_native(encoder, wider), 0), "in reverse order": (reordered, b)}
        for way, (arrays, row) in ways.items():
            for i in range(0, len(batch), 2):  # keys (B, h, d_k, S), values (B, h, S, d_k)
                np.testing.assert_array_equal(arrays[i][row][:, :, :n], batch[i][b][:, :, :n], err_msg=f"{way}: {b}")
                np.testing.assert_array_equal(arrays[i + 1][row][:, :n], batch[i + 1][b][:, :n], err_msg=f"{way}: {b}")


def test_bad_sources_are_refused_by_name(tmp_path):
    model = _model(encoder_layers=1)
    encoder = native_step.NativeEncoder(build_cpu_encoder(model, tmp_path / "encoder.onnx"), _spec(model))
    with pytest.raises(ValueError, match="native encoder: a token id is out of range"):
        encoder.encode(np.array([[5, model.config.src_vocab_size]], np.int32))
    with pytest.raises(ValueError, match="native encoder: a token id is out of range"):
        encoder.encode(np.array([[-1, 5]], np.int32))
    with pytest.raises(ValueError, match="longer than the position table"):
        encoder.encode(np.full((1, model.config.max_positions + 1), 5, np.int32))
    with pytest.raises(ValueError, match="src_ids must be"):
        encoder.encode(np.array([5, 6], np.int32))


def test_graphs_it_cannot_run_stay_on_onnx_runtime(tmp_path, monkeypatch):
    model = _model(encoder_layers=1)
    spec = _spec(model)
    path = build_cpu_encoder(model, tmp_path / "encoder.onnx")
    assert native_step.load_encoder(path, spec) is not None
    for env in (native_step.ENV, native_step.ENCODER_ENV):
        monkeypatch.setenv(env, "0")
        assert native_step.load_encoder(path, spec) is None
        monkeypatch.delenv(env)
    with pytest.raises(native_step.Unsupported, match="not the fused CPU encoder"):
        native_step.NativeEncoder(build_cpu_decoder(model, tmp_path / "decoder.onnx"), spec)  # another graph


@pytest.mark.parametrize("layout", ["paper", "m2m100", "pre_norm_gelu_untied"])
def test_a_tied_int8_table_is_held_once_with_the_same_bits(tmp_path, layout):
    """A tied int8 table (the embeddings' and the projection's) is held once: the decoder reads its
    embedding out of the projection's packed panels and the encoder reads the same panels, instead
    of each mapping the table (NLLB-200's is 250 MiB). The same bits as reading the table; an
    untied model keeps its tables."""
    from tests.test_cpu_graph import _feeds

    model = _model(**LAYOUTS[layout], encoder_layers=2)
    spec = _spec(model)
    for part in ("decoder", "encoder", "other"):
        (tmp_path / part).mkdir()
    dec_path = _int8(model, build_cpu_decoder(model, tmp_path / "decoder" / "decoder.onnx"))
    enc_path = _int8(model, build_cpu_encoder(model, tmp_path / "encoder" / "encoder.onnx"))
    shared, alone = native_step.NativeDecoder(dec_path, spec), native_step.NativeDecoder(dec_path, spec, share_table=False)
    tied = layout != "pre_norm_gelu_untied"
    assert (shared.table is not None) == tied and alone.table is None
    feeds = _feeds(model, 3, 4, 5, 9, seed=7)
    for name, got in shared.run_step(feeds).items():
        np.testing.assert_array_equal(got, alone.run_step(feeds)[name], err_msg=name)
    encoder = native_step.NativeEncoder(enc_path, spec, decoder=shared)
    assert encoder.shares_table == tied
    src, _ = _sources(model, 3, 11, seed=5)
    for got, want in zip(_native(encoder, src), _native(native_step.NativeEncoder(enc_path, spec), src), strict=True):
        np.testing.assert_array_equal(got, want)
    with pytest.raises(ValueError, match="native encoder: a token id is out of range"):
        encoder.encode(np.array([[5, model.config.src_vocab_size]], np.int32))
    # Another model's table is not taken for this one's.
    other = _model(**LAYOUTS[layout], encoder_layers=2, d_ff=40)
    torch.manual_seed(9)
    with torch.no_grad():
        other.src_embed.lut.weight.normal_()
    other_dec = native_step.NativeDecoder(_int8(other, build_cpu_decoder(other, tmp_path / "other" / "decoder.onnx")), spec)
    assert not native_step.NativeEncoder(enc_path, spec, decoder=other_dec).shares_table
