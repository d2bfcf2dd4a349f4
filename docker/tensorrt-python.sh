#!/usr/bin/env bash
# Make `import tensorrt` work in the image's Python with exactly the image's TensorRT.
#
# The Triton TensorRT backend loads a plan only if the same TensorRT version built it, so the
# Python bindings that build the plans at container start must match the image's libnvinfer.
# Uses the bindings the image ships if it has them, else installs that version's wheels.
# TENSORRT_VERSION=x.y.z overrides the detection.
set -euo pipefail

detect() {
    python3 - <<'PY'
import ctypes

for name in ("libnvinfer.so.10", "libnvinfer.so.11", "libnvinfer.so"):
    try:
        v = ctypes.CDLL(name).getInferLibVersion()  # TensorRT >= 10: major * 10000 + minor * 100 + patch
    except OSError:
        continue
    print(f"{v // 10000}.{v // 100 % 100}.{v % 100}")
    break
PY
}

want="${TENSORRT_VERSION:-$(detect)}"
if [ -z "$want" ]; then
    echo "tensorrt-python: no libnvinfer found in the image; pass --build-arg TENSORRT_VERSION=x.y.z" >&2
    exit 1
fi
# The module name: `tensorrt` (full wheels, or the image's own), `tensorrt_bindings` (bindings only).
version_of() {
    python3 -c 'import importlib
for name in ("tensorrt", "tensorrt_bindings"):
    try:
        print(importlib.import_module(name).__version__); break
    except ImportError:
        pass' 2>/dev/null || true
}
has_lib() {
    python3 -c "import ctypes, sys; ctypes.CDLL(sys.argv[1])" "$1" 2>/dev/null
}

have="$(version_of)"
if [ -z "$have" ]; then
    cuda_major="${CUDA_VERSION:-12}"
    cuda_major="${cuda_major%%.*}"
    major="${want%%.*}"
    if has_lib "libnvinfer.so.${major}" && has_lib "libnvonnxparser.so.${major}"; then
        # Bindings only (~1 MB): they load the image's libnvinfer and ONNX parser, so the plans
        # are built and run by one TensorRT library. The `tensorrt-cu12` wheels would add a
        # second ~1 GB copy of the libraries (and NVIDIA's index at build time).
        echo "tensorrt-python: installing the TensorRT ${want} bindings over the image's libraries" >&2
        python3 -m pip install --no-cache-dir --no-deps "tensorrt-cu${cuda_major}-bindings==${want}.*"
    else
        echo "tensorrt-python: the image has no libnvonnxparser.so.${major}: installing TensorRT ${want}" \
             "with its own libraries (plans are then built with that copy; same version)" >&2
        python3 -m pip install --no-cache-dir "tensorrt-cu${cuda_major}==${want}.*"
    fi
    have="$(version_of)"
fi
case "$have" in
    "$want" | "$want".*) echo "tensorrt-python: TensorRT ${have} (image libnvinfer ${want})" >&2 ;;
    *) echo "tensorrt-python: Python bindings ${have} differ from the image's TensorRT ${want}" >&2; exit 1 ;;
esac
