# kube-common.sh - what ci/start-kube.sh and ci/stop-kube.sh share (sourced, not run).
# Environment (all optional):
#   ASYNCDEPLOY_KUBE_STATE=/tmp/asyncdeploy-kube   pki, etcd data, kubelet dir, logs, pid files
#   ASYNCDEPLOY_KUBE_CACHE=/var/cache/asyncdeploy-kube   unpacked binaries, saved images
#   ASYNCDEPLOY_KUBE_ADDRESS=127.0.0.1   where etcd, the API server, the controller manager and
#                                         the scheduler listen (any loopback address: another
#                                         cluster can run beside the default one on 127.0.0.3)
#   ASYNCDEPLOY_KUBE_APISERVER_PORT=6443  ASYNCDEPLOY_KUBE_ETCD_PORT=2379 (peer: +1)
#   ASYNCDEPLOY_KUBE_NODES="127.0.0.1 127.0.0.2"   the nodes: each a kubelet named by its loopback
#                                         address (its listeners 10250/10248 bind there), with its
#                                         own containerd, root directory, cgroup root
#                                         (/asyncdeploy-NODE), CNI bridge and Pod subnet
#   ASYNCDEPLOY_KUBE_FIRST_NET=0          the first node's bridge adbrN and subnet 198.18.N.0/24;
#                                         the next nodes take N+1, N+2, ...
#   ASYNCDEPLOY_KUBE_IMAGE_TAG=kube   the tag the test images get in the node
#   DOCKER_HOST                       the Docker holding the test images

STATE=${ASYNCDEPLOY_KUBE_STATE:-/tmp/asyncdeploy-kube}
CACHE=${ASYNCDEPLOY_KUBE_CACHE:-/var/cache/asyncdeploy-kube}
HOST=${ASYNCDEPLOY_KUBE_ADDRESS:-127.0.0.1}
# each node is named by its address: the API server dials the kubelet by that name (logs, exec)
NODES=${ASYNCDEPLOY_KUBE_NODES:-127.0.0.1 127.0.0.2}
FIRST_NET=${ASYNCDEPLOY_KUBE_FIRST_NET:-0}
KAS_PORT=${ASYNCDEPLOY_KUBE_APISERVER_PORT:-6443}
ETCD_PORT=${ASYNCDEPLOY_KUBE_ETCD_PORT:-2379}
ETCD_PEER_PORT=$((ETCD_PORT + 1))
IMAGE_TAG=${ASYNCDEPLOY_KUBE_IMAGE_TAG:-kube}
TEST_IMAGES="asyncdeploy-test/busybox asyncdeploy-test/pause asyncdeploy-test/python localhost/asyncdeploy/demo localhost/asyncdeploy/gate asyncdeploy-test/stock-engine asyncdeploy-test/grpc-engine"
# imported when Docker has them: the llama-server image exists only where its binary is
# (ci/build-llama-image.sh, from ../shared/engines/llama-server)
OPTIONAL_TEST_IMAGES="asyncdeploy-test/llama-server"
KUBE_BINARIES="etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl"
PKI=$STATE/pki
LOGS=$STATE/logs
KUBECONFIG_OUT=$STATE/kubeconfig
# the control plane, started in this order (then the nodes, then the scheduler), stopped in the
# reverse one
CONTROL_PLANE="etcd kube-apiserver kube-controller-manager"

export DEBIAN_FRONTEND=noninteractive
log() { printf '[kube %s] %s\n' "$(date +%T)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
now_ms() { date +%s%3N; }
ms_to_s() { awk -v ms="$1" 'BEGIN { printf "%.1f", ms / 1000 }'; }

# shellcheck source=ci/apt.sh
. "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/apt.sh"

resolve_binaries() { # ASSETS -> prints a directory holding the checked binaries
    local assets=$1 archive sums dir sha
    if [ -d "$assets" ] && [ -x "$assets/kube-apiserver" ]; then echo "$assets"; return; fi
    if [ -d "$assets" ]; then
        archive=$(find "$assets" -maxdepth 1 -name 'kubernetes-*.tar.zst' | sort | tail -n 1)
        [ -n "$archive" ] || die "$assets holds neither kube-apiserver nor a kubernetes-*.tar.zst archive"
    else
        archive=$assets
    fi
    sums=$(dirname "$archive")/SHA256SUMS
    [ -s "$sums" ] || die "no SHA256SUMS beside $archive"
    sha=$(awk -v f="$(basename "$archive")" '$2 == f { print $1 }' "$sums")
    [ -n "$sha" ] || die "$sums has no line for $(basename "$archive")"
    dir=$CACHE/bin-${sha:0:16}
    if [ ! -f "$dir/.checked" ]; then
        log "checking and unpacking $(basename "$archive") into $dir"
        echo "$sha  $archive" | sha256sum -c --quiet - >&2 || die "$archive does not match $sums"
        rm -rf "$dir.tmp" && mkdir -p "$dir.tmp"
        zstd -dc "$archive" | tar -x -C "$dir.tmp"
        # the other lines of SHA256SUMS are the binaries inside the archive
        (cd "$dir.tmp" && grep -v " $(basename "$archive")\$" "$sums" | sha256sum -c --quiet - >&2) ||
            die "the binaries unpacked from $archive do not match $sums"
        touch "$dir.tmp/.checked"
        rm -rf "$dir" && mv "$dir.tmp" "$dir"
    fi
    echo "$dir"
}

# ---- processes, by recorded PID ------------------------------------------------------------
pid_of() { [ -s "$STATE/$1.pid" ] && cat "$STATE/$1.pid" || true; }
running() { # NAME: the recorded PID is alive and is that program (PIDs get reused); a node's
    # processes are NAME@NODE (kubelet@127.0.0.2)
    local pid
    pid=$(pid_of "$1")
    [ -n "$pid" ] && [ -d "/proc/$pid" ] && [ "$(basename "$(readlink -f "/proc/$pid/exe" 2>/dev/null)")" = "${1%%@*}" ]
}
all_running() {
    local c n
    for c in $CONTROL_PLANE kube-scheduler; do running "$c" || return 1; done
    for n in $NODES; do running "containerd@$n" && running "kubelet@$n" || return 1; done
}
stop_pids() { # NAME...: SIGTERM to each, SIGKILL after 15 s; only a PID that still runs NAME
    local name pid waiting=()
    for name in "$@"; do
        pid=$(pid_of "$name")
        if [ -n "$pid" ] && running "$name"; then
            kill -TERM "$pid" 2>/dev/null || true
            waiting+=("$name:$pid")
        fi
        rm -f "$STATE/$name.pid"
    done
    for item in "${waiting[@]}"; do
        name=${item%%:*} pid=${item#*:}
        for _ in $(seq 1 150); do [ -d "/proc/$pid" ] || break; sleep 0.1; done
        if [ -d "/proc/$pid" ]; then
            log "$name (pid $pid) still there after 15 s: SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
            sleep 0.3
        fi
        log "$name stopped (pid $pid)"
    done
}
spawn() { # NAME COMMAND...: start in the background, record the PID
    local name=$1
    shift
    nohup "$@" </dev/null >>"$LOGS/$name.log" 2>&1 &
    echo $! >"$STATE/$name.pid"
}
wait_for() { # WHAT NAME SECONDS COMMAND...: poll COMMAND until it succeeds; NAME must stay alive
    local what=$1 name=$2 seconds=$3 deadline
    shift 3
    deadline=$(($(now_ms) + seconds * 1000))
    until "$@"; do
        running "$name" || die "$name exited while waiting for $what; see $LOGS/$name.log"
        [ "$(now_ms)" -lt "$deadline" ] || die "no $what after ${seconds} s; see $LOGS/$name.log"
        sleep 0.1
    done
}
port_free() { # ADDRESS PORT: nothing listens there (nor on every address)
    ! ss -Hltn "( src $1 or src 0.0.0.0 or src [::] ) and sport = :$2" 2>/dev/null | grep -q .
}

# ---- the nodes: each named by its loopback address, everything of it its own ----------------
node_index() { # NODE -> its position in $NODES, from 0
    local i=0 n
    for n in $NODES; do
        [ "$n" = "$1" ] && { echo "$i"; return; }
        i=$((i + 1))
    done
    die "$1 is not one of the nodes ($NODES)"
}
node_dir() { echo "$STATE/nodes/$1"; }
node_sock() { echo "$STATE/nodes/$1/containerd/containerd.sock"; }
# its own bridge and Pod subnet (RFC 2544 benchmarking range: never routed anywhere else); the
# gateway of each is this host, which routes between them
node_bridge() { echo "adbr$((FIRST_NET + $(node_index "$1")))"; }
node_subnet() { echo "198.18.$((FIRST_NET + $(node_index "$1"))).0/24"; }
# its own cgroup root: the kubelets' QoS cgroups (kubepods) never meet
node_cgroup() { echo "/asyncdeploy-$1"; }

# ---- health --------------------------------------------------------------------------------
api() { # PATH: GET on the API server with the admin token
    curl -sS --max-time 3 --cacert "$PKI/ca.crt" -H "Authorization: Bearer $(cat "$PKI/token")" \
        "https://$HOST:$KAS_PORT$1" 2>/dev/null
}
etcd_healthy() { curl -fsS --max-time 2 "http://$HOST:$ETCD_PORT/health" 2>/dev/null | grep -q '"health":"true"'; }
apiserver_ready() { [ -s "$PKI/token" ] && [ "$(api /readyz)" = ok ]; }
default_account() { api /api/v1/namespaces/default/serviceaccounts/default | grep -q '"uid"'; }
containerd_up() { # SOCKET PROCESS
    [ -S "$1" ] && running "$2" && ctr -a "$1" version >/dev/null 2>&1
}
node_ready() { # BIN NODE
    [ -s "$KUBECONFIG_OUT" ] &&
        [ "$("$1/kubectl" --kubeconfig "$KUBECONFIG_OUT" get node "$2" \
            -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]
}
nodes_ready() { # BIN
    local n
    for n in $NODES; do node_ready "$1" "$n" || return 1; done
}
scheduler_healthy() { [ "$(curl -sk --max-time 2 "https://$HOST:10259/healthz" 2>/dev/null)" = ok ]; }

# ---- start ---------------------------------------------------------------------------------
make_pki() { # once per state dir: a CA, the API server's certificate, the service-account key, a token
    [ -s "$PKI/ca.crt" ] && [ -s "$PKI/serving.crt" ] && [ -s "$PKI/sa.key" ] && [ -s "$PKI/token" ] && return 0
    log "making the CA, the API server's certificate ($HOST), the service-account key, a token"
    (
        umask 077
        cd "$PKI"
        openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj /CN=asyncdeploy-kube-ca \
            -keyout ca.key -out ca.crt 2>/dev/null
        openssl req -newkey rsa:2048 -nodes -subj /CN=kube-apiserver -keyout serving.key -out serving.csr 2>/dev/null
        printf 'subjectAltName=IP:%s,IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n' "$HOST" >serving.ext
        openssl x509 -req -in serving.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
            -extfile serving.ext -out serving.crt 2>/dev/null
        openssl genrsa -out sa.key 2048 2>/dev/null
        openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
        openssl rand -hex 24 >token
        printf '%s,asyncdeploy-admin,asyncdeploy-admin,"system:masters"\n' "$(cat token)" >tokens.csv
    )
}

write_kubeconfig() {
    local tmp=$KUBECONFIG_OUT.tmp
    (
        umask 077
        cat >"$tmp" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: asyncdeploy-kube
  cluster:
    server: https://$HOST:$KAS_PORT
    certificate-authority-data: $(base64 -w0 <"$PKI/ca.crt")
users:
- name: asyncdeploy-admin
  user:
    token: $(cat "$PKI/token")
contexts:
- name: asyncdeploy-kube
  context: {cluster: asyncdeploy-kube, user: asyncdeploy-admin, namespace: default}
current-context: asyncdeploy-kube
EOF
    )
    mv "$tmp" "$KUBECONFIG_OUT"
}

write_node_config() { # NODE: its containerd's config, its CNI bridge, its kubelet's config
    local node=$1 dir sock bridge
    dir=$(node_dir "$node") sock=$(node_sock "$node") bridge=$(node_bridge "$node")
    mkdir -p "$dir/containerd" "$dir/cni/net.d" "$dir/kubelet" "$dir/pod-logs"
    # what stop_cluster removes for it, whatever $NODES says then
    echo "$bridge" >"$dir/bridge"
    node_cgroup "$node" >"$dir/cgroup"
    cat >"$dir/containerd/config.toml" <<EOF
version = 2
root = "$dir/containerd/root"
state = "$dir/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "$sock"
[ttrpc]
  address = "$sock.ttrpc"
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "$dir/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$(node_ref asyncdeploy-test/pause)"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  disable_apparmor = true
  enable_selinux = false
  restrict_oom_score_adj = true  # no CAP_SYS_RESOURCE here: runc cannot lower oom_score_adj
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        Root = "$dir/containerd/runc"  # not the shared /run/containerd/runc/k8s.io of every node
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$dir/cni/net.d"
EOF
    # the bridge's gateway is this host, so the kubelet's HTTP probes and local clients reach Pod
    # IPs; no masquerade, nothing routed further; portmap for hostPort
    cat >"$dir/cni/net.d/10-asyncdeploy.conflist" <<EOF
{"cniVersion": "1.0.0", "name": "asyncdeploy-$bridge",
 "plugins": [{"type": "bridge", "bridge": "$bridge", "isGateway": true, "ipMasq": false, "hairpinMode": true,
              "ipam": {"type": "host-local", "ranges": [[{"subnet": "$(node_subnet "$node")"}]], "dataDir": "$dir/cni/ipam"}},
             {"type": "portmap", "capabilities": {"portMappings": true}, "snat": true}]}
EOF
    cat >"$dir/kubelet-config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $node
port: 10250
readOnlyPort: 0
healthzBindAddress: $node
healthzPort: 10248
authentication:
  anonymous: {enabled: true}   # loopback only: the API server proxies logs and exec without a client cert
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
cgroupDriver: cgroupfs
cgroupRoot: $(node_cgroup "$node")
failCgroupV1: false            # this machine has cgroup v1
failSwapOn: false
containerRuntimeEndpoint: unix://$sock
imageServiceEndpoint: unix://$sock
podLogsDir: $dir/pod-logs
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
registerNode: true
imageGCHighThresholdPercent: 100   # never remove the imported test images
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%"}
EOF
}

make_cgroup_root() { # CGROUP: the kubelet wants its cgroup root to exist in every hierarchy (v1)
    local ctl
    for ctl in /sys/fs/cgroup/*/; do
        [ -e "$ctl/cgroup.procs" ] && mkdir -p "$ctl$1"
    done
    [ -e /sys/fs/cgroup/cgroup.procs ] && mkdir -p "/sys/fs/cgroup$1" # v2
    return 0
}

DEVICE_PLUGIN_SOCKET=/var/lib/kubelet/device-plugins/kubelet.sock # fixed in the kubelet

start_node() { # BIN NODE: its containerd, then its kubelet (waited for until it binds its sockets)
    local bin=$1 node=$2 dir
    dir=$(node_dir "$node")
    write_node_config "$node"
    make_cgroup_root "$(node_cgroup "$node")"
    running "containerd@$node" || spawn "containerd@$node" containerd --config "$dir/containerd/config.toml"
    wait_for "containerd of node $node answering" "containerd@$node" 20 containerd_up "$(node_sock "$node")" "containerd@$node"
    # Every kubelet binds /var/lib/kubelet/device-plugins/kubelet.sock whatever its --root-dir,
    # after removing what that directory holds: two starting together can both clean before
    # either binds, and the second then exits ("bind: address already in use"). One at a time:
    # each is waited for until it has bound, and the next removes that socket before binding.
    rm -f "$DEVICE_PLUGIN_SOCKET"
    spawn "kubelet@$node" "$bin/kubelet" --config="$dir/kubelet-config.yaml" --kubeconfig="$KUBECONFIG_OUT" \
        --root-dir="$dir/kubelet" --cert-dir="$dir/kubelet/pki" --hostname-override="$node" --v=1
    wait_for "kubelet@$node's device-plugin socket" "kubelet@$node" 60 test -S "$DEVICE_PLUGIN_SOCKET"
}

start_cluster() { # BIN: every component, in order, each waited for
    local bin=$1 t n
    for p in "$ETCD_PORT" "$ETCD_PEER_PORT" "$KAS_PORT" 10257 10259; do
        port_free "$HOST" "$p" || die "port $HOST:$p is taken by another program (another cluster?)"
    done
    for n in $NODES; do
        for p in 10250 10248; do
            port_free "$n" "$p" || die "port $n:$p (node $n's kubelet) is taken by another program (another cluster?)"
        done
    done
    make_pki
    t=$(now_ms)
    mkdir -p "$STATE/etcd-data" && chmod 700 "$STATE/etcd-data"
    spawn etcd "$bin/etcd" --name asyncdeploy --data-dir "$STATE/etcd-data" \
        --listen-client-urls "http://$HOST:$ETCD_PORT" --advertise-client-urls "http://$HOST:$ETCD_PORT" \
        --listen-peer-urls "http://$HOST:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://$HOST:$ETCD_PEER_PORT" \
        --initial-cluster "asyncdeploy=http://$HOST:$ETCD_PEER_PORT" --initial-cluster-state new \
        --heartbeat-interval 20 --election-timeout 200 --quota-backend-bytes 2147483648
    wait_for "healthy etcd" etcd 30 etcd_healthy
    log "etcd healthy after $(ms_to_s $(($(now_ms) - t))) s"
    t=$(now_ms)
    spawn kube-apiserver "$bin/kube-apiserver" \
        --bind-address="$HOST" --advertise-address="$HOST" --secure-port="$KAS_PORT" \
        --etcd-servers="http://$HOST:$ETCD_PORT" \
        --tls-cert-file="$PKI/serving.crt" --tls-private-key-file="$PKI/serving.key" \
        --client-ca-file="$PKI/ca.crt" --token-auth-file="$PKI/tokens.csv" \
        --anonymous-auth=false --authorization-mode=AlwaysAllow \
        --service-account-issuer=https://kubernetes.default.svc.cluster.local \
        --service-account-key-file="$PKI/sa.pub" --service-account-signing-key-file="$PKI/sa.key" \
        --api-audiences=https://kubernetes.default.svc.cluster.local \
        --service-cluster-ip-range=10.0.0.0/24 --endpoint-reconciler-type=none \
        --kubelet-preferred-address-types=Hostname,InternalIP \
        --allow-privileged=true --profiling=false --cert-dir="$PKI/generated" --v=1
    wait_for "/readyz ok" kube-apiserver 120 apiserver_ready
    write_kubeconfig
    log "kube-apiserver ready after $(ms_to_s $(($(now_ms) - t))) s"
    t=$(now_ms)
    # only these controllers: no Pod garbage collection, eviction or node lifecycle behind a
    # test's back (a node whose kubelet stops keeps its Pods, Terminating, as the tests need); the
    # endpointslice controller keeps the Services' EndpointSlices (the drain reports traffic leaving)
    spawn kube-controller-manager "$bin/kube-controller-manager" \
        --kubeconfig="$KUBECONFIG_OUT" --authentication-kubeconfig="$KUBECONFIG_OUT" \
        --authorization-kubeconfig="$KUBECONFIG_OUT" --bind-address="$HOST" --secure-port=10257 \
        --leader-elect=false --use-service-account-credentials=false \
        --root-ca-file="$PKI/ca.crt" --service-account-private-key-file="$PKI/sa.key" \
        --controllers=serviceaccount-controller,root-ca-certificate-publisher-controller,namespace-controller,garbage-collector-controller,endpointslice-controller \
        --v=1
    for n in $NODES; do start_node "$bin" "$n"; done
    spawn kube-scheduler "$bin/kube-scheduler" --kubeconfig="$KUBECONFIG_OUT" \
        --authentication-kubeconfig="$KUBECONFIG_OUT" --authorization-kubeconfig="$KUBECONFIG_OUT" \
        --leader-elect=false --bind-address="$HOST" --secure-port=10259 --v=1
    wait_for "the default ServiceAccount" kube-controller-manager 60 default_account
    for n in $NODES; do
        wait_for "node $n Ready" "kubelet@$n" 90 node_ready "$bin" "$n"
        # no node-lifecycle controller runs to lift the taint the kubelet registers with
        "$bin/kubectl" --kubeconfig "$KUBECONFIG_OUT" taint nodes "$n" node.kubernetes.io/not-ready:NoSchedule- >/dev/null 2>&1 || true
    done
    wait_for "kube-scheduler healthy" kube-scheduler 30 scheduler_healthy
    log "controller manager, nodes $NODES (containerd, kubelet: Ready), scheduler after $(ms_to_s $(($(now_ms) - t))) s"
}

node_ref() { echo "$1:$IMAGE_TAG"; }
# containerd's full name: Docker Hub names gain docker.io/, names with a registry host
# (localhost/asyncdeploy/demo: the built-in images) stay as they are
full_name() { case ${1%%/*} in *.* | *:* | localhost) echo "$1" ;; *) echo "docker.io/$1" ;; esac; }

has_image() { # SOCKET IMAGE: the node's containerd holds IMAGE's node tag, complete
    ctr -a "$1" -n k8s.io images check "name==$(full_name "$(node_ref "$2")")" 2>/dev/null | grep -q complete
}

import_images() { # docker save (once) -> ctr import into each node, once per image ID (recorded per node)
    local image id seen node sock saved
    for image in $TEST_IMAGES $OPTIONAL_TEST_IMAGES; do
        if ! id=$(docker image inspect -f '{{.Id}}' "$image:latest" 2>/dev/null); then
            case " $OPTIONAL_TEST_IMAGES " in *" $image "*) continue ;; esac
            die "Docker has no $image:latest (build it: ci/build-test-image.sh, ci/build-demo-image.sh, ci/build-gate-image.sh, ci/build-grpc-image.sh)"
        fi
        saved=
        for node in $NODES; do
            sock=$(node_sock "$node")
            seen=$(node_dir "$node")/images/$(echo "$image" | tr / _)
            mkdir -p "$(dirname "$seen")"
            [ "$(cat "$seen" 2>/dev/null)" = "$id" ] && has_image "$sock" "$image" && continue
            if [ -z "$saved" ]; then
                saved=$STATE/images.tar
                docker save "$image:latest" >"$saved" || die "docker save $image failed"
            fi
            ctr -a "$sock" -n k8s.io images import --all-platforms "$saved" >/dev/null ||
                die "importing $image into node $node's containerd failed"
            ctr -a "$sock" -n k8s.io images tag --force "$(full_name "$image:latest")" "$(full_name "$(node_ref "$image")")" >/dev/null
            echo "$id" >"$seen"
            log "imported $image as $(node_ref "$image") into node $node"
        done
        [ -z "$saved" ] || rm -f "$saved"
    done
}

# ---- stop ----------------------------------------------------------------------------------
remove_containers() { # SOCKET PROCESS: every container of a node's containerd; prints their network namespaces
    local c=(ctr -a "$1" -n k8s.io) id
    containerd_up "$1" "$2" || return 0
    for id in $("${c[@]}" containers ls -q 2>/dev/null); do
        "${c[@]}" containers info "$id" 2>/dev/null | python3 -c '
import json, sys
try:
    for ns in json.load(sys.stdin)["Spec"]["linux"]["namespaces"]:
        if ns["type"] == "network" and ns.get("path"):
            print(ns["path"])
except Exception:
    pass' || true
        "${c[@]}" tasks kill -s SIGKILL "$id" >/dev/null 2>&1 || true
    done
    sleep 0.5
    for id in $("${c[@]}" containers ls -q 2>/dev/null); do
        "${c[@]}" tasks delete -f "$id" >/dev/null 2>&1 || true
        "${c[@]}" containers delete "$id" >/dev/null 2>&1 || true
    done
}

stop_node() { # SUFFIX DIR BRIDGE CGROUP: a node's kubelet, its containers, its containerd, its bridge
    # and QoS cgroups; prints the containers' network namespaces. SUFFIX: "@NODE" (or "" for
    # the one node an earlier version of this script started, straight in the state dir)
    local suffix=$1 dir=$2 bridge=$3 cgroup=$4 ctl
    stop_pids "kubelet$suffix"
    # containers of a killed run: containerd reconnects to their shims when it starts again
    # (a pid file is left only when containerd was not stopped here)
    if ! running "containerd$suffix" && [ -s "$STATE/containerd$suffix.pid" ] && [ -s "$dir/containerd/config.toml" ]; then
        spawn "containerd$suffix" containerd --config "$dir/containerd/config.toml"
        for _ in $(seq 1 100); do containerd_up "$dir/containerd/containerd.sock" "containerd$suffix" && break; sleep 0.1; done
    fi
    remove_containers "$dir/containerd/containerd.sock" "containerd$suffix"
    stop_pids "containerd$suffix" >&2
    if [ -n "$bridge" ] && ip link show "$bridge" >/dev/null 2>&1; then ip link del "$bridge" >&2; fi
    for ctl in /sys/fs/cgroup/*/; do # the kubelet's QoS cgroups (v1), deepest first
        [ -d "$ctl${cgroup#/}" ] && find "$ctl${cgroup#/}" -depth -type d -exec rmdir {} \; 2>/dev/null
    done
    return 0
}

stop_cluster() { # everything, by recorded PID, and what the nodes leave on the host
    local netns m dir
    stop_pids kube-scheduler
    netns=$(
        for dir in "$STATE"/nodes/*/; do
            [ -d "$dir" ] || continue
            dir=${dir%/}
            stop_node "@$(basename "$dir")" "$dir" "$(cat "$dir/bridge" 2>/dev/null)" "$(cat "$dir/cgroup" 2>/dev/null || echo /nonexistent)"
        done
        # the one node of an earlier version of this script: its kubepods cgroup at the root
        if [ -e "$STATE/kubelet" ] || [ -s "$STATE/kubelet.pid" ] || [ -s "$STATE/containerd.pid" ]; then
            stop_node "" "$STATE" adbr0 /kubepods
        fi
    )
    netns=$(echo "$netns" | sort -u)
    stop_pids kube-controller-manager kube-apiserver
    stop_pids etcd
    for m in $(findmnt -rn -o TARGET | grep "^$STATE/" | sort -r); do
        umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
    done
    for m in $netns; do [ -e "$m" ] && { umount "$m" 2>/dev/null || true; rm -f "$m"; }; done
    return 0
}
