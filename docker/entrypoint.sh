#!/usr/bin/env bash
# nmtserve GPU container: build (or reuse) the TensorRT plans for the GPU present, then serve them
# through `nmtserve serve`, the same launcher as on CPU: its start-up checks, the stub watchdog, the
# admin-key protection beyond loopback, and the drain-then-stop shutdown on SIGTERM.
#
#   nmtserve-entrypoint [TRITONSERVER_OPTION...]   plans, then nmtserve serve (OPTIONS passed to tritonserver)
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

serve_args=(--model-repository "$repository" --host "${NMTSERVE_HOST:-0.0.0.0}" --console-log
            --http-port "${NMTSERVE_HTTP_PORT:-8000}" --grpc-port "${NMTSERVE_GRPC_PORT:-8001}"
            --metrics-port "${NMTSERVE_METRICS_PORT:-8002}" --startup-timeout "${NMTSERVE_STARTUP_TIMEOUT:-600}")
for option in "$@"; do
    # nmtserve serve always passes this one (kept in CMD for images built before it did)
    [ "$option" = "--disable-auto-complete-config" ] || serve_args+=("--tritonserver-arg=$option")
done
echo "nmtserve: serving ${repository} (nmtserve serve on ${NMTSERVE_TRITON_ROOT:-/opt/tritonserver})" >&2
export NMTSERVE_TRITON_ROOT="${NMTSERVE_TRITON_ROOT:-/opt/tritonserver}"
exec python3 -m nmtserve.cli serve "${serve_args[@]}"
