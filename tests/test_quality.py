"""Reduced precision and its quality gate: int8 export of the demo, served, and a gate that refuses."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest

from nmtserve.export import quality
from nmtserve.export.pipeline import ExportOptions
from nmtserve.export.quantize import KEEP_GROUPS, parse_keep, weight_matmuls

DEMO = Path(__file__).resolve().parents[1] / "models" / "en-fr-numbers"


# ---- the report, on hand-made translations -------------------------------------------------------

FR = ["un deux trois quatre cinq", "six sept huit neuf dix", "onze douze treize quatorze quinze"]


def _gate(refs: bool = True) -> quality.GateSet:
    gate = quality.GateSet(sources=["1 2 3 4 5", "6 7 8 9 10", "11 12 13 14 15"], references=FR if refs else None,
                           origin="hand-made")
    gate.fp32, gate.fp32_tokens = list(FR), [[5, 2], [6, 2], [7, 2]]
    return gate


def test_identical_translations_pass_with_no_drop():
    report = quality.compare(_gate(), FR, [[5, 2], [6, 2], [7, 2]], "int8")
    assert (report.bleu_drop, report.identical, report.token_agreement, report.worst) == (0.0, 1.0, 1.0, [])
    assert report.exact_match == report.exact_match_fp32 == 1.0
    assert report.passed and "PASS" in report.summary()


def test_a_changed_sentence_is_named_among_the_worst_and_counted():
    changed = [*FR[:2], "onze douze treize seize"]
    report = quality.compare(_gate(), changed, [[5, 2], [6, 2], [8, 9, 2]], "int8", max_bleu_drop=0.3)
    assert report.identical == pytest.approx(2 / 3)
    assert report.token_agreement == pytest.approx(4 / 7)  # 2 + 2 + 0 equal positions of 2 + 2 + 3
    assert [w["index"] for w in report.worst] == [2] and report.worst[0]["int8"] == changed[2]
    assert report.exact_match == pytest.approx(2 / 3) and report.bleu_drop > 0.3
    assert not report.passed and "FAIL" in report.summary()


def test_without_references_fp32_translations_are_the_references():
    report = quality.compare(_gate(refs=False), FR, [[5, 2], [6, 2], [7, 2]], "fp16")
    assert report.references == "fp32 translations" and report.bleu_fp32 == 100.0
    assert report.exact_match is None and report.passed


def test_gate_files_that_do_not_line_up_are_named(tmp_path):
    (tmp_path / "src.txt").write_text("a\nb\nc\n")
    (tmp_path / "ref.txt").write_text("x\ny\n")
    with pytest.raises(quality.GateError, match=r"src.txt has 3 lines but .*ref.txt has 2"):
        quality.read_gate_set(tmp_path / "src.txt", tmp_path / "ref.txt")
    with pytest.raises(quality.GateError, match="cannot read .*missing.txt"):
        quality.read_gate_set(tmp_path / "missing.txt")
    gate = quality.read_gate_set(tmp_path / "src.txt", limit=2)
    assert gate.sources == ["a", "b"] and gate.references is None


@pytest.mark.parametrize("changes, message", [
    ({"precision": "fp16"}, "fp16 is built into the TensorRT plans of --target gpu"),
    ({"precision": "int8", "target": "gpu"}, "int8 graphs are for ONNX Runtime on a CPU"),
    ({"precision": "bf16"}, "precision must be one of fp32, int8, fp16"),
    ({"gate_reference": Path("r.txt")}, "--gate-reference needs --gate-source"),
    ({"max_bleu_drop": -1.0}, "--max-bleu-drop must be >= 0"),
    ({"int8_keep_fp32": ("output", "lm_head")}, "unknown group.*lm_head.*choose from output, attention, ffn, embeddings"),
])
def test_option_mistakes_are_refused_before_any_work(changes, message):
    with pytest.raises(ValueError, match=message):
        ExportOptions(repository=Path("unused"), **changes).check()


def test_keep_groups_parse_and_match_the_exported_node_names(demo_repository):
    assert parse_keep("output, ffn,output") == ("ffn", "output")
    decoder = onnx.load(str(demo_repository / "generate" / "1" / "decoder.onnx"), load_external_data=False)
    names = weight_matmuls(decoder)
    tables = [n.name for n in decoder.graph.node if n.op_type == "Gather" and n.input[0] == "tgt_embed.lut.weight"]
    assert tables
    for group, pattern in KEEP_GROUPS.items():
        found = tables if group == "embeddings" else names
        assert any(pattern in n for n in found), f"no decoder weight MatMul (or table) matches the {group!r} group"
    assert sum(KEEP_GROUPS["output"] in n for n in names) == 1  # exactly the vocabulary projection


# ---- int8 end to end on the demo -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def int8_repository(demo_int8_repository) -> Path:
    return demo_int8_repository


def test_int8_export_passes_the_gate_and_writes_its_report(int8_repository):
    artifacts = int8_repository / "generate" / "1"
    report = json.loads((artifacts / quality.REPORT_FILE).read_text())
    assert set(report) == {"fp32", "int8"}
    int8 = report["int8"]
    assert int8["passed"] and int8["sentences"] == 200 and int8["bleu_drop"] <= 0.3
    assert int8["references"] == "reference translations" and report["fp32"]["bleu"] > 90
    assert int8["kept_fp32"] == [] and int8["weight_matmuls_int8"] > 0
    spec = json.loads((artifacts / "model.json").read_text())
    assert spec["precision"] == "int8"
    ops = {n.op_type for n in onnx.load(str(artifacts / "decoder.onnx")).graph.node}
    assert {"MatMulIntegerToFloat", "QGemm", "TopK"} <= ops  # weights in int8; candidates still in the graph
    assert int8["tables_int8"] == 2  # the source and target vocabulary tables
    gate = quality.GateSet.load(artifacts / quality.GATE_FILE)
    assert len(gate.sources) == len(gate.fp32) == len(gate.fp32_tokens) == 200


@pytest.mark.server
def test_int8_is_served_and_agrees_with_fp32(int8_repository, demo_checkpoint, demo_sentences):
    """Served int8 translations equal the in-process engine on the same int8 graphs (token for
    token), and agree with the fp32 reference decode on nearly every sentence (reported)."""
    import tritonclient.grpc as grpcclient
    from helpers import DEFAULTS

    from nmtserve.engine import InflightBatcher
    from nmtserve.model.reference import translate as reference_translate
    from nmtserve.runtime.onnxruntime import OnnxModel
    from nmtserve.runtime.spec import ModelSpec
    from nmtserve.server.launcher import ServerConfig, TritonServer

    texts = demo_sentences[200:260]  # not the gate's sentences
    artifacts = int8_repository / "generate" / "1"
    spec = ModelSpec.load(artifacts / "model.json")
    engine = InflightBatcher(OnnxModel(artifacts / "encoder.onnx", artifacts / "decoder.onnx", spec)).start()
    tok = demo_checkpoint.tokenizer
    int8_local = [tok.decode(r[0].tokens) for r in engine.translate([tok.encode(t) for t in texts], DEFAULTS)]
    engine.stop()
    fp32 = [n[0][0] for n in reference_translate(demo_checkpoint.model, tok, texts, DEFAULTS)]

    server = TritonServer(ServerConfig.on_free_ports(int8_repository))
    server.start()
    try:
        server.wait_until_ready(120)
        client = grpcclient.InferenceServerClient(server.urls.grpc_address)
        text = grpcclient.InferInput("TEXT", [len(texts)], "BYTES")
        text.set_data_from_numpy(np.array([t.encode() for t in texts], dtype=np.object_))
        served = [t.decode() for t in client.infer("translate", [text]).as_numpy("TRANSLATION")]
        params = client.get_model_config("translate", as_json=True)["config"]["parameters"]
    finally:
        server.stop()
    assert served == int8_local
    agreement = np.mean([a == b for a, b in zip(served, fp32, strict=True)])
    print(f"served int8 identical to the fp32 reference on {100 * agreement:.1f}% of {len(texts)} sentences")
    assert agreement >= 0.95
    assert params["precision"]["string_value"] == "int8"
    assert params["quality"]["string_value"].startswith("quality gate int8 PASS")


def _damaged_quantizer(real):
    """The real int8 quantization, then a third of every int8 weight's entries negated: the graphs
    still run, but translate worse, as a broken quantization would."""
    from onnx import numpy_helper

    def damaged(source, destination, keep_fp32=(), tables=(), shared=None, min_bytes=None):
        result = real(source, destination, keep_fp32, tables, shared, min_bytes)
        model = onnx.load(str(destination))
        rng = np.random.default_rng(0)
        for init in model.graph.initializer:
            if ".int8_" in init.name:
                w = numpy_helper.to_array(init).copy()
                flip = rng.random(w.shape) < 0.33
                w[flip] = -np.clip(w[flip], -127, 127)
                init.CopyFrom(numpy_helper.from_array(w, init.name))
        onnx.save(model, str(destination))
        return result

    return damaged


def test_a_damaged_quantization_is_refused_and_nothing_is_written(tmp_path, monkeypatch, capsys):
    from nmtserve.cli import main
    from nmtserve.export import pipeline

    monkeypatch.setattr(pipeline, "quantize_int8", _damaged_quantizer(pipeline.quantize_int8))
    repo = tmp_path / "model_repository"
    code = main(["export", str(DEMO), "--repository", str(repo), "--precision", "int8", "--skip-parity",
                 "--gate-sentences", "60", "--max-source-len", "128", "--max-target-len", "128"])
    err = capsys.readouterr().err
    assert code == 1
    assert "quality gate int8 FAIL" in err and "more than --max-bleu-drop 0.3: the repository was not written" in err
    assert "Worst sentences:" in err and "fp32: " in err and "int8: " in err
    assert "--int8-keep-fp32 output" in err and "--precision fp32" in err
    assert not repo.exists()


def test_int8_without_sentences_to_check_on_is_refused(tmp_path, capsys):
    import shutil

    from nmtserve.cli import main

    ckpt = tmp_path / "ckpt"
    shutil.copytree(DEMO, ckpt, ignore=shutil.ignore_patterns("test.*"))
    code = main(["export", str(ckpt), "--repository", str(tmp_path / "repo"), "--precision", "int8", "--skip-parity"])
    assert code == 1
    assert "no held-out test.en / test.<tgt> pair" in capsys.readouterr().err


def test_int8_of_a_trained_marian_model_passes_the_gate(demo_checkpoint, tmp_path):
    """The Marian test model: the demo written as a Hugging Face Marian directory (save_as_marian),
    exported through the Marian importer in int8, gated on the demo's held-out pairs."""
    from nmtserve.cli import main
    from nmtserve.model.marian_export import save_as_marian

    marian = save_as_marian(demo_checkpoint, tmp_path / "marian")
    repo = tmp_path / "model_repository"
    code = main(["export", str(marian), "--repository", str(repo), "--precision", "int8", "--skip-parity",
                 "--gate-source", str(DEMO / "test.en"), "--gate-reference", str(DEMO / "test.fr"),
                 "--gate-sentences", "200", "--max-source-len", "128", "--max-target-len", "128"])
    assert code == 0
    report = json.loads((repo / "generate" / "1" / quality.REPORT_FILE).read_text())
    assert report["fp32"]["bleu"] > 90 and report["int8"]["passed"] and report["int8"]["bleu_drop"] <= 0.3
