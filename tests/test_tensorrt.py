"""TensorRT build: profile and staleness logic everywhere; the real build only with a GPU + TensorRT."""

from __future__ import annotations

import importlib.util
import json
import shutil

import pytest

from nmtserve import graphs
from nmtserve.export.tensorrt import BuildOptions, metadata_path, plan_is_current, profile_shapes

DIMS = graphs.Dims(layers=2, heads=4, d_k=8, vocab=100)
HAS_TRT = importlib.util.find_spec("tensorrt") is not None and shutil.which("nvidia-smi") is not None


def test_profiles_cover_every_decoder_input_with_ordered_shapes():
    opts = BuildOptions(max_batch=16, max_beam=4, max_source_len=128, max_target_len=100)
    shapes = profile_shapes(graphs.decoder_inputs(DIMS), opts)
    assert set(shapes) == {t.name for t in graphs.decoder_inputs(DIMS)}
    for lo, mid, hi in shapes.values():
        assert all(a <= b <= c for a, b, c in zip(lo, mid, hi, strict=True))
        assert min(lo) >= 1  # no zero-length dims: step 0 uses a masked dummy past slot
    assert shapes["past_key.0"][2] == (100, 64, 4, 8)
    assert shapes["cache_rows"][2] == (16, 4, 100)
    assert shapes["memory_key.1"][2] == (16, 4, 8, 128)


def test_plan_is_rebuilt_when_anything_it_depends_on_changes(tmp_path):
    plan = tmp_path / "decoder.plan"
    meta = {"onnx_sha256": "abc", "tensorrt": "10.3", "gpu": "H100", "compute_capability": "9.0", "options": {"fp16": True}}
    assert plan_is_current(plan, meta) == (False, "no plan yet")
    plan.write_bytes(b"engine")
    metadata_path(plan).write_text(json.dumps(meta))
    assert plan_is_current(plan, meta)[0]
    for key, value in [("onnx_sha256", "def"), ("tensorrt", "10.4"), ("gpu", "L4"), ("options", {"fp16": False})]:
        ok, why = plan_is_current(plan, {**meta, key: value})
        assert not ok and key in why


@pytest.mark.tensorrt
@pytest.mark.skipif(not HAS_TRT, reason="needs TensorRT and an NVIDIA GPU")
def test_build_tiny_engines(tmp_path):  # pragma: no cover - GPU only
    import torch

    from nmtserve.export.onnx_export import dims_of, export_decoder
    from nmtserve.export.tensorrt import build_engine
    from nmtserve.model.config import TransformerConfig
    from nmtserve.model.transformer import Transformer

    model = Transformer(TransformerConfig(src_vocab_size=40, tgt_vocab_size=40, d_model=16, h=2, d_ff=32,
                                          encoder_layers=1, decoder_layers=1)).eval()
    torch.manual_seed(0)
    onnx_path = export_decoder(model, tmp_path / "decoder.onnx")
    opts = BuildOptions(max_batch=4, max_beam=2, max_source_len=16, max_target_len=16, fp16=True)
    plan = build_engine(onnx_path, tmp_path / "decoder.plan", graphs.decoder_inputs(dims_of(model)), opts)
    assert plan.stat().st_size > 0 and plan_is_current(plan, json.loads(metadata_path(plan).read_text()))[0]
