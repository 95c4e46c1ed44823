#!/usr/bin/env bash
# build-grpc-image.sh - build, without any registry, and load into every running engine:
#
#   asyncdeploy-test/grpc-engine:latest  a stock gRPC server (tests/images/grpc_engine.py,
#                                        grpcio, no protobuf): FROM asyncdeploy-test/python:latest
#                                        (ci/build-test-image.sh) + the grpcio wheel for the base's
#                                        python (3.11, manylinux), pip-downloaded on the host (or
#                                        taken from WHEELS=DIR) and unzipped into the image
#                                        + Debian's libstdc++6 (apt-get download, or DEBS=DIR;
#                                        unpacked with dpkg-deb -x: the base has no dpkg).
#
# Idempotent: an image already present is kept (FORCE=1 rebuilds). Environment (optional):
#   ENGINES="docker podman"  FORCE=0  WHEELS=DIR  DEBS=DIR  GRPCIO="grpcio==1.85.*"  PYTHON=python3
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(dirname "$HERE")
IMAGE=asyncdeploy-test/grpc-engine:latest
BASE=asyncdeploy-test/python:latest
ENGINES=${ENGINES:-"docker podman"}
FORCE=${FORCE:-0}
GRPCIO=${GRPCIO:-"grpcio==1.85.*"}
PYTHON=${PYTHON:-python3}
log() { printf '[build-grpc-image %s] %s\n' "$(date +%T)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
want() { case " $ENGINES " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

if [ "$FORCE" != 1 ] && { ! want docker || docker image inspect "$IMAGE" >/dev/null 2>&1; } \
    && { ! want podman || ! command -v podman >/dev/null || podman image inspect "$IMAGE" >/dev/null 2>&1; }; then
    log "$IMAGE present"; echo "$IMAGE"; exit 0
fi
docker image inspect "$BASE" >/dev/null 2>&1 || die "$BASE missing: run ci/build-test-image.sh"

work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
mkdir -p "$work/site" "$work/wheels"
if [ -n "${WHEELS:-}" ]; then
    cp "$WHEELS"/*.whl "$work/wheels/"
else
    "$PYTHON" -m pip download -q --only-binary=:all: --python-version 3.11 \
        --platform manylinux_2_17_x86_64 --implementation cp "$GRPCIO" -d "$work/wheels"
fi
for wheel in "$work"/wheels/*.whl; do
    "$PYTHON" -m zipfile -e "$wheel" "$work/site"
done
# grpcio's extension links libstdc++, which the base has not: Debian's, unpacked (no dpkg there)
mkdir -p "$work/debs" "$work/root"
if [ -n "${DEBS:-}" ]; then
    cp "$DEBS"/libstdc++6_*.deb "$work/debs/"
else
    (cd "$work/debs" && apt-get download -q libstdc++6 >/dev/null)
fi
for deb in "$work"/debs/*.deb; do dpkg-deb -x "$deb" "$work/root"; done
cp "$ROOT/tests/images/grpc_engine.py" "$work/grpc_engine.py"
cat > "$work/Dockerfile" <<DOCKERFILE
FROM $BASE
COPY root/usr/lib/ /usr/lib/
COPY site/ /usr/lib/python3/dist-packages/
COPY grpc_engine.py /opt/grpc_engine.py
ENTRYPOINT ["python3", "/opt/grpc_engine.py"]
DOCKERFILE
docker build -q -t "$IMAGE" "$work" >/dev/null
log "docker: built $IMAGE"
if want podman && command -v podman >/dev/null && podman info >/dev/null 2>&1; then
    docker save "$IMAGE" | podman load -q >/dev/null
    log "podman: loaded $IMAGE"
fi
echo "$IMAGE"
