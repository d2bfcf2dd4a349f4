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
# The compiled search step (native/: C++ with pybind11, built by scikit-build-core with the
# machine's g++ and cmake; nmtserve/decoding/native.py): rebuilt when its sources change.
# NMTSERVE_NATIVE=0 skips it (nmtserve then takes its Python search).
native_stamp=".venv/.nmtserve-native"
native_want="$(cat native/pyproject.toml native/CMakeLists.txt native/src/* | sha256sum | cut -d' ' -f1)"
if [ "${NMTSERVE_NATIVE:-1}" != 0 ] && { [ ! -f "$native_stamp" ] || [ "$(cat "$native_stamp")" != "$native_want" ]; }; then
  echo "==> building nmtserve_native (native/: the compiled search step)" >&2
  python -m pip install -q ./native
  echo "$native_want" > "$native_stamp"
fi
# The tests that check the GPU code against TensorRT's real Python API read these wheels (not
# installed: the bindings need libnvinfer, and a stubs-only "tensorrt" would look importable).
if [[ ",$extras," == *",test,"* ]] && [ ! -f .venv/tensorrt-api/.done ]; then
  echo "==> downloading TensorRT's API description (scripts/tensorrt-api.txt) into .venv/tensorrt-api" >&2
  rm -rf .venv/tensorrt-api && mkdir -p .venv/tensorrt-api/wheels
  python -m pip download -q --no-deps --only-binary=:all: --python-version 3.11 --platform manylinux_2_17_x86_64 \
    -d .venv/tensorrt-api/wheels -r scripts/tensorrt-api.txt
  for wheel in .venv/tensorrt-api/wheels/*.whl; do
    case "$(basename "$wheel")" in
      tensorrt_stubs-*) dest=stubs ;;
      *) dest=bindings ;;
    esac
    python -m zipfile -e "$wheel" ".venv/tensorrt-api/$dest"
  done
  touch .venv/tensorrt-api/.done
fi
