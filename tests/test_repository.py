"""The Triton model repository writer: configs from the contract for each target and step
backend, graph models only when asked, stale files removed, and the committed model_repository/
equal to what the demo's export writes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers import config_parameters

from nmtserve import graphs
from nmtserve.export import engines
from nmtserve.export.repository import RepositoryOptions, model_configs, write_repository

ROOT = Path(__file__).resolve().parents[1]
DIMS = graphs.Dims(layers=2, heads=4, d_k=8, vocab=100)


def _section(config: str, kind: str) -> list[tuple[str, str, list[int]]]:
    """(name, data_type, dims) of the `input [...]` or `output [...]` block of a config.pbtxt."""
    block = re.search(rf"^{kind} \[\n(.*?)\n\]", config, re.MULTILINE | re.DOTALL).group(1)
    return [(name, dtype, [int(d) for d in dims.split(",")])
            for name, dtype, dims in re.findall(r'name: "([^"]+)" data_type: (\w+) dims: \[ ([^\]]+) \]', block)]


@pytest.mark.parametrize("model, inputs, outputs", [
    ("encoder", graphs.encoder_inputs(), graphs.encoder_outputs(DIMS)),
    ("decoder", graphs.decoder_inputs(DIMS), graphs.decoder_outputs(DIMS)),
])
def test_gpu_target_writes_tensorrt_plan_configs_with_the_graph_contract(model, inputs, outputs):
    config, cls = model_configs(DIMS, RepositoryOptions(target="gpu", graph_models=True))[model]
    assert cls is None  # no model.py: Triton's TensorRT backend runs the plan
    assert 'platform: "tensorrt_plan"' in config and "backend:" not in config
    assert "max_batch_size: 0" in config and "kind: KIND_GPU" in config
    types = {"int32": "TYPE_INT32", "bool": "TYPE_BOOL", "float": "TYPE_FP32"}  # plan I/O stays fp32 with --fp16
    for kind, tensors in (("input", inputs), ("output", outputs)):
        assert _section(config, kind) == [
            (t.name, types[t.dtype], [a if isinstance(a, int) else -1 for a in t.axes]) for t in tensors
        ]


def test_gpu_target_runs_generate_on_the_tensorrt_plans_one_instance_per_gpu(tmp_path):
    gpu = model_configs(DIMS, RepositoryOptions(target="gpu"))["generate"][0]
    params = config_parameters(gpu)
    assert params["step_backend"] == "tensorrt" and "kind: KIND_GPU" in gpu
    # The plan parameters are relative to generate/1 and name the plans the container places.
    version_dir = tmp_path / "generate" / "1"
    for model in ("encoder", "decoder"):
        assert (version_dir / params[f"{model}_plan"]).resolve() == engines.plan_destinations(tmp_path, model)[0]


def test_gpu_target_loads_no_second_copy_of_the_plans_unless_asked(tmp_path):
    """generate deserializes its plans itself: the encoder/decoder TensorRT models (each another
    copy of an engine in GPU memory, and another model whose failure stops the server) exist only
    with graph_models, and then get the same plans too."""
    write_repository(tmp_path, DIMS, {}, RepositoryOptions(target="gpu"))
    assert not (tmp_path / "encoder").exists() and not (tmp_path / "decoder").exists()
    assert engines.plans_needed(tmp_path) == ["encoder", "decoder"]
    assert engines.plan_destinations(tmp_path, "decoder") == [tmp_path / "generate" / "1" / "decoder.plan"]
    write_repository(tmp_path, DIMS, {}, RepositoryOptions(target="gpu", graph_models=True))
    assert engines.plan_destinations(tmp_path, "decoder") == [tmp_path / "generate" / "1" / "decoder.plan",
                                                               tmp_path / "decoder" / "1" / engines.PLAN_FILE]


def test_cpu_target_runs_generate_in_process_on_the_cpu():
    cpu = model_configs(DIMS, RepositoryOptions(target="cpu"))["generate"][0]
    params = config_parameters(cpu)
    assert params["step_backend"] == "inprocess" and "kind: KIND_CPU" in cpu
    assert "encoder_plan" not in params


def test_gpu_target_can_run_without_tensorrt_on_onnx_runtime_cuda(tmp_path):
    opts = RepositoryOptions(target="gpu", step_backend="onnxruntime-cuda")
    config = model_configs(DIMS, opts)["generate"][0]
    assert config_parameters(config)["step_backend"] == "onnxruntime-cuda" and "kind: KIND_GPU" in config
    write_repository(tmp_path, DIMS, {}, opts)
    assert engines.plans_needed(tmp_path) == []  # no plan to build at container start


@pytest.mark.parametrize("target, backend, message", [
    ("cpu", "tensorrt", "needs a GPU"), ("cpu", "onnxruntime-cuda", "needs a GPU"), ("gpu", "cuda", "one of"),
])
def test_step_backend_is_checked_against_the_target(target, backend, message):
    with pytest.raises(ValueError, match=message):
        RepositoryOptions(target=target, step_backend=backend)


def test_cpu_target_keeps_the_graphs_in_onnx_runtime_python_models():
    configs = model_configs(DIMS, RepositoryOptions(graph_models=True))
    for model in ("encoder", "decoder"):
        config, cls = configs[model]
        assert cls == "OnnxGraphModel" and 'backend: "python"' in config and "tensorrt" not in config


def test_unknown_target_is_rejected():
    with pytest.raises(ValueError, match="target"):
        RepositoryOptions(target="tpu")


def test_gpu_export_over_a_cpu_repository_leaves_no_stale_graph_model_py(tmp_path):
    write_repository(tmp_path, DIMS, {}, RepositoryOptions(target="cpu", graph_models=True))
    assert (tmp_path / "encoder" / "1" / "model.py").is_file()
    write_repository(tmp_path, DIMS, {}, RepositoryOptions(target="gpu"))
    assert not (tmp_path / "encoder" / "1" / "model.py").exists()
    assert not (tmp_path / "decoder" / "1" / "model.py").exists()
    assert (tmp_path / "generate" / "1" / "model.py").is_file()


def test_cpu_repository_serves_the_graphs_only_when_asked_and_drops_stale_ones(tmp_path):
    """encoder/decoder models hold a copy of the weights each: only with graph_models (or the bls
    step backend, which calls them); a re-export without them removes them, or Triton loads them."""
    assert {"encoder", "decoder"}.isdisjoint(model_configs(DIMS, RepositoryOptions()))
    assert {"encoder", "decoder"} <= set(model_configs(DIMS, RepositoryOptions(graph_models=True)))
    assert {"encoder", "decoder"} <= set(model_configs(DIMS, RepositoryOptions(step_backend="bls")))
    write_repository(tmp_path, DIMS, {}, RepositoryOptions(graph_models=True))
    assert (tmp_path / "decoder" / "config.pbtxt").is_file()
    write_repository(tmp_path, DIMS, {}, RepositoryOptions())
    assert not (tmp_path / "encoder").exists() and not (tmp_path / "decoder").exists()


# ---- nmtserve.export.engines: TensorRT replaced at build_engine only ------------------------------


def test_the_committed_model_repository_is_what_the_demo_export_writes():
    """model_repository/ is committed (configs, model.py) for reading; the demo re-exports into it."""
    from nmtserve.export.onnx_export import dims_of
    from nmtserve.export.pipeline import named_pair
    from nmtserve.model.checkpoint import load_checkpoint

    demo = ROOT / "models" / "en-fr-numbers"
    dims = dims_of(load_checkpoint(demo).model)
    # What the demo's export measures and reads: its pair, a model that drops inline markup, and
    # generate in the server's process (the CPU target's default where nmtserve_native has the
    # backend, as scripts/setup.sh and the images build it).
    written = RepositoryOptions(named_pair=named_pair(demo), inline_markup="drop", generate_backend="nmtserve")
    for model, (config, cls) in model_configs(dims, written).items():
        committed = ROOT / "model_repository" / model
        assert (committed / "config.pbtxt").read_text() == config, f"{model}/config.pbtxt is stale: re-export"
        assert (committed / "1" / "model.py").is_file() == (cls is not None)
        if cls is not None:  # the hand-over names the module that holds the class
            assert f" import {cls} as TritonPythonModel" in (committed / "1" / "model.py").read_text()


def test_where_generate_runs_is_chosen_from_the_export_and_what_nmtserve_native_has(tmp_path, monkeypatch):
    """``export --generate-backend`` unset: the nmtserve backend (in the server's process) where it
    can serve the export and nmtserve_native has it, else the Python backend; the export's summary
    says which and why; an explicit choice it cannot serve is refused by name."""
    from nmtserve.decoding import native
    from nmtserve.export.pipeline import ExportOptions, _generate_backend_note

    monkeypatch.setattr(native, "triton_backend_library", lambda: tmp_path / "libtriton_nmtserve.so")
    chosen = ExportOptions(repository=tmp_path)
    assert chosen.served_generate_backend() == "nmtserve"
    assert "tritonserver process" in _generate_backend_note(chosen, "nmtserve")
    for python in (ExportOptions(repository=tmp_path, target="gpu"),
                   ExportOptions(repository=tmp_path, text_in_generate=False),
                   ExportOptions(repository=tmp_path, step_backend="bls"),
                   ExportOptions(repository=tmp_path, generate_backend="python")):
        assert python.served_generate_backend() == "python"
        assert _generate_backend_note(python, "python") == "generate runs on the Python backend (a stub process of its own)"
    monkeypatch.setattr(native, "triton_backend_library", lambda: None)
    assert chosen.served_generate_backend() == "python"
    assert "has no nmtserve backend" in _generate_backend_note(chosen, "python")
    for bad, message in (({"target": "gpu"}, "serves the CPU target"),
                         ({"text_in_generate": False}, "three-step-ensemble"),
                         ({"step_backend": "bls"}, "--step-backend bls")):
        with pytest.raises(ValueError, match=message):
            ExportOptions(repository=tmp_path, generate_backend="nmtserve", **bad).check()
