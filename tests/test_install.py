"""The install path stays CPU-only (issue 27): what scripts/setup.sh installs resolves PyTorch's
CPU build and no CUDA package, and serving needs no torch at all. Resolved with
`pip install --dry-run --ignore-installed`, from the package sources this machine is configured
with (CI's machine: the same as a user's fresh one)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


def _resolve(tmp_path: Path, *requirements: str) -> dict[str, str]:
    report = tmp_path / "report.json"
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
                           "--report", str(report), *requirements], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return {i["metadata"]["name"].lower(): i["metadata"]["version"] for i in json.loads(report.read_text())["install"]}


def _cuda(names: dict[str, str]) -> list[str]:
    # nvidia-pytriton is the Triton server wheel (CPU here), not a CUDA library.
    return sorted(n for n in names if (n.startswith(("nvidia-", "cuda-")) and n != "nvidia-pytriton") or n == "triton")


def test_setup_installs_the_cpu_build_of_torch_and_no_cuda(tmp_path):
    args = subprocess.run(["bash", str(ROOT / "scripts" / "torch-cpu-args.sh")], capture_output=True, text=True,
                          check=True, env={"PYTHON": sys.executable, "PATH": "/usr/bin:/bin"}).stdout.split()
    assert args[-1].startswith("torch==") and args[-1].endswith("+cpu"), args
    assert "torch-cpu-args.sh" in (ROOT / "scripts" / "setup.sh").read_text()
    names = _resolve(tmp_path, *args, "-e", f"{ROOT}[test]")
    assert names["torch"].endswith("+cpu"), names["torch"]
    assert not _cuda(names), _cuda(names)


def test_serving_and_the_client_need_no_torch(tmp_path):
    names = _resolve(tmp_path, f"{ROOT}[server,client,gateway]")
    assert "torch" not in names and not _cuda(names), sorted(names)
