"""`nmtserve gpu-check` on the CPU: the whole check as it runs in the GPU image (torch not
importable), with TensorRT replaced by tests/tensorrt_standin.py (its "plans" run the ONNX graphs
on ONNX Runtime) and its builder writing stand-in plans. A good build passes; an "fp16 build"
whose decoder is damaged fails, naming the rows."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def gpu_repository(tmp_path_factory) -> Path:
    from nmtserve.cli import main

    repo = tmp_path_factory.mktemp("gpucheck") / "model_repository"
    assert main(["export", str(ROOT / "models" / "en-fr-numbers"), "--repository", str(repo), "--target", "gpu",
                 "--skip-parity", "--gate-sentences", "16", "--max-batch", "8", "--max-source-len", "64",
                 "--max-target-len", "64"]) == 0
    return repo


def _run_check(repo: Path, damaged_fp16_decoder: Path | None = None) -> subprocess.CompletedProcess:
    code = textwrap.dedent(f"""
        import importlib.abc, sys

        class NoTorch(importlib.abc.MetaPathFinder):  # the GPU image has no torch
            def find_spec(self, name, path, target=None):
                if name == "torch" or name.startswith("torch."):
                    raise ImportError("torch is not installed in the GPU image")

        sys.meta_path.insert(0, NoTorch())
        sys.path.insert(0, {str(ROOT / "tests")!r})
        import json
        from pathlib import Path
        import tensorrt_standin
        from nmtserve.export import engines, gpucheck, tensorrt as build
        from nmtserve.runtime import tensorrt as runtime
        from nmtserve.runtime.spec import ModelSpec

        runtime.tensorrt_module = lambda: tensorrt_standin
        runtime.import_tensorrt = lambda *error: tensorrt_standin
        build.gpu_identity = lambda: {{"gpu": "Stand-in GPU", "compute_capability": "9.0"}}
        damaged = {str(damaged_fp16_decoder) if damaged_fp16_decoder else None!r}

        def standin_build(onnx_path, plan_path, inputs, opts, timing_cache=None, force=False):
            runs = damaged if opts.fp16 and damaged and plan_path.stem == "decoder" else onnx_path
            return tensorrt_standin.write_plan(plan_path, Path(runs), inputs, opts)

        engines.build_engine = standin_build
        engines.load_runtime = lambda enc, dec, art: runtime.TensorRTModel(
            enc, dec, ModelSpec.load(art / "model.json"), arrays=tensorrt_standin.ALIGNED_HOST)
        from nmtserve.cli import main
        code = main(["gpu-check", "--repository", {str(repo)!r}, "--sentences", "12", "--batch", "4"])
        assert "torch" not in sys.modules
        sys.exit(code)
        """)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, cwd=ROOT)


def test_gpu_check_passes_torch_free_on_good_plans(gpu_repository):
    done = _run_check(gpu_repository)
    print(done.stdout)
    assert done.returncode == 0, done.stdout + done.stderr
    for row in ("tensorrt fp32 steps", "tensorrt fp32 engine", "tensorrt fp16 steps", "tensorrt fp16 engine"):
        assert any(line.startswith(row) and "PASS" in line for line in done.stdout.splitlines()), done.stdout
    assert "every check passed" in done.stdout


def test_gpu_check_fails_a_bad_fp16_build(gpu_repository, tmp_path):
    model = onnx.load(str(gpu_repository / "generate" / "1" / "decoder.onnx"))
    generator = next(n for n in model.graph.node if "/generator/" in n.name and n.op_type == "MatMul")
    init = next(i for i in model.graph.initializer if i.name == generator.input[1])
    w = numpy_helper.to_array(init)
    init.CopyFrom(numpy_helper.from_array(w + np.random.default_rng(1).normal(0, w.std(), w.shape).astype(w.dtype),
                                          init.name))
    onnx.save(model, str(tmp_path / "bad-decoder.onnx"))
    done = _run_check(gpu_repository, tmp_path / "bad-decoder.onnx")
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert any(line.startswith("tensorrt fp32 steps") and "PASS" in line for line in lines)
    assert any(line.startswith("tensorrt fp16 steps") and "FAIL" in line for line in lines)
    assert "FAILED" in done.stdout


def test_gpu_check_without_tensorrt_says_so():
    done = subprocess.run([sys.executable, "-m", "nmtserve.cli", "gpu-check", "--repository", "nowhere"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 2 and "SKIP: TensorRT is not installed" in done.stderr
