#!/usr/bin/env bash
# Install (if needed), lint, and run the whole test suite, real tritonserver tests included.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
NMTSERVE_EXTRAS=test . scripts/setup.sh
echo "==> ruff check" >&2
ruff check .
echo "==> pytest" >&2
python -m pytest -q "$@"
