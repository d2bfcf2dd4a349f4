#!/usr/bin/env bash
# The eole fixtures (tests/fixtures/toolkits/eole/): real eole 0.6.4 training runs on the shared
# toolkit data, their `eole predict` outputs at beam 4 and 1, and CTranslate2's outputs from its
# eole converter. Run from anywhere; writes into the checkout it lives in.
#
#     bash scripts/toolkits/eole.sh [FIXTURE_DIR]
#
# eole and ctranslate2 go into a throwaway venv outside the repo (EOLE_VENV, default
# ${TMPDIR:-/tmp}/nmtserve-eole/venv; reused when it already has eole 0.6.4, EOLE_FRESH=1 makes
# it anew), with PyTorch's CPU build first and pinned in the same install so that pip keeps it.
# The data comes from scripts/toolkits/data.py with the project's .venv (EOLE_DATA reuses a
# folder it wrote). Training uses one thread (OMP_NUM_THREADS=1); the whole run takes about
# 7 minutes on 2 cores, 1-2 more to make the venv. scripts/toolkits/eole_fixture.py does the
# training, the fixture files and the comparisons; docs/notes/toolkit-eole.md has the facts.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
root="$PWD"
out="${1:-tests/fixtures/toolkits/eole}"
work="${EOLE_WORK:-${TMPDIR:-/tmp}/nmtserve-eole}"
venv="${EOLE_VENV:-$work/venv}"
python="${PYTHON:-python3}"
eole_version=0.6.4
ct2_version=4.8.5
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
mkdir -p "$work"

step() { printf '==> %s\n' "$*" >&2; }
# pip, without the "WARNING: Location ... is ignored" lines that this machine's pip config causes
pip_() { "$venv/bin/pip" "$@" 2>&1 | { grep -v "^WARNING: Location '" || true; }; }
elapsed() { printf '    (%s s)\n' "$((SECONDS - $1))" >&2; }

t=$SECONDS
if [ "${EOLE_FRESH:-0}" = 1 ] || ! "$venv/bin/python" -c "import eole, sys; sys.exit(eole.__version__ != '$eole_version')" 2>/dev/null; then
  step "venv $venv: torch (CPU), eole $eole_version, ctranslate2 $ct2_version"
  rm -rf "$venv"
  "$python" -m venv "$venv"
  pip_ install -q --upgrade pip
  mapfile -t torch_args < <(PYTHON="$venv/bin/python" bash scripts/torch-cpu-args.sh)
  pip_ install -q "${torch_args[@]}"
  # torch's pin again in the same resolve, so that eole's torch requirement keeps the CPU build;
  # eole 0.6.4's CLI imports aiohttp (eole/bin/tools/load_test.py) without requiring it
  pip_ install -q "${torch_args[@]}" "eole==$eole_version" "ctranslate2==$ct2_version" aiohttp
  if "$venv/bin/pip" list 2>/dev/null | grep -qi '^nvidia-'; then
    echo "eole.sh: pip brought CUDA packages into $venv; the CPU torch pin did not hold" >&2
    exit 1
  fi
  elapsed "$t"
fi
"$venv/bin/python" -c "import torch; assert torch.__version__.endswith('+cpu'), torch.__version__"

t=$SECONDS
data="${EOLE_DATA:-$work/data}"
if [ ! -f "$data/spm.model" ] || [ ! -f "$data/test.sp.en" ]; then
  step "data: scripts/toolkits/data.py $data"
  "$root/.venv/bin/python" scripts/toolkits/data.py "$data"
  elapsed "$t"
fi

t=$SECONDS
step "train, predict and compare: scripts/toolkits/eole_fixture.py -> $out"
"$venv/bin/python" scripts/toolkits/eole_fixture.py --data "$data" --work "$work/runs" --out "$out" \
  ${EOLE_KEEP_PE:+--keep-pe}
elapsed "$t"
du -sh "$out" >&2
