#!/usr/bin/env bash
# setup.sh - bring a fresh Debian 12 machine (as root) to the point where asyncdeploy's tests and
# demo run: Docker and the Podman API service installed and started, the test images built
# locally and pushed into a local registry, containers of earlier killed runs removed (those old
# enough not to be another live run's: ci/remove-leftovers.sh), nox in a venv,
# and with ASYNCDEPLOY_START_KUBE=1 (ci/test.sh sets it) a two-node Kubernetes cluster on loopback
# (ci/start-kube.sh) when its binaries are there (ASYNCDEPLOY_KUBE_ASSETS, default
# ../shared/kubernetes/bin) and no ASYNCDEPLOY_TEST_KUBECONFIG names a cluster of your own.
# Stop that cluster with ci/stop-kube.sh (ci/test.sh does).
#
#   source <(bash ci/setup.sh)     prints the environment to use (DOCKER_HOST, CONTAINER_HOST,
#                                  NOX=path of nox, the llama-server image and model where
#                                  ../shared/engines/llama-server is, and with a cluster
#                                  ASYNCDEPLOY_TEST_KUBECONFIG, the images in its node,
#                                  ASYNCDEPLOY_REQUIRE_KUBERNETES=1);
#                                  logs go to stderr
# Idempotent and quick when everything is already there.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
log() { printf '[setup %s] %s\n' "$(date +%T)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
# shellcheck source=ci/apt.sh
. "$here/apt.sh"

[ "$(id -u)" = 0 ] || { log "run as root (the engines are rootful here)"; exit 1; }

# 1. engines
engines_env=$(bash "$here/start-engines.sh" start)
eval "$engines_env"
export DOCKER_HOST
export CONTAINER_HOST=$PODMAN_HOST

# 2. leftovers of earlier runs that were killed (/run and /var/lib persist on this machine kind):
#    only what the tests and the demo labelled, and only containers older than any live run
#    (ci/remove-leftovers.sh: a shared engine may be running another checkout's tests right now)
DOCKER_HOST=$DOCKER_HOST bash "$here/remove-leftovers.sh"

# 3. nox, in a venv of its own (Debian's python refuses system-wide pip installs)
venv=${ASYNCDEPLOY_TOOLS_VENV:-/var/cache/asyncdeploy-tools}
if ! python3 -m venv --help >/dev/null 2>&1 || ! python3 -c 'import ensurepip' >/dev/null 2>&1; then
    log "installing python3-venv"
    apt-get update -q >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends python3-venv python3-pip >&2
fi
if [ ! -x "$venv/bin/nox" ] || [ ! -x "$venv/bin/uv" ]; then
    # uv beside nox: nox makes the tests' venv with it (noxfile.py), in seconds
    log "installing nox and uv into $venv"
    [ -x "$venv/bin/python" ] || python3 -m venv "$venv" >&2
    "$venv/bin/pip" install -q --disable-pip-version-check nox uv >&2
fi

# 3b. the real load balancers and load generator of the tests: `asyncdeploy verify --balancer
#     haproxy|nginx` starts Debian's haproxy or nginx as its own child process (never as a
#     service: apt_install blocks the packages' init scripts), wrk drives load, chromium renders
#     verify's HTML report
apt_install haproxy nginx wrk chromium

# 4. images, built locally (the demo image takes wheels that pip downloads on the host)
bash "$here/build-test-image.sh" >/dev/null
PIP="$venv/bin/python -m pip" bash "$here/build-demo-image.sh" >/dev/null
# the drain gate's image and a stock-like server image with no shell (tests/engines/test_gate.py)
PIP="$venv/bin/python -m pip" bash "$here/build-gate-image.sh" >/dev/null
# a stock gRPC server (grpcio) for the gate's h2c tests (tests/engines/test_gate_grpc.py)
PYTHON="$venv/bin/python" bash "$here/build-grpc-image.sh" >/dev/null
# a real LLM server (llama.cpp's llama-server, from ../shared/engines/llama-server where it is
# there) and its model on the host; prints the tests' environment, nothing without the binary
llama_env=$(PIP="$venv/bin/python -m pip" bash "$here/build-llama-image.sh")

# 4b. rootless Podman beside the rootful one (for the tests: ci/test.sh sets
#     ASYNCDEPLOY_START_ROOTLESS=1), the images above copied into it; its tests are then required
rootless_env=
if [ "${ASYNCDEPLOY_START_ROOTLESS:-0}" = 1 ]; then
    rootless_env=$(bash "$here/start-rootless-podman.sh")
fi

# 5. the local registry (127.0.0.1:5000 open, :5001 with a password) and the images pushed into
#    it, for the pull tests and `asyncdeploy verify --registry 127.0.0.1:5000`
registry_env=$(bash "$here/start-registry.sh" start)
bash "$here/start-registry.sh" push
# 6. Kubernetes (for the tests: ci/test.sh sets ASYNCDEPLOY_START_KUBE=1; the demo needs none):
#    a real cluster whenever its binaries are there; the tests then require it
kube_env=
if [ "${ASYNCDEPLOY_START_KUBE:-0}" = 1 ] && [ -z "${ASYNCDEPLOY_TEST_KUBECONFIG:-}" ]; then
    kube_env=$(bash "$here/start-kube.sh")
    [ -z "$kube_env" ] || kube_env="$kube_env
ASYNCDEPLOY_REQUIRE_KUBERNETES=1"
fi

# 7. a second Docker daemon reached as a remote one (TCP + TLS, its own network namespace), for
#    the remote-engine, docker-context and fleet tests (ci/remote-docker.sh), with the tests'
#    set-up (ci/test.sh sets ASYNCDEPLOY_START_KUBE=1; the demo needs none)
remote_env=
if [ "${ASYNCDEPLOY_START_KUBE:-0}" = 1 ]; then
    remote_env=$(bash "$here/remote-docker.sh" start)
fi

echo "DOCKER_HOST=$DOCKER_HOST"
echo "CONTAINER_HOST=$CONTAINER_HOST"
echo "NOX=$venv/bin/nox"
echo "$registry_env"
[ -z "$llama_env" ] || echo "$llama_env"
[ -z "$kube_env" ] || echo "$kube_env"
[ -z "$remote_env" ] || echo "$remote_env"
[ -z "$rootless_env" ] || echo "$rootless_env"
