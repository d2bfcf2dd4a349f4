#!/usr/bin/env bash
# Serve the shipped demo model (English -> French numbers, dates, sentences) on the real
# tritonserver (CPU, ONNX Runtime) and translate sample sentences with the nmtserve client.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
NMTSERVE_EXTRAS=server,client,export . scripts/setup.sh
http_port="${HTTP_PORT:-8000}" grpc_port="${GRPC_PORT:-8001}" metrics_port="${METRICS_PORT:-8002}"

echo "==> exporting models/en-fr-numbers -> model_repository (ONNX + parity check)" >&2
nmtserve export models/en-fr-numbers --repository model_repository

echo "==> starting tritonserver" >&2
nmtserve serve --model-repository model_repository --http-port "$http_port" --grpc-port "$grpc_port" \
  --metrics-port "$metrics_port" &
server=$!
trap 'kill -INT $server 2>/dev/null; wait $server 2>/dev/null || true' EXIT
python - "$http_port" "$server" <<'PY'
import os, sys, time, urllib.request
port, pid = sys.argv[1], int(sys.argv[2])
deadline = time.monotonic() + 180
while time.monotonic() < deadline:
    try:
        os.kill(pid, 0)
    except OSError:
        sys.exit("tritonserver exited during start-up; see the messages above")
    try:
        if urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/health/ready", timeout=2).status == 200:
            sys.exit(0)
    except OSError:
        pass
    time.sleep(0.5)
sys.exit("tritonserver did not become ready in 180 s")
PY

echo "==> translating examples/sentences.en over gRPC" >&2
translations="$(mktemp)"
trap 'rm -f "$translations"; kill -INT $server 2>/dev/null; wait $server 2>/dev/null || true' EXIT
nmtserve translate --url "127.0.0.1:$grpc_port" examples/sentences.en > "$translations"
# Each source, its translation, and the reference the corpus generator wrote (examples/sentences.fr).
python - examples/sentences.en "$translations" examples/sentences.fr <<'PY'
import sys
sources, got, want = (open(p, encoding="utf-8").read().splitlines() for p in sys.argv[1:])
for source, translation, reference in zip(sources, got, want, strict=True):
    print(source)
    print(f"    -> {translation}" + ("" if translation == reference else f"\n       expected: {reference}"))
same = sum(g == w for g, w in zip(got, want))
print(f"{same}/{len(sources)} as expected")
sys.exit(0 if same == len(sources) else 1)
PY
