#!/usr/bin/env bash
# stop-kube.sh - stop the cluster ci/start-kube.sh started, by the PIDs it recorded, and remove
# what the nodes leave on the host: their containers, mounts, network namespaces, CNI bridges,
# the kubelets' cgroups. The state dir stays (binaries, certificates, imported images are reused);
# `stop-kube.sh --purge` removes it too. Environment: as ci/start-kube.sh (ASYNCDEPLOY_KUBE_STATE).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=ci/kube-common.sh
. "$here/kube-common.sh"

[ -d "$STATE" ] || { log "nothing to stop ($STATE does not exist)"; exit 0; }
stop_cluster
rm -rf "$STATE/etcd-data" "$STATE"/nodes/*/kubelet "$STATE"/nodes/*/pod-logs "$STATE/kubelet" "$STATE/pod-logs"
if [ "${1:-}" = --purge ]; then
    case "$STATE" in /|"") die "refusing to remove '$STATE'" ;; esac
    rm -rf "$STATE"
    log "removed $STATE"
fi
log "stopped"
