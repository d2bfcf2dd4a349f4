#!/usr/bin/env bash
# nmtserve GPU container: build (or reuse) the TensorRT plans for the GPU present, then become tritonserver.
#
#   nmtserve-entrypoint [TRITONSERVER_OPTION...]   plans, then tritonserver --model-repository=... OPTIONS
#   nmtserve-entrypoint COMMAND [ARG...]           run COMMAND instead (bash, python3 -m ..., tritonserver ...)
#
# Environment: NMTSERVE_MODEL_REPOSITORY (/models), NMTSERVE_ENGINE_CACHE (/cache),
# NMTSERVE_TRT_PRECISION (export | fp16 | fp32), NMTSERVE_TRT_REBUILD=1 to rebuild cached plans,
# NMTSERVE_FP16_GATE (fallback | refuse | off: fp16 plans that fail the quality gate),
# NMTSERVE_MAX_BLEU_DROP (the gate's limit; default: the export's --max-bleu-drop).
set -euo pipefail

if [ "$#" -gt 0 ] && [ "${1#-}" = "$1" ]; then
    exec "$@"
fi

repository="${NMTSERVE_MODEL_REPOSITORY:-/models}"
cache="${NMTSERVE_ENGINE_CACHE:-/cache}"
engine_args=(--repository "$repository" --cache "$cache" --precision "${NMTSERVE_TRT_PRECISION:-export}"
             --fp16-gate "${NMTSERVE_FP16_GATE:-fallback}")
if [ -n "${NMTSERVE_MAX_BLEU_DROP:-}" ]; then
    engine_args+=(--max-bleu-drop "$NMTSERVE_MAX_BLEU_DROP")
fi
if [ "${NMTSERVE_TRT_REBUILD:-0}" = "1" ]; then
    engine_args+=(--force)
fi

echo "nmtserve: preparing TensorRT plans for ${repository} (cache ${cache}); a first start builds them" >&2
python3 -m nmtserve.export.engines "${engine_args[@]}"

echo "nmtserve: starting tritonserver on ${repository}" >&2
exec tritonserver --model-repository="$repository" "$@"
