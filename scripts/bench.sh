#!/usr/bin/env bash
# Install (if needed) and run the one-run comparison: nmtserve served and in-process, PyTorch,
# transformers and CTranslate2 fp32/int8 on the same weights (bench/compare.py; ~15 min on 2
# idle cores). Arguments go to compare.py (e.g. --quick, --sizes demo).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
NMTSERVE_EXTRAS=bench . scripts/setup.sh
exec python bench/compare.py "$@"
