#!/usr/bin/env bash
# The pip arguments that install PyTorch's CPU build (no CUDA packages) on any machine, one per
# line: scripts/setup.sh installs with them and tests/test_install.py resolves them with
# `pip install --dry-run`.
#
# PyTorch publishes the CPU build as torch==X+cpu on its own index; PyPI's torch==X is the CUDA
# build and pulls ~17 nvidia-*/cuda-* packages (several GB). So: the +cpu pin always (a machine
# that cannot find it fails loudly instead of installing CUDA), from PyTorch's CPU index where it
# is reachable, else from the package sources pip is configured with (a mirror or a wheel
# directory that holds the CPU build, as this project's machines do).
set -euo pipefail
version="${TORCH_VERSION:-2.13.0}"
index="${TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}"
python="${PYTHON:-python3}"
if "$python" - "$index" <<'PY' 2>/dev/null; then
import sys, urllib.request
urllib.request.urlopen(sys.argv[1].rstrip("/") + "/torch/", timeout=5)
PY
  printf '%s\n' --extra-index-url "$index"
fi
printf '%s\n' "torch==${version}+cpu"
