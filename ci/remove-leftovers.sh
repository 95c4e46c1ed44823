#!/usr/bin/env bash
# remove-leftovers.sh - remove what killed runs of the tests, the demo, verify and the benchmark
# left on the engines: containers with one of their labels created more than
# LEFTOVER_MINUTES ago (default 120: a whole test run takes ~15 min, and every test removes its
# own containers as it ends). A younger labelled container belongs to a run that is still going
# on a shared engine (another checkout, another agent) and is left alone; anyone else's
# containers are never looked at.
#
#   bash ci/remove-leftovers.sh            remove them (dependents first on Podman)
#   DRY_RUN=1 bash ci/remove-leftovers.sh  print "ENGINE ID NAME" for each, remove nothing
# Environment: DOCKER_HOST (default unix:///var/run/docker.sock), ENGINES="docker podman",
#   LEFTOVER_MINUTES=120, LABELS="asyncdeploy-test-run asyncdeploy-demo asyncdeploy-verify
#   asyncdeploy-bench".
set -euo pipefail
DOCKER_HOST=${DOCKER_HOST:-unix:///var/run/docker.sock}
ENGINES=${ENGINES:-"docker podman"}
LEFTOVER_MINUTES=${LEFTOVER_MINUTES:-120}
LABELS=${LABELS:-"asyncdeploy-test-run asyncdeploy-demo asyncdeploy-verify asyncdeploy-bench"}
DRY_RUN=${DRY_RUN:-0}
log() { printf '[remove-leftovers %s] %s\n' "$(date +%T)" "$*" >&2; }

cli() { # cli ENGINE ARGS...
    if [ "$1" = docker ]; then shift; docker -H "$DOCKER_HOST" "$@"; else shift; podman "$@"; fi
}

old_enough() { # old_enough ENGINE ID... -> "ID NAME" created over LEFTOVER_MINUTES ago, joiners first
    local engine=$1; shift
    [ $# -gt 0 ] || return 0
    cli "$engine" inspect "$@" 2>/dev/null | python3 -c '
import datetime, json, re, sys
limit = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=float(sys.argv[1]))
text = sys.stdin.read().strip()
items = json.loads(text) if text else []  # every one removed meanwhile
def created(item):
    # Docker: 2026-12-01T12:00:00.123456789Z, Podman: ...123456789+00:00: at most 6 digits parse
    text = re.sub(r"(\.\d{6})\d+", r"\1", item["Created"]).replace("Z", "+00:00")
    return datetime.datetime.fromisoformat(text)
def joins_first(item):  # containers that join the namespaces of another (not the pause) first
    return not str((item.get("HostConfig") or {}).get("NetworkMode", "")).startswith("container:")
for item in sorted(items, key=joins_first):
    if created(item) < limit:
        print(item["Id"], item.get("Name", "").lstrip("/"))
' "$LEFTOVER_MINUTES"
}

for engine in $ENGINES; do
    cli "$engine" version >/dev/null 2>&1 || continue
    for label in $LABELS; do
        mapfile -t ids < <(cli "$engine" ps -aq --no-trunc --filter "label=$label" 2>/dev/null || true)
        [ "${#ids[@]}" -gt 0 ] && [ -n "${ids[0]}" ] || continue
        mapfile -t old < <(old_enough "$engine" "${ids[@]}")
        [ "${#old[@]}" -gt 0 ] && [ -n "${old[0]:-}" ] || continue
        if [ "$DRY_RUN" = 1 ]; then
            printf "$engine %s\n" "${old[@]}"
            continue
        fi
        log "$engine: removing ${#old[@]} container(s) labelled $label older than $LEFTOVER_MINUTES min"
        for entry in "${old[@]}"; do   # joiners first: Podman refuses a pause others still join
            cli "$engine" rm -f "${entry%% *}" >/dev/null 2>&1 || true
        done
    done
done
