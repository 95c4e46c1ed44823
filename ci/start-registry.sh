#!/usr/bin/env bash
# start-registry.sh - a real image registry on 127.0.0.1 for asyncdeploy's pull tests, the demo
# and `asyncdeploy verify --registry`: Debian's docker-registry (distribution 2.8), run as our own
# processes with config files of ours (not as the packaged service).
#
#   bash start-registry.sh [start]  install what is missing, start what is not answering, print:
#                                     REGISTRY=127.0.0.1:5000            (no auth)
#                                     REGISTRY_AUTH=127.0.0.1:5001       (htpasswd basic auth)
#                                     REGISTRY_CREDENTIALS=<file>        (user and password, KEY=value)
#   bash start-registry.sh push     tag and push the locally built test, demo and pause images
#                                   from Docker into 127.0.0.1:5000 (the pause image also as
#                                   127.0.0.1:5000/pause:3.10, what `verify --registry` asks for)
#   bash start-registry.sh stop     stop the registries started here, by PID
#
# Both registries serve the same storage, so an image pushed to 5000 can be pulled with a
# password from 5001. Docker treats 127.0.0.0/8 as insecure already; Podman reads the insecure
# entries that start-engines.sh writes before it starts the Podman service.
# Environment (all optional): REGISTRY_STATE_DIR=/tmp/asyncdeploy-registry,
#   REGISTRY_STORAGE=/var/lib/asyncdeploy-registry, DOCKER_HOST.
set -euo pipefail

STATE_DIR=${REGISTRY_STATE_DIR:-/tmp/asyncdeploy-registry}
STORAGE=${REGISTRY_STORAGE:-/var/lib/asyncdeploy-registry}
OPEN_PORT=5000
AUTH_PORT=5001
USER_NAME=asyncdeploy
PKGS="docker-registry apache2-utils curl"
BINARY=/usr/bin/docker-registry

export DEBIAN_FRONTEND=noninteractive
log() { printf '[start-registry %s] %s\n' "$(date +%T)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# shellcheck source=ci/apt.sh
. "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/apt.sh"
APT_LOG_DIR=$STATE_DIR

answers() { # answers PORT: the registry API answers (200 open, 401 with auth)
    local code
    code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 3 "http://127.0.0.1:$1/v2/" || true)
    [ "$code" = 200 ] || [ "$code" = 401 ]
}

pid_is_ours() { # pid_is_ours PID PORT: alive, the registry binary, with our config for PORT
    [ -n "${1:-}" ] && kill -0 "$1" 2>/dev/null \
        && tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null | grep -q "$STATE_DIR/config-$2.yml"
}

stop_port() { # stop the registry of an earlier run on PORT, by its pidfile or its command line
    local port=$1 pid
    for pid in $(cat "$STATE_DIR/registry-$port.pid" 2>/dev/null) $(pgrep -f "^$BINARY serve $STATE_DIR/config-$port.yml" || true); do
        pid_is_ours "$pid" "$port" || continue
        log "stopping registry on $port (pid $pid)"
        kill -TERM "$pid" 2>/dev/null || true
        for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null || true
    done
    rm -f "$STATE_DIR/registry-$port.pid"
}

write_config() { # write_config PORT [auth]
    local port=$1 auth=${2:-}
    {
        echo "# written by asyncdeploy's start-registry.sh"
        echo "version: 0.1"
        echo "log: {level: warn}"
        echo "storage:"
        echo "  filesystem: {rootdirectory: $STORAGE}"
        echo "  delete: {enabled: true}"
        echo "http:"
        echo "  addr: 127.0.0.1:$port"
        if [ -n "$auth" ]; then
            echo "auth:"
            echo "  htpasswd: {realm: asyncdeploy-ci, path: $STATE_DIR/htpasswd}"
        fi
    } >"$STATE_DIR/config-$port.yml"
}

write_credentials() {
    # one password per machine, kept across runs: the tests read it from this file
    if [ ! -s "$STATE_DIR/credentials" ]; then
        local password
        password=$(head -c 18 /dev/urandom | base64 | tr -d '/+=')
        umask 077
        printf 'REGISTRY_USER=%s\nREGISTRY_PASSWORD=%s\n' "$USER_NAME" "$password" >"$STATE_DIR/credentials"
    fi
    # shellcheck disable=SC1091
    . "$STATE_DIR/credentials"
    htpasswd -B -b -c "$STATE_DIR/htpasswd" "$REGISTRY_USER" "$REGISTRY_PASSWORD" 2>/dev/null
}

start_port() { # start_port PORT [auth]
    local port=$1 pid
    pid=$(cat "$STATE_DIR/registry-$port.pid" 2>/dev/null || true)
    if answers "$port" && pid_is_ours "$pid" "$port"; then
        log "registry already answers on 127.0.0.1:$port (pid $pid)"; return 0
    fi
    stop_port "$port"
    answers "$port" && die "127.0.0.1:$port answers but is not a registry started here"
    (cd / && exec nohup "$BINARY" serve "$STATE_DIR/config-$port.yml") >>"$STATE_DIR/registry-$port.log" 2>&1 </dev/null &
    pid=$!
    echo "$pid" >"$STATE_DIR/registry-$port.pid"
    for _ in $(seq 1 100); do
        answers "$port" && { log "registry on 127.0.0.1:$port (pid $pid)"; return 0; }
        kill -0 "$pid" 2>/dev/null || { tail -20 "$STATE_DIR/registry-$port.log" >&2; die "registry on $port exited"; }
        sleep 0.1
    done
    die "registry on $port did not answer in 10 s"
}

push_images() {
    local docker=(docker) image
    [ -z "${DOCKER_HOST:-}" ] || docker=(docker -H "$DOCKER_HOST")
    for image in asyncdeploy-test/busybox:latest asyncdeploy-test/python:latest \
            asyncdeploy-test/pause:latest localhost/asyncdeploy/demo:latest; do
        pushed=127.0.0.1:$OPEN_PORT/${image#localhost/}   # the registry's copy of a built-in image
        "${docker[@]}" tag "$image" "$pushed"
        "${docker[@]}" push -q "$pushed" >/dev/null
        "${docker[@]}" rmi "$pushed" >/dev/null   # keep the engine as it was
        log "pushed $pushed"
    done
    # what `asyncdeploy verify --registry 127.0.0.1:5000` asks for instead of registry.k8s.io/pause:3.10
    "${docker[@]}" tag asyncdeploy-test/pause:latest "127.0.0.1:$OPEN_PORT/pause:3.10"
    "${docker[@]}" push -q "127.0.0.1:$OPEN_PORT/pause:3.10" >/dev/null
    "${docker[@]}" rmi "127.0.0.1:$OPEN_PORT/pause:3.10" >/dev/null
    log "pushed 127.0.0.1:$OPEN_PORT/pause:3.10"
}

[ "$(id -u)" = 0 ] || die "run as root"
mkdir -p "$STATE_DIR" "$STORAGE"
case "${1:-start}" in
    start)
        apt_install $PKGS
        write_credentials
        write_config "$OPEN_PORT"
        write_config "$AUTH_PORT" auth
        start_port "$OPEN_PORT"
        start_port "$AUTH_PORT"
        echo "REGISTRY=127.0.0.1:$OPEN_PORT"
        echo "REGISTRY_AUTH=127.0.0.1:$AUTH_PORT"
        echo "REGISTRY_CREDENTIALS=$STATE_DIR/credentials"
        ;;
    push) push_images ;;
    stop) stop_port "$OPEN_PORT"; stop_port "$AUTH_PORT" ;;
    *) die "usage: $0 [start|push|stop]" ;;
esac
exit 0
