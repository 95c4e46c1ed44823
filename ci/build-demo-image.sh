#!/usr/bin/env bash
# build-demo-image.sh - build localhost/asyncdeploy/demo:latest (the drain-kit demo inference server)
# without any registry, and load it into every running engine. DEMO_IMAGE=name:tag builds it
# under another name (a branch testing its own kit beside others on shared engines; the tests
# take it from ASYNCDEPLOY_TEST_DEMO_IMAGE).
#
#   FROM asyncdeploy-test/python:latest (Debian bookworm python3.11 + busybox, no pip; built by
#   ci/build-test-image.sh), plus:
#   - wheels downloaded on the host (pip reaches PyPI; the image build never does): uvicorn and
#     the drain kit's runtime (anyio, attrs, h11, click, ...) AND every core dependency listed in
#     pyproject.toml, so `import asyncdeploy` keeps working whatever asyncdeploy/__init__ imports;
#     unpacked into /usr/local/lib/python3.11/dist-packages with `python3 -m zipfile -e`;
#   - this repository's asyncdeploy/ package (copied, plus a minimal dist-info).
#   CMD python3 -m asyncdeploy.workload.demo --port 8080 --control-socket /run/asyncdeploy/control.sock
#   preStop hook: python3 -m asyncdeploy.workload.drain_cmd --socket /run/asyncdeploy/control.sock
#                 --propagation-wait 10s [--timeout S]
#
# Idempotent: the image carries the label io.asyncdeploy.demo.source-hash (package source +
# wheel list + this script); an engine whose image has the current hash is left alone, FORCE=1
# rebuilds. Wheels are cached in $IMAGE_CACHE_DIR/demo-wheels-<hash of the requirements>.
# Prints the image name on stdout, logs on stderr. `build-demo-image.sh --source-hash` prints the
# hash only (no engine needed): the same for every checkout of the same sources, at any path.
# Environment (all optional):
#   DEMO_IMAGE=localhost/asyncdeploy/demo:latest  ENGINES="docker podman"  FORCE=0
#   DOCKER_SOCK=/var/run/docker.sock
#   IMAGE_CACHE_DIR=/var/cache/asyncdeploy-test-images  PIP="python3 -m pip"  SMOKE=1
set -euo pipefail

IMAGE=${DEMO_IMAGE:-localhost/asyncdeploy/demo:latest}
BASE=asyncdeploy-test/python:latest
LABEL=io.asyncdeploy.demo.source-hash
ENGINES=${ENGINES:-"docker podman"}
FORCE=${FORCE:-0}
SMOKE=${SMOKE:-1}
DOCKER_SOCK=${DOCKER_SOCK:-/var/run/docker.sock}
CACHE=${IMAGE_CACHE_DIR:-/var/cache/asyncdeploy-test-images}
read -r -a PIP <<<"${PIP:-python3 -m pip}"
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SITE=/usr/local/lib/python3.11/dist-packages

log() { printf '[build-demo-image %s] %s\n' "$(date +%T)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
want() { case " $2 " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }


# --- what the image is made of -------------------------------------------------------------
# Requirements: the workload runtime + uvicorn, then pyproject's dependencies and "demo" extra.
mapfile -t REQS < <(python3 - "$REPO/pyproject.toml" <<'EOF'
import sys, tomllib
reqs = ["uvicorn", "h11", "anyio", "attrs", "click", "sniffio", "idna", "typing_extensions"]
try:
    with open(sys.argv[1], "rb") as f:
        project = tomllib.load(f).get("project", {})
except FileNotFoundError:
    project = {}
reqs += project.get("dependencies", []) + project.get("optional-dependencies", {}).get("demo", [])
print("\n".join(dict.fromkeys(reqs)))
EOF
)
VERSION=$(python3 -c 'import sys, tomllib; print(tomllib.load(open(sys.argv[1], "rb"))["project"]["version"])' \
    "$REPO/pyproject.toml" 2>/dev/null || echo 0.0.0)
ARCH=$(uname -m)
req_hash=$(printf '%s\n' "$ARCH" "${REQS[@]}" | sha256sum | cut -c1-16)
src_hash=$(
    cd "$REPO"
    { find asyncdeploy -type f \( -name '*.py' -o -name py.typed \) -not -path '*/__pycache__/*' -print0 \
        | sort -z | xargs -0 sha256sum
      printf '%s\n' "$req_hash" "$VERSION"
      sha256sum <"${BASH_SOURCE[0]}"   # its content, not its path: any checkout gives one hash
    } | sha256sum | cut -c1-16
)
if [ "${1:-}" = --source-hash ]; then echo "$src_hash"; exit 0; fi

have_docker=0; have_podman=0
if want docker "$ENGINES" && curl -sf --max-time 3 --unix-socket "$DOCKER_SOCK" http://engine/_ping 2>/dev/null | grep -q OK; then
    have_docker=1
fi
if want podman "$ENGINES" && command -v podman >/dev/null && podman info >/dev/null 2>&1; then
    have_podman=1
fi
[ $((have_docker + have_podman)) -gt 0 ] || die "no engine answers: run ci/start-engines.sh first"
DOCKER=(docker -H "unix://$DOCKER_SOCK")

current_hash() { # current_hash ENGINE -> label of the present image, empty if none
    case $1 in
        docker) "${DOCKER[@]}" image inspect -f "{{index .Config.Labels \"$LABEL\"}}" "$IMAGE" 2>/dev/null || true ;;
        podman) podman image inspect --format "{{index .Labels \"$LABEL\"}}" "$IMAGE" 2>/dev/null || true ;;
    esac
}
need_docker=0; need_podman=0
if [ $have_docker = 1 ] && { [ "$FORCE" = 1 ] || [ "$(current_hash docker)" != "$src_hash" ]; }; then need_docker=1; fi
if [ $have_podman = 1 ] && { [ "$FORCE" = 1 ] || [ "$(current_hash podman)" != "$src_hash" ]; }; then need_podman=1; fi
if [ $((need_docker + need_podman)) = 0 ]; then
    log "$IMAGE already present with source hash $src_hash"
    echo "$IMAGE"
    exit 0
fi
if [ $have_docker = 1 ]; then
    "${DOCKER[@]}" image inspect "$BASE" >/dev/null 2>&1 || die "$BASE missing in docker: run ci/build-test-image.sh"
else
    podman image exists "$BASE" || die "$BASE missing in podman: run ci/build-test-image.sh"
fi

# --- wheels (host side, cached) ------------------------------------------------------------
wheels=$CACHE/demo-wheels-$req_hash
if [ "$FORCE" = 1 ] || [ ! -f "$wheels/.complete" ]; then
    log "pip download ${REQS[*]}"
    rm -rf "$wheels"; mkdir -p "$wheels"
    "${PIP[@]}" download --quiet --disable-pip-version-check --only-binary=:all: --python-version 3.11 \
        --platform "manylinux_2_36_$ARCH" --platform "manylinux2014_$ARCH" --platform any \
        -d "$wheels" "${REQS[@]}" >"$CACHE/demo-pip.log" 2>&1 \
        || { tail -20 "$CACHE/demo-pip.log" >&2; die "pip download failed"; }
    touch "$wheels/.complete"
fi
log "wheels: $(find "$wheels" -name '*.whl' | wc -l) in $wheels"

# --- build context ---------------------------------------------------------------------------
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
mkdir -p "$ctx/wheels" "$ctx/site"
cp "$wheels"/*.whl "$ctx/wheels/"
tar -C "$REPO" --exclude=__pycache__ --exclude='*.pyc' -cf - asyncdeploy | tar -C "$ctx/site" -xf -
# a minimal dist-info, so importlib.metadata.version("asyncdeploy") works in the image
mkdir -p "$ctx/site/asyncdeploy-$VERSION.dist-info"
printf 'Metadata-Version: 2.1\nName: asyncdeploy\nVersion: %s\n' "$VERSION" >"$ctx/site/asyncdeploy-$VERSION.dist-info/METADATA"
printf 'asyncdeploy-build\n' >"$ctx/site/asyncdeploy-$VERSION.dist-info/INSTALLER"
cat >"$ctx/Dockerfile" <<EOF
FROM $BASE
COPY wheels/ /tmp/wheels/
RUN set -e; mkdir -p $SITE; \\
    for w in /tmp/wheels/*.whl; do python3 -m zipfile -e "\$w" $SITE/; done; \\
    rm -rf /tmp/wheels
COPY site/ $SITE/
RUN set -e; python3 -m compileall -q -x kubernetes_asyncio $SITE >/dev/null; \\
    python3 -c "import asyncdeploy, asyncdeploy.workload.demo, asyncdeploy.workload.drain_cmd"; \\
    mkdir -p /run/asyncdeploy; chmod 700 /run/asyncdeploy
ENV PYTHONUNBUFFERED=1
EXPOSE 8080
STOPSIGNAL SIGTERM
LABEL $LABEL=$src_hash
CMD ["python3", "-m", "asyncdeploy.workload.demo", "--port", "8080", "--control-socket", "/run/asyncdeploy/control.sock"]
EOF

# --- build and load --------------------------------------------------------------------------
t0=$(date +%s)
if [ $have_docker = 1 ]; then
    # the legacy builder: no BuildKit/buildx needed; the base image is local, nothing is pulled
    DOCKER_BUILDKIT=0 "${DOCKER[@]}" build --network none -q -t "$IMAGE" "$ctx" >"$CACHE/demo-build.log" 2>&1 \
        || { tail -20 "$CACHE/demo-build.log" >&2; die "docker build failed"; }
    log "docker: built $IMAGE ($src_hash) in $(( $(date +%s) - t0 )) s"
    if [ $need_podman = 1 ]; then
        "${DOCKER[@]}" save "$IMAGE" | podman load -q >/dev/null   # same image ID in both engines
        log "podman: loaded $IMAGE"
    fi
else
    podman build --network none -q -t "$IMAGE" "$ctx" >"$CACHE/demo-build.log" 2>&1 \
        || { tail -20 "$CACHE/demo-build.log" >&2; die "podman build failed"; }
    log "podman: built $IMAGE ($src_hash) in $(( $(date +%s) - t0 )) s"
fi

# --- smoke test: the CMD serves, and the preStop command exists -----------------------------
# shellcheck source=ci/retry.sh
. "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/retry.sh"
smoke() { # smoke ENGINE
    local cli
    if [ "$1" = docker ]; then cli=("${DOCKER[@]}"); else cli=(podman); fi
    tries 3 "${cli[@]}" run --rm --network none "$IMAGE" python3 -c '
import asyncdeploy.workload.demo, asyncdeploy.workload.drain_cmd, importlib.metadata as m, os, stat
assert stat.S_IMODE(os.stat("/run/asyncdeploy").st_mode) == 0o700
print("asyncdeploy", m.version("asyncdeploy"), "uvicorn", m.version("uvicorn"))' >&2 \
        || die "$1: smoke test of $IMAGE failed"
    log "$1: smoke test ok"
}
if [ "$SMOKE" = 1 ]; then
    if [ $have_docker = 1 ]; then smoke docker; fi
    if [ $have_podman = 1 ]; then smoke podman; fi
fi
echo "$IMAGE"
