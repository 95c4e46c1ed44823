#!/usr/bin/env bash
# demo.sh - the README's main job: set the machine up (ci/setup.sh), then deploy the demo
# inference server on the first engine that answers and drain it under live traffic.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$(dirname "$here")"
set -a
eval "$(bash "$here/setup.sh")"
set +a
exec "$NOX" -s demo -- "$@"
