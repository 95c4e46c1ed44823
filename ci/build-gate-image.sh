#!/usr/bin/env bash
# build-gate-image.sh - build, without any registry, and load into every running engine:
#
#   localhost/asyncdeploy/gate:latest       the drain gate (python3 -m asyncdeploy.gate): FROM
#                                      asyncdeploy-test/python:latest (ci/build-test-image.sh)
#                                      + Debian bookworm's haproxy (the data plane): its .deb and
#                                      those of the libraries it links, fetched on the host with
#                                      `apt-get download` (or taken from DEBS=DIR), unpacked with
#                                      `dpkg-deb -x` (the base has no dpkg); a library the base
#                                      already has is kept from the base, never overwritten
#                                      + the wheels of anyio, attrs and uvloop (the controller)
#                                      + this repository's asyncdeploy/ package;
#   asyncdeploy-test/stock-engine:latest  a stand-in for a stock inference server that knows
#                                      nothing of asyncdeploy (tests/images/stock_engine.py: exits
#                                      at once on SIGTERM, like vLLM's default) in an image with NO
#                                      shell, wget, curl or python3: FROM scratch, only a python
#                                      interpreter renamed /opt/engine/bin/engine, its stdlib and
#                                      shared libraries. A check that runs inside it cannot work:
#                                      the point of the gate and of checks sent from outside.
#
# Idempotent: each image carries io.asyncdeploy.gate.source-hash (its inputs + this script); an
# engine whose image has the current hash is left alone, FORCE=1 rebuilds. Prints the image
# names on stdout, logs on stderr. Environment (all optional):
#   ENGINES="docker podman"  FORCE=0  DOCKER_SOCK=/var/run/docker.sock
#   GATE_IMAGE=localhost/asyncdeploy/gate:latest (another tag: a branch's gate beside main's)
#   IMAGE_CACHE_DIR=/var/cache/asyncdeploy-test-images  PIP="python3 -m pip"
#   DEBS=DIR (haproxy's .debs and its libraries', for a machine without a package mirror)
set -euo pipefail

GATE=${GATE_IMAGE:-localhost/asyncdeploy/gate:latest}
STOCK=asyncdeploy-test/stock-engine:latest
BASE=asyncdeploy-test/python:latest
LABEL=io.asyncdeploy.gate.source-hash
ENGINES=${ENGINES:-"docker podman"}
FORCE=${FORCE:-0}
DOCKER_SOCK=${DOCKER_SOCK:-/var/run/docker.sock}
CACHE=${IMAGE_CACHE_DIR:-/var/cache/asyncdeploy-test-images}
read -r -a PIP <<<"${PIP:-python3 -m pip}"
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SITE=/usr/local/lib/python3.11/dist-packages
REQS=(anyio attrs uvloop)

log() { printf '[build-gate-image %s] %s\n' "$(date +%T)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
want() { case " $2 " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

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

ARCH=$(uname -m)
req_hash=$(printf '%s\n' "$ARCH" "${REQS[@]}" | sha256sum | cut -c1-16)
gate_hash=$(
    cd "$REPO"
    { find asyncdeploy -type f \( -name '*.py' -o -name py.typed \) -not -path '*/__pycache__/*' -print0 \
        | sort -z | xargs -0 sha256sum
      printf '%s\n' "$req_hash" "${DEBS:-}"; sha256sum "${BASH_SOURCE[0]}"; } | sha256sum | cut -c1-16
)
stock_hash=$({ sha256sum "$REPO/tests/images/stock_engine.py" "${BASH_SOURCE[0]}"; } | sha256sum | cut -c1-16)

current_hash() { # current_hash ENGINE IMAGE
    case $1 in
        docker) "${DOCKER[@]}" image inspect -f "{{index .Config.Labels \"$LABEL\"}}" "$2" 2>/dev/null || true ;;
        podman) podman image inspect --format "{{index .Labels \"$LABEL\"}}" "$2" 2>/dev/null || true ;;
    esac
}

build() { # build IMAGE HASH CONTEXT: build with one engine, load into the other when needed
    local image=$1 hash=$2 ctx=$3 need_docker=0 need_podman=0 t0
    if [ $have_docker = 1 ] && { [ "$FORCE" = 1 ] || [ "$(current_hash docker "$image")" != "$hash" ]; }; then need_docker=1; fi
    if [ $have_podman = 1 ] && { [ "$FORCE" = 1 ] || [ "$(current_hash podman "$image")" != "$hash" ]; }; then need_podman=1; fi
    if [ $((need_docker + need_podman)) = 0 ]; then
        log "$image already present with source hash $hash"
        return 0
    fi
    t0=$(date +%s)
    if [ $have_docker = 1 ]; then
        DOCKER_BUILDKIT=0 "${DOCKER[@]}" build --network none -q -t "$image" "$ctx" >"$CACHE/gate-build.log" 2>&1 \
            || { tail -20 "$CACHE/gate-build.log" >&2; die "docker build of $image failed"; }
        log "docker: built $image ($hash) in $(( $(date +%s) - t0 )) s"
        if [ $need_podman = 1 ]; then
            "${DOCKER[@]}" save "$image" | podman load -q >/dev/null
            log "podman: loaded $image"
        fi
    else
        podman build --network none -q -t "$image" "$ctx" >"$CACHE/gate-build.log" 2>&1 \
            || { tail -20 "$CACHE/gate-build.log" >&2; die "podman build of $image failed"; }
        log "podman: built $image ($hash) in $(( $(date +%s) - t0 )) s"
    fi
}

if [ $have_docker = 1 ]; then
    "${DOCKER[@]}" image inspect "$BASE" >/dev/null 2>&1 || die "$BASE missing in docker: run ci/build-test-image.sh"
else
    podman image exists "$BASE" || die "$BASE missing in podman: run ci/build-test-image.sh"
fi
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT

# --- the gate ----------------------------------------------------------------------------------
wheels=$CACHE/gate-wheels-$req_hash
if [ "$FORCE" = 1 ] || [ ! -f "$wheels/.complete" ]; then
    log "pip download ${REQS[*]}"
    rm -rf "$wheels"; mkdir -p "$wheels"
    "${PIP[@]}" download --quiet --disable-pip-version-check --only-binary=:all: --python-version 3.11 \
        --platform "manylinux_2_36_$ARCH" --platform "manylinux2014_$ARCH" --platform any \
        -d "$wheels" "${REQS[@]}" >"$CACHE/gate-pip.log" 2>&1 \
        || { tail -20 "$CACHE/gate-pip.log" >&2; die "pip download failed"; }
    touch "$wheels/.complete"
fi
debs=${DEBS:-}
if [ -z "$debs" ]; then
    # haproxy and the packages of the libraries it links (never libc6: the base's own)
    command -v apt-get >/dev/null && command -v dpkg >/dev/null \
        || die "no apt-get/dpkg here to fetch haproxy: give DEBS=DIR with its .debs"
    [ -x /usr/sbin/haproxy ] || die "haproxy is not installed on this host (apt-get install haproxy), or give DEBS=DIR"
    debs=$CACHE/gate-debs-$ARCH
    if [ "$FORCE" = 1 ] || [ ! -f "$debs/.complete" ]; then
        pkgs=$(for lib in $(ldd /usr/sbin/haproxy | awk '/=>/ {print $3}'); do
                   dpkg -S "$lib" 2>/dev/null || dpkg -S "$(readlink -f "$lib")" 2>/dev/null || true
               done | cut -d: -f1 | sort -u | grep -vx 'libc6' || true)
        log "apt-get download haproxy $pkgs"
        rm -rf "$debs"; mkdir -p "$debs"
        (cd "$debs" && apt-get download haproxy $pkgs) >"$CACHE/gate-apt.log" 2>&1 \
            || { tail -20 "$CACHE/gate-apt.log" >&2; die "apt-get download failed (give DEBS=DIR)"; }
        touch "$debs/.complete"
    fi
fi
ls "$debs"/haproxy_*.deb >/dev/null 2>&1 || die "no haproxy_*.deb in $debs"
mkdir -p "$ctx/gate/wheels" "$ctx/gate/site" "$ctx/gate/haproxy/sbin" "$ctx/gate/haproxy/lib" "$ctx/unpacked"
for deb in "$debs"/*.deb; do dpkg-deb -x "$deb" "$ctx/unpacked"; done
cp "$ctx/unpacked/usr/sbin/haproxy" "$ctx/gate/haproxy/sbin/"
find "$ctx/unpacked" \( -path '*/lib/*-linux-gnu/*.so*' -o -path '*/lib/*-linux-gnu/*/*.so*' \) \( -type f -o -type l \) \
    -exec cp -a {} "$ctx/gate/haproxy/lib/" \;
cp "$wheels"/*.whl "$ctx/gate/wheels/"
tar -C "$REPO" --exclude=__pycache__ --exclude='*.pyc' -cf - asyncdeploy | tar -C "$ctx/gate/site" -xf -
cat >"$ctx/gate/Dockerfile" <<EOF
FROM $BASE
COPY wheels/ /tmp/wheels/
COPY haproxy/ /tmp/haproxy/
RUN set -e; mkdir -p $SITE; \\
    for w in /tmp/wheels/*.whl; do python3 -m zipfile -e "\$w" $SITE/; done; rm -rf /tmp/wheels; \\
    cp /tmp/haproxy/sbin/haproxy /usr/sbin/haproxy; \\
    for lib in /tmp/haproxy/lib/*; do \\
        name=\$(basename "\$lib"); \\
        [ -e /lib/$ARCH-linux-gnu/\$name ] || [ -e /usr/lib/$ARCH-linux-gnu/\$name ] || cp -a "\$lib" /usr/lib/$ARCH-linux-gnu/; \\
    done; rm -rf /tmp/haproxy; haproxy -vv >/dev/null
COPY site/ $SITE/
RUN set -e; python3 -m compileall -q $SITE/asyncdeploy/gate $SITE/asyncdeploy/workload >/dev/null; \\
    python3 -c "import asyncdeploy.gate, asyncdeploy.gate.__main__, uvloop"
ENV PYTHONUNBUFFERED=1
EXPOSE 8000
STOPSIGNAL SIGTERM
LABEL $LABEL=$gate_hash
ENTRYPOINT ["python3", "-m", "asyncdeploy.gate"]
CMD ["--listen", "8000", "--upstream", "8001"]
EOF
build "$GATE" "$gate_hash" "$ctx/gate"

# --- the stock engine: no shell, no wget, no python3 --------------------------------------------
mkdir -p "$ctx/stock"
cp "$REPO/tests/images/stock_engine.py" "$ctx/stock/server.py"
cat >"$ctx/stock/Dockerfile" <<EOF
FROM $BASE AS donor
COPY server.py /stage/opt/engine/app/server.py
RUN set -e; mkdir -p /stage/opt/engine/bin /stage/opt/engine/lib /stage/usr/lib /stage/lib64 /stage/tmp; \\
    cp -L /usr/bin/python3.11 /stage/opt/engine/bin/engine; \\
    cp -a /usr/lib/python3.11 /stage/opt/engine/lib/python3.11; \\
    rm -rf /stage/opt/engine/lib/python3.11/test /stage/opt/engine/lib/python3.11/idlelib; \\
    mkdir -p /stage/lib; cp -a /lib/$ARCH-linux-gnu /stage/lib/; cp -a /usr/lib/$ARCH-linux-gnu /stage/usr/lib/; \\
    cp -a /lib64/. /stage/lib64/; chmod 1777 /stage/tmp
FROM scratch
COPY --from=donor /stage/ /
ENV PYTHONHOME=/opt/engine PYTHONUNBUFFERED=1 PATH=/opt/engine/none
EXPOSE 8001
LABEL $LABEL=$stock_hash
ENTRYPOINT ["/opt/engine/bin/engine", "/opt/engine/app/server.py"]
CMD ["--port", "8001"]
EOF
build "$STOCK" "$stock_hash" "$ctx/stock"
echo "$GATE"
echo "$STOCK"
