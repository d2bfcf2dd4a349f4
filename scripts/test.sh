#!/usr/bin/env bash
# Install (if needed), lint, and run the whole test suite, real tritonserver tests included.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
NMTSERVE_EXTRAS=test . scripts/setup.sh
# The gateway page's browser test drives Debian's chromium through Playwright (nothing is
# downloaded at test time); as root (CI) install it when it is missing.
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" -eq 0 ]; then
  echo "==> installing chromium (Debian's) for the gateway page's browser test" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
# tests/test_containers.py builds the images and runs compose and the Kubernetes manifests under
# podman (Debian 12's 4.3, with runc: docker/podman/containers.conf); as root (CI) install it.
if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1 \
   && ! { command -v podman && command -v runc && command -v mmdebstrap && command -v podman-compose; } >/dev/null 2>&1; then
  echo "==> installing podman, runc, mmdebstrap and podman-compose (Debian's) for the container tests" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq podman runc mmdebstrap podman-compose >/dev/null
fi
echo "==> ruff check" >&2
ruff check .
echo "==> pytest" >&2
python -m pytest -q "$@"
