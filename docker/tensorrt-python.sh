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
have="$(python3 -c 'import tensorrt; print(tensorrt.__version__)' 2>/dev/null || true)"
if [ -z "$have" ]; then
    cuda_major="${CUDA_VERSION:-12}"
    cuda_major="${cuda_major%%.*}"
    echo "tensorrt-python: installing the TensorRT ${want} Python bindings (CUDA ${cuda_major})" >&2
    python3 -m pip install --no-cache-dir "tensorrt-cu${cuda_major}==${want}.*"
    have="$(python3 -c 'import tensorrt; print(tensorrt.__version__)')"
fi
case "$have" in
    "$want" | "$want".*) echo "tensorrt-python: TensorRT ${have} (image libnvinfer ${want})" >&2 ;;
    *) echo "tensorrt-python: Python bindings ${have} differ from the image's TensorRT ${want}" >&2; exit 1 ;;
esac
