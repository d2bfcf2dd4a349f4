#!/usr/bin/env bash
# Build nmtserve's images with podman and report what they weigh (docs/containers.md).
#
#   scripts/container-check.sh [--base auto|official|standin] [--gpu-standin] [--json FILE]
#   scripts/container-check.sh --gpu REPOSITORY     # a GPU host: the NGC image, served on one GPU
#
# Builds docker/Dockerfile.cpu (nmtserve-cpu) and docker/Dockerfile.gateway (nmtserve-gateway)
# on python:3.11-slim-bookworm when it is here or can be pulled (--base auto, the default), else on
# a stand-in made from Debian's packages (Python 3.11 with pip and venv, as the official image has
# them: mmdebstrap + podman import, ~1 min, kept as localhost/nmtserve-python-standin). Prints each
# image's size, the base's and what the image adds to it, its build time and its largest Python
# packages. --gpu-standin also builds docker/Dockerfile's gpu-standin stage (the GPU image's Python
# layer, entrypoint and plan script on the stand-in; no NGC base needed). --json writes the figures.
#
# --gpu REPOSITORY (a GPU host with registry access; never run on the project's machines): builds
# docker/Dockerfile on NGC Triton, serves REPOSITORY (`nmtserve export ... --target gpu`) on one GPU
# with a plan cache, waits until ready (the first start builds the plans), translates, and stops it.
#
# pip inside a build gets this machine's CA bundle and index (a pip.conf mounted for the RUN steps
# only; nothing of it stays in the image). podman's configuration: docker/podman/containers.conf
# unless CONTAINERS_CONF is set. Exit status: 0 built, 1 a build or check failed, 3 podman missing.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root="$PWD"

OFFICIAL="python:3.11-slim-bookworm"
STANDIN="localhost/nmtserve-python-standin:3.11-bookworm"
base_mode="${NMTSERVE_CONTAINER_BASE:-auto}"
json=""
gpu_standin=0
gpu_repository=""
while [ "$#" -gt 0 ]; do
    case "$1" in
        --base) base_mode="$2"; shift 2 ;;
        --json) json="$2"; shift 2 ;;
        --gpu-standin) gpu_standin=1; shift ;;
        --gpu) gpu_repository="$2"; shift 2 ;;
        -h | --help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "container-check: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
case "$base_mode" in auto | official | standin) ;; *) echo "container-check: --base auto|official|standin" >&2; exit 2 ;; esac

export CONTAINERS_CONF="${CONTAINERS_CONF:-$root/docker/podman/containers.conf}"
if ! command -v podman >/dev/null 2>&1; then
    echo "container-check: podman is not installed (Debian 12: apt-get install podman runc mmdebstrap podman-compose)" >&2
    exit 3
fi
say() { echo "container-check: $*" >&2; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
mb() { awk -v b="$1" 'BEGIN { printf "%.0f", b / 1000000 }'; }
size_of() { podman image inspect --format '{{.Size}}' "$1"; }

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# ---- pip inside the builds: this machine's CA bundle and index, for the RUN steps only ----------
ca="${PIP_CERT:-${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}}"
{
    echo "[global]"
    if [ -f "$ca" ]; then echo "cert = /etc/ssl/certs/ca-certificates.crt"; fi
    index="${PIP_INDEX_URL:-$( (python3 -m pip config get global.index-url 2>/dev/null) || true)}"
    if [ -n "$index" ]; then echo "index-url = $index"; fi
    echo "timeout = 120"
} > "$work/pip.conf"
build_mounts=(-v "$work/pip.conf:/etc/pip.conf:ro")
if [ -f "$ca" ]; then build_mounts+=(-v "$(readlink -f "$ca"):/etc/ssl/certs/ca-certificates.crt:ro"); fi

# ---- the base -------------------------------------------------------------------------------------
standin() {
    if podman image exists "$STANDIN"; then
        say "stand-in base $STANDIN is here (podman rmi it to rebuild)"
        return
    fi
    command -v mmdebstrap >/dev/null 2>&1 || { say "mmdebstrap is not installed (apt-get install mmdebstrap)"; exit 1; }
    say "building the stand-in base from Debian bookworm's packages (mmdebstrap)"
    local started; started="$(now)"
    # minbase = debian:bookworm-slim's package set; then what python:3.11-slim adds: Python 3.11
    # with a shared libpython (the Triton stub embeds it), pip, venv, CA certificates, netbase,
    # tzdata; pip allowed to install system-wide and `python`/`pip` on PATH, as there; no /dev in
    # the image (an engine provides it: an image's /dev/shm would shadow a volume's permissions).
    # shellcheck disable=SC2016  # the hooks' $1 is mmdebstrap's root, expanded by mmdebstrap
    mmdebstrap --quiet --variant=minbase --skip=output/dev \
        --include=python3,python3-pip,python3-venv,libpython3.11,ca-certificates,netbase,tzdata \
        --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
        --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
        --customize-hook='rm -f "$1"/usr/lib/python3*/EXTERNALLY-MANAGED' \
        --customize-hook='ln -sf /usr/bin/python3 "$1/usr/local/bin/python"; ln -sf /usr/bin/pip3 "$1/usr/local/bin/pip"' \
        bookworm "$work/standin.tar" ${NMTSERVE_DEBIAN_MIRROR:+"$NMTSERVE_DEBIAN_MIRROR"}
    podman import --quiet \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'ENV LANG=C.UTF-8' --change 'CMD ["python3"]' \
        "$work/standin.tar" "$STANDIN" >/dev/null
    rm -f "$work/standin.tar"
    say "stand-in base built in $(since "$started") s"
}

if [ -n "${NMTSERVE_BASE_IMAGE:-}" ]; then
    base="$NMTSERVE_BASE_IMAGE"; base_kind="given"
elif [ "$base_mode" != standin ] && { podman image exists "$OFFICIAL" \
        || timeout 20 podman pull --quiet "docker.io/library/$OFFICIAL" >/dev/null 2>&1; }; then
    base="$OFFICIAL"; base_kind="official"
elif [ "$base_mode" = official ]; then
    say "$OFFICIAL cannot be pulled here (no registry): try --base standin"; exit 1
else
    [ "$base_mode" = standin ] || say "$OFFICIAL cannot be pulled here: using a stand-in made from Debian's packages"
    standin
    base="$STANDIN"; base_kind="standin"
fi
base_size="$(size_of "$base")"
base_python="$(podman run --rm --network none "$base" python3 -c 'import platform; print(platform.python_version())')"
say "base $base ($base_kind): $(mb "$base_size") MB, Python $base_python; $(podman --version)"

# ---- the images ----------------------------------------------------------------------------------
# The largest installed Python packages of an image (MB, largest first), as the image's user sees them.
largest() {
    podman run --rm --network none --entrypoint python3 "$1" -c '
import os, pathlib, sys, sysconfig
roots = {pathlib.Path(p) for p in sys.path if p.endswith(("site-packages", "dist-packages")) and os.path.isdir(p)}
sizes = {}
for root in roots:
    for entry in root.iterdir():
        name = entry.name.split("-")[0].split(".")[0].lower()
        files = [entry] if entry.is_file() else [p for p in entry.rglob("*") if p.is_file() and not p.is_symlink()]
        sizes[name] = sizes.get(name, 0) + sum(p.stat().st_size for p in files)
top = sorted(sizes.items(), key=lambda kv: -kv[1])[:8]
print(" ".join(f"{name}={size / 1e6:.0f}" for name, size in top))'
}

declare -A built_s sizes tops
order=()
build() {  # build NAME DOCKERFILE [TARGET]
    local name="$1" dockerfile="$2" target="${3:-}" started
    local args=(-f "$dockerfile" -t "localhost/$name:latest" --ignorefile "$dockerfile.dockerignore"
                --build-arg "BASE_IMAGE=$base" --build-arg "STANDIN_BASE=$base" "${build_mounts[@]}")
    if [ -n "$target" ]; then args+=(--target "$target"); fi
    say "building $name from $dockerfile${target:+ (stage $target)}"
    started="$(now)"
    if ! podman build --quiet "${args[@]}" . > "$work/$name.id" 2> "$work/$name.log"; then
        tail -n 60 "$work/$name.log" >&2
        say "FAILED: $name ($dockerfile) did not build"
        exit 1
    fi
    built_s[$name]="$(since "$started")"
    sizes[$name]="$(size_of "localhost/$name:latest")"
    tops[$name]="$(largest "localhost/$name:latest")"
    order+=("$name")
    say "$name: $(mb "${sizes[$name]}") MB ($(mb "$((sizes[$name] - base_size))") MB over the base), built in ${built_s[$name]} s"
}

if [ -n "$gpu_repository" ]; then
    # ---- a GPU host: the NGC-based image, served on one GPU -------------------------------------
    [ -f "$gpu_repository/generate/1/model.json" ] || { say "$gpu_repository is not an exported repository"; exit 2; }
    started="$(now)"
    podman build -f docker/Dockerfile --ignorefile docker/Dockerfile.dockerignore -t localhost/nmtserve-triton:24.10 . >&2
    say "nmtserve-triton: $(mb "$(size_of localhost/nmtserve-triton:24.10)") MB, built in $(since "$started") s"
    podman volume exists nmtserve-engine-cache || podman volume create nmtserve-engine-cache >/dev/null
    started="$(now)"
    podman run -d --name nmtserve-gpu-check --replace --device nvidia.com/gpu=all --shm-size 1g \
        -p 127.0.0.1:18000:8000 -p 127.0.0.1:18001:8001 -v "$(readlink -f "$gpu_repository"):/models:Z" \
        -v nmtserve-engine-cache:/cache localhost/nmtserve-triton:24.10 >/dev/null
    until curl -sf localhost:18000/v2/health/ready >/dev/null; do
        if [ "$(podman inspect --format '{{.State.Running}}' nmtserve-gpu-check)" != true ]; then
            podman logs nmtserve-gpu-check 2>&1 | tail -n 80 >&2; say "FAILED: the GPU container exited"; exit 1
        fi
        sleep 2
    done
    say "GPU container ready in $(since "$started") s (a first start includes the plan build)"
    curl -sf localhost:18000/v2/models/translate/infer -d \
        '{"inputs": [{"name": "TEXT", "shape": [1], "datatype": "BYTES", "data": ["the first day"]}]}' >&2; echo >&2
    started="$(now)"
    podman stop -t 30 nmtserve-gpu-check >/dev/null
    say "stopped in $(since "$started") s, exit $(podman inspect --format '{{.State.ExitCode}}' nmtserve-gpu-check)"
    podman rm nmtserve-gpu-check >/dev/null
    exit 0
fi

build nmtserve-cpu docker/Dockerfile.cpu
build nmtserve-gateway docker/Dockerfile.gateway
if [ "$gpu_standin" = 1 ]; then
    build nmtserve-gpu-standin docker/Dockerfile gpu-standin
fi

# ---- report ---------------------------------------------------------------------------------------
echo "engine: $(podman --version) (runtime $(podman info --format '{{.Host.OCIRuntime.Name}}'))"
echo "base:   $base ($base_kind), $(mb "$base_size") MB, Python $base_python"
for name in "${order[@]}"; do
    echo "$name: $(mb "${sizes[$name]}") MB, $(mb "$((sizes[$name] - base_size))") MB over the base; built in ${built_s[$name]} s"
    echo "    largest packages (MB): ${tops[$name]}"
done
if [ -n "$json" ]; then
    {
        printf '{"engine": "%s", "base": {"image": "%s", "kind": "%s", "size": %s, "python": "%s"}, "images": {' \
            "$(podman --version)" "$base" "$base_kind" "$base_size" "$base_python"
        sep=""
        for name in "${order[@]}"; do
            printf '%s"%s": {"image": "localhost/%s:latest", "size": %s, "build_s": %s, "largest": "%s"}' \
                "$sep" "$name" "$name" "${sizes[$name]}" "${built_s[$name]}" "${tops[$name]}"
            sep=", "
        done
        printf '}}\n'
    } > "$json"
fi
