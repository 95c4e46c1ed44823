#!/usr/bin/env bash
# remote-docker.sh - a second Docker daemon on this machine, reached as a remote one: on TCP with
# TLS (Docker's own ca.pem / cert.pem / key.pem), in its own network namespace, for the tests of
# remote engines, docker contexts and fleets (tests/engines/test_remote_engine.py, test_fleet.py).
#
#   bash remote-docker.sh [start]   make what is missing (certificates, namespace, daemon) and
#                                   load the test images into it; print on stdout:
#                                     ASYNCDEPLOY_TEST_REMOTE_DOCKER_HOST=tcp://10.231.0.2:2376
#                                     ASYNCDEPLOY_TEST_REMOTE_DOCKER_CERT_PATH=<dir of the client's pems>
#   bash remote-docker.sh stop      stop the daemon (by its pidfile) and remove the namespace
#   bash remote-docker.sh status    say whether it answers
#
# Idempotent: a daemon that answers, certificates and images already there (the same ID as the
# local Docker's) are left alone.
# Separate from the shared dockerd in everything: its data root, exec root, pidfile, its own
# containerd (dockerd's managed one, under its exec root), its network namespace with its own
# iptables rules and bridge (10.232.0.0/24, unroutable from the host: the deployer cannot reach
# its containers' addresses, as with a remote host or Docker Desktop). The host reaches the
# daemon through a veth pair (10.231.0.1 here, 10.231.0.2 there). Needs root, ip, openssl.
set -euo pipefail

STATE_DIR=${REMOTE_DOCKER_STATE_DIR:-/tmp/asyncdeploy-remote-docker}
DATA_ROOT=${REMOTE_DOCKER_DATA_ROOT:-/var/lib/asyncdeploy-remote-docker}
EXEC_ROOT=/run/asyncdeploy-remote-docker
PIDFILE=$STATE_DIR/dockerd.pid
NETNS=asyncdeploy-remote
HOST_IF=adremote0
NS_IF=adremote1
HOST_ADDR=10.231.0.1
ADDR=10.231.0.2
PORT=2376
BRIDGE_CIDR=10.232.0.1/24
POOL=10.233.0.0/16
WAIT_S=${REMOTE_DOCKER_WAIT_S:-60}
CERTS=$STATE_DIR/certs
CLIENT=$CERTS/client   # ca.pem, cert.pem, key.pem: DOCKER_CERT_PATH
IMAGES=${REMOTE_DOCKER_IMAGES:-"asyncdeploy-test/busybox:latest asyncdeploy-test/pause:latest asyncdeploy-test/python:latest localhost/asyncdeploy/gate:latest localhost/asyncdeploy/demo:latest asyncdeploy-test/stock-engine:latest"}

log() { printf '[remote-docker %s] %s\n' "$(date +%T)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

remote() { docker --tlsverify -H "tcp://$ADDR:$PORT" \
    --tlscacert "$CLIENT/ca.pem" --tlscert "$CLIENT/cert.pem" --tlskey "$CLIENT/key.pem" "$@"; }
answers() { [ -s "$CLIENT/key.pem" ] && remote version --format '{{.Server.Version}}' >/dev/null 2>&1; }
daemon_pid() { [ -s "$PIDFILE" ] && cat "$PIDFILE" || true; }
alive() { local pid; pid=$(daemon_pid); [ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = dockerd ]; }

make_certs() {
    [ -s "$CLIENT/key.pem" ] && return 0
    log "certificates in $CERTS"
    mkdir -p "$CERTS" "$CLIENT"
    (
        cd "$CERTS"
        openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=asyncdeploy test CA" \
            -keyout ca-key.pem -out ca.pem 2>/dev/null
        openssl req -newkey rsa:2048 -nodes -subj "/CN=$ADDR" -keyout server-key.pem \
            -out server.csr 2>/dev/null
        printf 'subjectAltName=IP:%s\nextendedKeyUsage=serverAuth\n' "$ADDR" >server.ext
        openssl x509 -req -in server.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -days 3650 \
            -extfile server.ext -out server-cert.pem 2>/dev/null
        openssl req -newkey rsa:2048 -nodes -subj "/CN=client" -keyout client/key.pem \
            -out client.csr 2>/dev/null
        printf 'extendedKeyUsage=clientAuth\n' >client.ext
        openssl x509 -req -in client.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -days 3650 \
            -extfile client.ext -out client/cert.pem 2>/dev/null
        cp ca.pem client/ca.pem
        chmod 0644 client/*.pem
    )
}

make_netns() {
    ip netns list | grep -qw "$NETNS" || ip netns add "$NETNS"
    if ! ip link show "$HOST_IF" >/dev/null 2>&1; then
        ip link add "$HOST_IF" type veth peer name "$NS_IF"
        ip link set "$NS_IF" netns "$NETNS"
        ip addr add "$HOST_ADDR/30" dev "$HOST_IF"
        ip link set "$HOST_IF" up
        ip netns exec "$NETNS" ip addr add "$ADDR/30" dev "$NS_IF"
        ip netns exec "$NETNS" ip link set "$NS_IF" up
        ip netns exec "$NETNS" ip link set lo up
    fi
    # its containers' addresses answer "unreachable" at once here, as a remote host's do
    ip route show type unreachable | grep -q "^unreachable ${BRIDGE_CIDR%.*}" \
        || ip route add unreachable "${BRIDGE_CIDR%.*}.0/24"
}

start() {
    make_certs
    make_netns
    mkdir -p "$STATE_DIR" "$DATA_ROOT"
    if ! answers; then
        alive && die "dockerd (pid $(daemon_pid)) runs but does not answer; see $STATE_DIR/dockerd.log"
        # stale (its daemon is gone; the machine's PIDs moved on): dockerd refuses to start while
        # its pidfile names any live process (seen: the registry's)
        rm -f "$PIDFILE"
        log "starting dockerd in netns $NETNS on tcp://$ADDR:$PORT"
        # nsenter, not `ip netns exec`: that one mounts a fresh /sys, without the cgroup mounts
        # dockerd needs; setsid: its own session, so that a CI job's end does not take it down
        (cd / && exec setsid nsenter --net="/run/netns/$NETNS" dockerd \
            --data-root "$DATA_ROOT" --exec-root "$EXEC_ROOT" --pidfile "$PIDFILE" \
            -H "tcp://$ADDR:$PORT" --tlsverify --tlscacert "$CERTS/ca.pem" \
            --tlscert "$CERTS/server-cert.pem" --tlskey "$CERTS/server-key.pem" \
            --bip "$BRIDGE_CIDR" --default-address-pool "base=$POOL,size=24" \
            --exec-opt native.cgroupdriver=cgroupfs --log-level=warn) \
            >"$STATE_DIR/dockerd.log" 2>&1 </dev/null &
        local started=$! deadline=$(($(date +%s) + WAIT_S))
        until answers; do
            kill -0 "$started" 2>/dev/null || { tail -30 "$STATE_DIR/dockerd.log" >&2; die "dockerd exited"; }
            [ "$(date +%s)" -lt "$deadline" ] || { tail -30 "$STATE_DIR/dockerd.log" >&2; die "no answer in ${WAIT_S}s"; }
            sleep 0.2
        done
        log "dockerd answers (pid $(daemon_pid))"
    fi
    local id
    for image in $IMAGES; do
        id=$(docker image inspect -f '{{.Id}}' "$image" 2>/dev/null) || { log "skip $image: not in the local Docker"; continue; }
        # the same ID (save and load keep it): a rebuilt local image is loaded again
        [ "$(remote image inspect -f '{{.Id}}' "$image" 2>/dev/null)" = "$id" ] && continue
        log "loading $image"
        docker save "$image" | remote load -q >&2
    done
    echo "ASYNCDEPLOY_TEST_REMOTE_DOCKER_HOST=tcp://$ADDR:$PORT"
    echo "ASYNCDEPLOY_TEST_REMOTE_DOCKER_CERT_PATH=$CLIENT"
}

stop() {
    if alive; then
        local pid; pid=$(daemon_pid)
        log "stopping dockerd (pid $pid)"
        answers && remote ps -aq | xargs -r remote rm -f >/dev/null 2>&1 || true
        kill "$pid"
        for _ in $(seq 100); do alive || break; sleep 0.1; done
        alive && kill -9 "$pid"
    fi
    ip link show "$HOST_IF" >/dev/null 2>&1 && ip link del "$HOST_IF"
    ip netns list | grep -qw "$NETNS" && ip netns del "$NETNS"
    ip route del unreachable "${BRIDGE_CIDR%.*}.0/24" 2>/dev/null || true
}

case "${1:-start}" in
    start) start ;;
    stop) stop ;;
    status) if answers; then log "answers on tcp://$ADDR:$PORT"; else log "not answering"; exit 1; fi ;;
    *) die "usage: $0 [start|stop|status]" ;;
esac
