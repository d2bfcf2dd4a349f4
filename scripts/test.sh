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
echo "==> ruff check" >&2
ruff check .
echo "==> pytest" >&2
python -m pytest -q "$@"
