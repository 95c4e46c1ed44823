#!/usr/bin/env bash
# test.sh - the README's test command: set the machine up (ci/setup.sh), then run every test
# (unit, the workload kit, the Kubernetes fake API server, and the contract suite on real Docker
# and Podman, which must both answer). Extra arguments go to pytest: bash ci/test.sh -k podman
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$(dirname "$here")"
set -a
eval "$(bash "$here/setup.sh")"
set +a
export ASYNCDEPLOY_REQUIRE_ENGINES=${ASYNCDEPLOY_REQUIRE_ENGINES:-docker,podman}
exec "$NOX" -s tests -- "$@"
