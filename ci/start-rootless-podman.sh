#!/usr/bin/env bash
# start-rootless-podman.sh - rootless Podman for asyncdeploy's tests, beside the rootful one:
#
#   a user (ROOTLESS_USER, default asyncdeploy-rootless) with its own subuid/subgid range,
#   Debian's uidmap (newuidmap/newgidmap) and slirp4netns, /dev/net/tun open to the user, and
#   `podman system service` run as that user on $XDG_RUNTIME_DIR/podman/podman.sock (no systemd
#   here, so no `loginctl enable-linger`: this script starts the service itself, its pid in
#   ENGINES_STATE_DIR). The test images are copied in from the rootful engine (`podman save` |
#   `podman load` as the user): nothing is pulled. A container's address is then 10.0.2.x
#   behind slirp4netns, which the host cannot reach.
#
# Idempotent: what is there already is left alone. Prints on stdout the line for setup.env:
#   ASYNCDEPLOY_TEST_ROOTLESS_PODMAN=unix:///run/user/UID/podman/podman.sock
# Stop: kill the pid in $ENGINES_STATE_DIR/rootless-podman.pid (its containers keep running
# under conmon: `runuser -u USER -- podman stop --all` first).
set -euo pipefail

USER_NAME=${ROOTLESS_USER:-asyncdeploy-rootless}
SUBID_START=${ROOTLESS_SUBID_START:-200000}
SUBID_COUNT=65536
STATE_DIR=${ENGINES_STATE_DIR:-/tmp/asyncdeploy-engines}
PIDFILE=$STATE_DIR/rootless-podman.pid
LOGFILE=$STATE_DIR/rootless-podman.log
WAIT_S=${WAIT_S:-60}
IMAGES=${ROOTLESS_IMAGES:-"localhost/asyncdeploy-test/busybox:latest localhost/asyncdeploy-test/python:latest localhost/asyncdeploy-test/pause:latest localhost/asyncdeploy/gate:latest localhost/asyncdeploy/demo:latest localhost/asyncdeploy-test/stock-engine:latest localhost/asyncdeploy-test/llama-server:latest"}

log() { printf '[start-rootless-podman %s] %s\n' "$(date +%T)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
mkdir -p "$STATE_DIR"
# shellcheck source=ci/apt.sh
. "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/apt.sh"
APT_LOG_DIR=$STATE_DIR

[ "$(id -u)" = 0 ] || die "run as root (it adds a user and installs packages)"
command -v podman >/dev/null || die "no podman: run ci/start-engines.sh first"
apt_install uidmap slirp4netns

if ! id -u "$USER_NAME" >/dev/null 2>&1; then
    log "adding user $USER_NAME"
    useradd --create-home --shell /usr/sbin/nologin "$USER_NAME"
fi
USER_ID=$(id -u "$USER_NAME")
HOME_DIR=$(getent passwd "$USER_NAME" | cut -d: -f6)
for file in /etc/subuid /etc/subgid; do
    touch "$file"
    grep -q "^$USER_NAME:" "$file" || { echo "$USER_NAME:$SUBID_START:$SUBID_COUNT" >>"$file"; log "$file: $USER_NAME:$SUBID_START:$SUBID_COUNT"; }
done

# slirp4netns opens /dev/net/tun in the user's namespace
[ -c /dev/net/tun ] || { mkdir -p /dev/net; mknod /dev/net/tun c 10 200; }
chmod 0666 /dev/net/tun

RUNTIME_DIR=/run/user/$USER_ID
mkdir -p "$RUNTIME_DIR/podman"; chown -R "$USER_NAME:" "$RUNTIME_DIR"; chmod 0700 "$RUNTIME_DIR"
SOCK=$RUNTIME_DIR/podman/podman.sock

as_user() { # the user's podman, with its runtime dir (no login session sets it here), never
    # root's engine: ci/setup.sh exports CONTAINER_HOST (root's socket) before it calls this
    (cd / && runuser -u "$USER_NAME" -- env -u CONTAINER_HOST -u CONTAINER_CONNECTION -u DOCKER_HOST \
        HOME="$HOME_DIR" XDG_RUNTIME_DIR="$RUNTIME_DIR" "$@")
}
ping_sock() { [ -S "$SOCK" ] && curl -sf --max-time 3 --unix-socket "$SOCK" http://engine/_ping 2>/dev/null | grep -q OK; }

# The user's own containers.conf: the rootful one's rules (cgroupfs without systemd, file
# events, k8s-file logs, runc) plus slirp4netns, and cgroups "enabled" said outright: on this
# hybrid cgroup v1 machine the service otherwise creates with NoCgroups, which runc refuses
# ("requested OCI runtime runc is not compatible with NoCgroups"); runc, rootless, then runs
# them without a cgroup of their own (no memory or CPU limit holds).
CONF_DIR=$HOME_DIR/.config/containers
mkdir -p "$CONF_DIR"
cat >"$CONF_DIR/containers.conf.new" <<'EOF'
# written by asyncdeploy's start-rootless-podman.sh
[containers]
log_driver = "k8s-file"
cgroups = "enabled"

[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
runtime = "runc"
network_cmd_options = []

[network]
default_rootless_network_cmd = "slirp4netns"
EOF
if cmp -s "$CONF_DIR/containers.conf.new" "$CONF_DIR/containers.conf"; then rm "$CONF_DIR/containers.conf.new"; else mv "$CONF_DIR/containers.conf.new" "$CONF_DIR/containers.conf"; log "wrote $CONF_DIR/containers.conf"; fi
chown -R "$USER_NAME:" "$HOME_DIR/.config"

ours() { # ours PID: alive, podman, run by the user (a pidfile left by an earlier run, or by
    # a machine since restarted, may name a PID another program holds now)
    [ -n "${1:-}" ] && [ "$(cat "/proc/$1/comm" 2>/dev/null)" = podman ] \
        && [ "$(stat -c %u "/proc/$1" 2>/dev/null)" = "$USER_ID" ]
}
start_service() {
    log "starting podman system service as $USER_NAME"
    rm -f "$SOCK"
    as_user setsid podman system service --time=0 "unix://$SOCK" >>"$LOGFILE" 2>&1 </dev/null &
    pid=
    for _ in $(seq 1 50); do  # the service's own pid (runuser and setsid stand between)
        pid=$(pgrep -n -u "$USER_NAME" -f "podman system service" || true)
        [ -n "$pid" ] && break; sleep 0.1
    done
    [ -n "$pid" ] || { tail -30 "$LOGFILE" >&2; die "the service did not start; log: $LOGFILE"; }
    echo "$pid" >"$PIDFILE"
}
wait_answer() { # wait_answer SECONDS: true once the socket answers, false when the time is up
    local deadline=$(( $(date +%s) + $1 ))
    until ping_sock; do
        [ "$(date +%s)" -lt "$deadline" ] || return 1
        ours "$pid" || { tail -30 "$LOGFILE" >&2; die "the service (pid $pid) exited; log: $LOGFILE"; }
        sleep 0.2
    done
}

if ! ping_sock; then
    pid=$( [ -s "$PIDFILE" ] && cat "$PIDFILE" || true )
    if ours "$pid"; then
        log "rootless podman service pid $pid is running but not answering yet; waiting"
        if ! wait_answer 15; then  # hung since an earlier run: a fresh one, not a failed setup
            log "pid $pid still does not answer: stopping it"
            kill -TERM "$pid" 2>/dev/null || true
            for _ in $(seq 1 50); do ours "$pid" || break; sleep 0.1; done
            kill -KILL "$pid" 2>/dev/null || true
            start_service
        fi
    else
        start_service
    fi
    wait_answer "$WAIT_S" || { tail -30 "$LOGFILE" >&2; die "$SOCK did not answer in ${WAIT_S}s"; }
    log "rootless podman answers on $SOCK (pid $pid)"
fi

for image in $IMAGES; do
    # the image's config digest survives save and load; its id (the archive's) may not
    rootful=$(podman image inspect --format '{{.Digest}} {{.Created}}' "$image" 2>/dev/null) || { log "skip $image: not in the rootful engine"; continue; }
    have=$(as_user podman image inspect --format '{{.Digest}} {{.Created}}' "$image" 2>/dev/null || true)
    [ "${have#* }" = "${rootful#* }" ] && continue  # same creation time: the same build
    log "copying $image into $USER_NAME's podman"
    podman save "$image" | as_user podman load -q >/dev/null
done

echo "ASYNCDEPLOY_TEST_ROOTLESS_PODMAN=unix://$SOCK"
