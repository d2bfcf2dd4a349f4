#!/usr/bin/env bash
# Serve the shipped demo model (English -> French numbers, dates, sentences) on the real
# tritonserver (CPU, ONNX Runtime) and translate sample sentences with the nmtserve client; the
# gateway (LibreTranslate and DeepL APIs, the web page) runs beside it. In a terminal the server
# keeps serving until Ctrl+C, so the page can be used.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
NMTSERVE_EXTRAS=server,client,export,gateway . scripts/setup.sh
http_port="${HTTP_PORT:-8000}" grpc_port="${GRPC_PORT:-8001}" metrics_port="${METRICS_PORT:-8002}"
gateway_port="${GATEWAY_PORT:-5000}"

echo "==> exporting models/en-fr-numbers -> model_repository (ONNX + parity check)" >&2
nmtserve export models/en-fr-numbers --repository model_repository

echo "==> starting tritonserver and the gateway" >&2
nmtserve serve --model-repository model_repository --http-port "$http_port" --grpc-port "$grpc_port" \
  --metrics-port "$metrics_port" --gateway-port "$gateway_port" &
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

# The gateway started with the server; its page translates as you type.
python - "$gateway_port" <<'PY'
import sys, time, urllib.request
for _ in range(150):
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/languages", timeout=2)
        break
    except OSError:
        time.sleep(0.2)
PY
echo "==> the web page: http://127.0.0.1:$gateway_port/   (LibreTranslate API at the same address, DeepL API v2 under /v2)"
if [ -t 0 ]; then
  echo "    serving until Ctrl+C" >&2
  wait "$server" || true
fi
