#!/usr/bin/env bash
# test.sh - the README's test command: set the machine up (ci/setup.sh), then run every test
# (unit, the workload kit, the Kubernetes fake API server, the contract suite on real Docker
# and Podman, which must both answer, and the real-cluster suite on the Kubernetes cluster
# ci/setup.sh starts when ../shared/kubernetes/bin (or ASYNCDEPLOY_KUBE_ASSETS) is there: then
# required, and stopped at the end). Extra arguments go to pytest: bash ci/test.sh -k podman
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$(dirname "$here")"
own_cluster=${ASYNCDEPLOY_TEST_KUBECONFIG:-}
stop_kube() { [ -n "$own_cluster" ] || bash "$here/stop-kube.sh" || true; }
trap stop_kube EXIT
setup_env=$(ASYNCDEPLOY_START_KUBE=1 ASYNCDEPLOY_START_ROOTLESS=1 bash "$here/setup.sh") # a failed set-up (a cluster that did not start) ends the run
set -a
eval "$setup_env"
set +a
# rootless Podman's tests are required once ci/start-rootless-podman.sh has set it up
export ASYNCDEPLOY_REQUIRE_ENGINES=${ASYNCDEPLOY_REQUIRE_ENGINES:-docker,podman,remote-docker${ASYNCDEPLOY_TEST_ROOTLESS_PODMAN:+,podman-rootless}}
if [ -n "${ASYNCDEPLOY_KUBE_STARTUP_SECONDS:-}" ]; then
    echo "[test] Kubernetes cluster started in ${ASYNCDEPLOY_KUBE_STARTUP_SECONDS} s; its tests are required" >&2
fi
"$NOX" -s tests -- "$@"
