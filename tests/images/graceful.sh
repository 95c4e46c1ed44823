#!/bin/sh
# graceful NAME [DRAIN_SECONDS] [ignore]: the test images' PID-1 workload (ci/build-test-image.sh).
# Appends "NAME start <epoch>" to $MARKER_FILE (default /out/markers); on SIGTERM
# "NAME got-TERM <epoch>", sleeps DRAIN_SECONDS, "NAME drained-ok <epoch>" and exits 0; with
# "ignore" it ignores SIGTERM.
name=${1:-workload}; drain=${2:-1}; out=${MARKER_FILE:-/out/markers}
mark() { echo "$name $1 $(date +%s)" >> "$out" 2>/dev/null || echo "$name $1" >&2; }
# The trap before the start mark: a test that signals once it reads "start" must meet the
# trap, not the shell's default (a SIGTERM there ended the shell 143).
if [ "${3:-}" = ignore ]; then
  trap '' TERM
else
  trap 'mark got-TERM; sleep "$drain"; mark drained-ok; exit 0' TERM
fi
mark start
while :; do sleep 1 & wait $!; done
