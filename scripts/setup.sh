#!/usr/bin/env bash
# Create .venv and install nmtserve with the extras named in $NMTSERVE_EXTRAS (default: test).
# Idempotent: skips pip when pyproject.toml has not changed since the last install.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
extras="${NMTSERVE_EXTRAS:-test}"
python="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  echo "==> creating .venv" >&2
  "$python" -m venv .venv
fi
# shellcheck disable=SC1091
. .venv/bin/activate
stamp=".venv/.nmtserve-installed-${extras//,/_}"
want="$(sha256sum pyproject.toml | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "==> installing nmtserve[$extras] (first run: a few minutes)" >&2
  python -m pip install -q --upgrade pip
  # The CPU build of torch on every machine (PyPI's plain torch is the CUDA build, several GB):
  # scripts/torch-cpu-args.sh picks the source. Serving itself never needs torch.
  mapfile -t torch_args < <(PYTHON=python bash scripts/torch-cpu-args.sh)
  python -m pip install -q "${torch_args[@]}"
  python -m pip install -q -e ".[$extras]"
  echo "$want" > "$stamp"
fi
