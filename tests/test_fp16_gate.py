"""The fp16 quality gate at GPU container start, on the CPU through the TensorRT stand-in.

``nmtserve export --target gpu --precision fp16`` of the demo ships its held-out sentences with
their fp32 translations; ``engines.prepare_plans`` builds "fp16 plans", translates those
sentences with them through ``nmtserve.runtime.tensorrt.TensorRTModel`` and the serving engine,
and falls back to fp32 plans (or refuses) when they lose too much BLEU. Only TensorRT itself is
replaced: a "plan" is the stand-in's JSON naming the ONNX graph it runs on ONNX Runtime
(tests/tensorrt_standin.py). A good fp16 build is stood in by the exported graph itself, a bad
one by the same graph with its output projection perturbed.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from nmtserve.export import engines, quality
from nmtserve.export.tensorrt import metadata_path, plan_is_current, plan_metadata

DEMO = Path(__file__).resolve().parents[1] / "models" / "en-fr-numbers"
ENV = "standin-gpu-sm9.0-trt10.5.0"
GPU = {"gpu": "Stand-in GPU", "compute_capability": "9.0"}


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> Path:
    from nmtserve.cli import main

    repo = tmp_path_factory.mktemp("fp16") / "model_repository"
    code = main(["export", str(DEMO), "--repository", str(repo), "--target", "gpu", "--precision", "fp16",
                 "--skip-parity", "--gate-sentences", "48", "--max-batch", "16", "--max-source-len", "64",
                 "--max-target-len", "64"])
    assert code == 0
    return repo


@pytest.fixture
def repository(exported, tmp_path) -> Path:
    import shutil

    return Path(shutil.copytree(exported, tmp_path / "model_repository"))


def _damaged(decoder: Path, out: Path) -> Path:
    """The decoder with noise on its vocabulary projection: runs, but translates worse."""
    model = onnx.load(str(decoder))
    generator = next(n for n in model.graph.node if "/generator/" in n.name and n.op_type == "MatMul")
    init = next(i for i in model.graph.initializer if i.name == generator.input[1])
    w = numpy_helper.to_array(init)
    noise = np.random.default_rng(0).normal(0, 3 * w.std(), w.shape).astype(w.dtype)
    init.CopyFrom(numpy_helper.from_array(w + noise, init.name))
    onnx.save(model, str(out))
    return out


class StandinBuilder:
    """``build_engine``'s contract with stand-in plans: fp16 builds run ``fp16_decoder``."""

    def __init__(self, fp16_decoder: Path | None = None):
        self.fp16_decoder = fp16_decoder
        self.builds: list[tuple[str, bool]] = []  # (plan name, fp16) actually built

    def __call__(self, onnx_path, plan_path, inputs, opts, timing_cache=None, force=False):
        import tensorrt_standin

        expected = plan_metadata(onnx_path, opts, "10.5.0", GPU)
        if plan_is_current(plan_path, expected)[0] and not force:
            return plan_path
        runs = self.fp16_decoder if opts.fp16 and plan_path.stem == "decoder" and self.fp16_decoder else onnx_path
        tensorrt_standin.write_plan(plan_path, runs, inputs, opts)
        metadata_path(plan_path).write_text(json.dumps(expected))
        self.builds.append((plan_path.stem, opts.fp16))
        return plan_path


@pytest.fixture
def standin_runtime(monkeypatch):
    import tensorrt_standin
    from tensorrt_standin import ALIGNED_HOST as HOST

    from nmtserve.runtime import tensorrt as runtime_module
    from nmtserve.runtime.spec import ModelSpec

    monkeypatch.setattr(runtime_module, "import_tensorrt", lambda *error: tensorrt_standin)
    monkeypatch.setattr(engines, "load_runtime", lambda enc, dec, artifacts: runtime_module.TensorRTModel(
        enc, dec, ModelSpec.load(artifacts / engines.SPEC_FILE), arrays=HOST))


def _prepare(repository: Path, cache: Path, builder: StandinBuilder, monkeypatch, **kw):
    monkeypatch.setattr(engines, "build_engine", builder)
    return engines.prepare_plans(repository, cache, environment=ENV, **kw)


def _plan_runs(repository: Path) -> str:
    return json.loads((repository / "generate" / "1" / "decoder.plan").read_text())["onnx"]


def test_the_export_ships_the_gate_set_with_fp32_translations(exported):
    artifacts = exported / "generate" / "1"
    gate = quality.GateSet.load(artifacts / quality.GATE_FILE)
    assert len(gate.sources) == len(gate.references) == len(gate.fp32) == 48
    assert gate.max_bleu_drop == 0.3
    assert json.loads((artifacts / "model.json").read_text())["fp16"] is True
    assert json.loads((artifacts / quality.REPORT_FILE).read_text())["fp32"]["bleu"] > 90


def test_fp16_plans_that_translate_as_well_are_served(repository, tmp_path, standin_runtime, monkeypatch):
    builder = StandinBuilder()
    placed = _prepare(repository, tmp_path / "cache", builder, monkeypatch)
    assert builder.builds == [("encoder", True), ("decoder", True)]
    assert [p.model for p in placed] == ["encoder", "decoder"]
    report = json.loads((repository / "generate" / "1" / quality.REPORT_FILE).read_text())["fp16"]
    assert report["passed"] and report["bleu_drop"] == 0.0 and report["identical"] == 1.0
    # A restart reuses the plans and the verdict: nothing is built or translated again.
    monkeypatch.setattr(engines, "gate_fp16", lambda *a: pytest.fail("the gate ran again"))
    _prepare(repository, tmp_path / "cache", builder, monkeypatch)
    assert len(builder.builds) == 2


def test_fp16_plans_that_lose_quality_fall_back_to_fp32(repository, tmp_path, standin_runtime, monkeypatch, caplog):
    bad = _damaged(repository / "generate" / "1" / "decoder.onnx", tmp_path / "decoder-bad-fp16.onnx")
    builder = StandinBuilder(fp16_decoder=bad)
    with caplog.at_level(logging.INFO, logger="nmtserve"):
        _prepare(repository, tmp_path / "cache", builder, monkeypatch)
    assert builder.builds == [("encoder", True), ("decoder", True), ("encoder", False), ("decoder", False)]
    assert _plan_runs(repository) == str(repository / "generate" / "1" / "decoder.onnx")  # fp32 placed
    report = json.loads((repository / "generate" / "1" / quality.REPORT_FILE).read_text())["fp16"]
    assert not report["passed"] and report["bleu_drop"] > 0.3 and report["worst"]
    assert any("quality gate fp16 FAIL" in r.message and "falling back to fp32 plans" in r.message
               for r in caplog.records)
    # The next start goes straight to the fp32 plans, saying why.
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="nmtserve"):
        _prepare(repository, tmp_path / "cache", builder, monkeypatch)
    assert len(builder.builds) == 4
    assert any("failed the quality gate earlier" in r.message for r in caplog.records)


def test_fp16_gate_refuse_stops_the_start(repository, tmp_path, standin_runtime, monkeypatch):
    bad = _damaged(repository / "generate" / "1" / "decoder.onnx", tmp_path / "decoder-bad-fp16.onnx")
    with pytest.raises(engines.EngineSetupError, match=r"quality gate fp16 FAIL.*NMTSERVE_TRT_PRECISION=fp32"):
        _prepare(repository, tmp_path / "cache", StandinBuilder(fp16_decoder=bad), monkeypatch, fp16_gate="refuse")


def test_fp16_without_a_gate_set_is_served_unchecked_and_says_so(repository, tmp_path, standin_runtime,
                                                                  monkeypatch, caplog):
    (repository / "generate" / "1" / quality.GATE_FILE).unlink()
    with caplog.at_level(logging.WARNING, logger="nmtserve"):
        placed = _prepare(repository, tmp_path / "cache", StandinBuilder(), monkeypatch)
    assert len(placed) == 2
    assert any("served unchecked" in r.message for r in caplog.records)
