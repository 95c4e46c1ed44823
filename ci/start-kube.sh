#!/usr/bin/env bash
# start-kube.sh - a two-node Kubernetes cluster on loopback for asyncdeploy's tests: etcd,
# kube-apiserver, kube-controller-manager (a few controllers), kube-scheduler on 127.0.0.1, and two
# nodes, "127.0.0.1" and "127.0.0.2", each a kubelet listening on its own address with its own
# containerd, root directory, cgroup root, CNI bridge and Pod subnet (ASYNCDEPLOY_KUBE_NODES; see
# ci/kube-common.sh for running a second cluster beside this one). The test images are copied from
# Docker into each node's containerd: nothing is ever pulled.
#
#   source <(bash ci/start-kube.sh)   prints the environment on stdout (logs go to stderr):
#       ASYNCDEPLOY_TEST_KUBECONFIG=...       the cluster's kubeconfig (admin token)
#       ASYNCDEPLOY_TEST_K8S_IMAGE=...        busybox test image (sh, sleep, trap)
#       ASYNCDEPLOY_TEST_K8S_PYTHON_IMAGE=... ASYNCDEPLOY_TEST_K8S_DEMO_IMAGE=...
#       ASYNCDEPLOY_TEST_K8S_PAUSE_IMAGE=...  ASYNCDEPLOY_KUBECTL=...
#       ASYNCDEPLOY_TEST_K8S_GRPC_IMAGE=...   the gRPC engine (ci/build-grpc-image.sh)
#       ASYNCDEPLOY_TEST_K8S_LLAMA_IMAGE=...  only where Docker has the llama-server image
#       ASYNCDEPLOY_TEST_K8S_NODES=127.0.0.1,127.0.0.2   the nodes' names
#       ASYNCDEPLOY_TEST_K8S_STATE=...        the state dir (the kubelets' PIDs: kubelet@NODE.pid)
#       ASYNCDEPLOY_KUBE_STARTUP_SECONDS=...  how long this start took
#   prints nothing and exits 0 when there are no binaries (see ASYNCDEPLOY_KUBE_ASSETS); fails
#   (exit 1) when there are binaries but the cluster does not come up.
#   Stop with ci/stop-kube.sh (by the PIDs recorded in the state dir).
#
# Binaries follow envtest's KUBEBUILDER_ASSETS convention: ASYNCDEPLOY_KUBE_ASSETS names a
# directory holding kube-apiserver, etcd, ... or holding (or being) a kubernetes-*.tar.zst archive
# with its SHA256SUMS; the default is ../shared/kubernetes/bin beside the repository. An archive
# is unpacked once into ASYNCDEPLOY_KUBE_CACHE (default /var/cache/asyncdeploy-kube) and checked.
#
# A healthy cluster of an earlier start is reused. Anything else left by a run that was killed
# (processes, containers, mounts, the CNI bridge, etcd's data) is removed first, then the cluster
# starts afresh. Needs root, Debian 12: containerd, runc, containernetworking-plugins, zstd,
# openssl, curl (installed here when missing), and Docker holding the test images
# (ci/build-test-image.sh, ci/build-demo-image.sh).
#
# Machine quirks handled (see ../shared/kubernetes/reference): no CAP_SYS_RESOURCE, so containerd
# runs with restrict_oom_score_adj; cgroup v1, so the kubelet has failCgroupV1: false; the API
# server reaches the kubelet (logs, exec) by the node name 127.0.0.1, and the kubelet accepts
# anonymous requests on loopback; the nodes' "not-ready" taint is lifted by hand (no node
# lifecycle controller runs); image tags are not "latest" (that would mean imagePullPolicy Always).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
# shellcheck source=ci/kube-common.sh
. "$here/kube-common.sh"

T0=$(now_ms)
[ "$(id -u)" = 0 ] || die "run as root (containerd and the kubelet need it)"

# ---- 1. binaries ----------------------------------------------------------------------------
assets=${ASYNCDEPLOY_KUBE_ASSETS:-}
if [ -z "$assets" ] && [ -d "$repo/../shared/kubernetes/bin" ]; then
    assets=$(cd "$repo/../shared/kubernetes/bin" && pwd)
fi
if [ -z "$assets" ]; then
    log "no Kubernetes binaries (set ASYNCDEPLOY_KUBE_ASSETS, or put ../shared/kubernetes/bin beside the repository): no cluster started"
    exit 0
fi
[ -e "$assets" ] || die "ASYNCDEPLOY_KUBE_ASSETS=$assets does not exist"

apt_install containerd runc containernetworking-plugins zstd openssl curl iproute2
BIN=$(resolve_binaries "$assets")
for b in $KUBE_BINARIES; do [ -x "$BIN/$b" ] || die "$BIN/$b is missing"; done
KUBECTL=("$BIN/kubectl" --kubeconfig "$KUBECONFIG_OUT")

# ---- 2. reuse a healthy cluster, else clean what a killed run left ---------------------------
mkdir -p "$STATE" "$LOGS" "$PKI"
chmod 700 "$STATE"
# a kubelet a killed test left stopped (SIGSTOP: a node lost mid-drain) goes on first
for n in $NODES; do running "kubelet@$n" && kill -CONT "$(pid_of "kubelet@$n")" 2>/dev/null || true; done
if all_running "$BIN" && apiserver_ready && nodes_ready "$BIN"; then
    log "a healthy cluster is already running (state $STATE, nodes $NODES): reusing it"
else
    [ -e "$STATE/etcd-data" ] || [ -e "$STATE/nodes" ] || [ -e "$STATE/kubelet" ] &&
        log "cleaning what an earlier run left"
    stop_cluster
    rm -rf "$STATE/etcd-data" "$STATE"/nodes/*/kubelet "$STATE"/nodes/*/pod-logs "$STATE"/nodes/*/cni "$KUBECONFIG_OUT"
    # an earlier version's one node, straight in the state dir
    rm -rf "$STATE/kubelet" "$STATE/pod-logs" "$STATE/cni" "$STATE/containerd" "$STATE/images"
    start_cluster "$BIN"
fi
T_UP=$(now_ms)

# ---- 3. the test images, from Docker into the node's containerd ------------------------------
import_images
T_END=$(now_ms)
log "cluster up in $(ms_to_s $((T_UP - T0))) s, images in $(ms_to_s $((T_END - T_UP))) s (total $(ms_to_s $((T_END - T0))) s)"

echo "ASYNCDEPLOY_TEST_KUBECONFIG=$KUBECONFIG_OUT"
echo "ASYNCDEPLOY_TEST_K8S_IMAGE=$(node_ref asyncdeploy-test/busybox)"
echo "ASYNCDEPLOY_TEST_K8S_PYTHON_IMAGE=$(node_ref asyncdeploy-test/python)"
echo "ASYNCDEPLOY_TEST_K8S_PAUSE_IMAGE=$(node_ref asyncdeploy-test/pause)"
echo "ASYNCDEPLOY_TEST_K8S_DEMO_IMAGE=$(node_ref localhost/asyncdeploy/demo)"
echo "ASYNCDEPLOY_TEST_K8S_GRPC_IMAGE=$(node_ref asyncdeploy-test/grpc-engine)"
if has_image "$(node_sock "${NODES%% *}")" asyncdeploy-test/llama-server; then
    echo "ASYNCDEPLOY_TEST_K8S_LLAMA_IMAGE=$(node_ref asyncdeploy-test/llama-server)"
fi
echo "ASYNCDEPLOY_KUBECTL=$BIN/kubectl"
echo "ASYNCDEPLOY_TEST_K8S_NODES=$(echo $NODES | tr ' ' ,)"
echo "ASYNCDEPLOY_TEST_K8S_STATE=$STATE"
echo "ASYNCDEPLOY_KUBE_STARTUP_SECONDS=$(ms_to_s $((T_END - T0)))"
