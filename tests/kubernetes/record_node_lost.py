"""Record what the API server shows of a node whose kubelet stops in the middle of a drain
(``recordings/10a-node-lost-mid-drain.json``): its Lease, its Node and the Pod, read every few
seconds from the delete on, while the kubelet is stopped (SIGSTOP), then once it is resumed.

    python tests/kubernetes/record_node_lost.py NODE   # ASYNCDEPLOY_TEST_KUBECONFIG, _K8S_IMAGE,
                                                       # ASYNCDEPLOY_TEST_K8S_STATE (kubelet PIDs)

The fake API server's nodes and leases (``fake_apiserver.py``) answer as recorded here;
``test_fake_matches_recordings.py`` holds them to it.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio

from asyncdeploy import Container, WorkloadPlan
from asyncdeploy.drivers.kubernetes import KubernetesDriver, pod_manifest

sys.path.insert(0, str(Path(__file__).parent))
from k8s_contract import trap_script

OUT = Path(__file__).parent / "recordings" / "10a-node-lost-mid-drain.json"
IMAGE = os.environ.get("ASYNCDEPLOY_TEST_K8S_IMAGE", "asyncdeploy-test/busybox:kube")
LEASE = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{}"


async def main(node: str) -> None:
    kubeconfig = os.environ["ASYNCDEPLOY_TEST_KUBECONFIG"]
    pid = int((Path(os.environ["ASYNCDEPLOY_TEST_K8S_STATE"]) / f"kubelet@{node}.pid").read_text())
    driver = await KubernetesDriver.connect(kubeconfig=kubeconfig, namespace="default")
    name = f"rec-node-lost-{secrets.token_hex(2)}"
    plan = WorkloadPlan(
        name=name,
        termination_grace_period_seconds=15,
        node_selector={"kubernetes.io/hostname": node},
        containers=[Container(name="c", image=IMAGE, command=trap_script(5, False))],
    )
    exchanges: list[dict[str, Any]] = []
    t0 = 0.0

    async def get(label: str, path: str) -> None:
        sent = time.time()
        body = await driver.api.call("GET", path, label)
        body.get("metadata", {}).pop("managedFields", None)  # noise; and the Node's image list
        (body.get("status") or {}).pop("images", None) if body.get("kind") == "Node" else None
        exchanges.append(
            {
                "label": label,
                "offset_s": round(sent - t0, 3),
                "wall_clock": datetime.fromtimestamp(sent, UTC).isoformat(),
                "request": {"method": "GET", "path": path},
                "response": {"status": 200, "body": body},
            }
        )

    try:
        await driver.api.create("default", pod_manifest(plan, namespace="default"))
        await driver.wait_ready(name, timeout=120)
        pod = await driver.api.read("default", name)
        t0 = time.time()
        await get("lease, healthy", LEASE.format(node))
        await get("node, healthy", f"/api/v1/nodes/{node}")
        await driver.api.delete("default", name, uid=pod["metadata"]["uid"], grace=None)
        await anyio.sleep(0.3)
        os.kill(pid, signal.SIGSTOP)
        stopped = time.time()
        try:
            for _ in range(7):
                await anyio.sleep(5)
                await get("lease, kubelet stopped", LEASE.format(node))
                await get("node, kubelet stopped", f"/api/v1/nodes/{node}")
                await get("pod, kubelet stopped", f"/api/v1/namespaces/default/pods/{name}")
        finally:
            os.kill(pid, signal.SIGCONT)
        resumed = time.time()
        await anyio.sleep(3)
        await get("lease, kubelet resumed", LEASE.format(node))
    finally:
        await driver.aclose()
    OUT.write_text(
        json.dumps(
            {
                "description": "A node whose kubelet is stopped (SIGSTOP) 0.3 s after a Pod of it "
                "was deleted (grace 15, the container drains 5 s): the Lease, the Node and the Pod "
                "read every 5 s for 35 s, then the Lease once the kubelet was resumed.",
                "recorded": f"kube-apiserver v1.36.2, kubelet v1.36.2 (node {node}), no node "
                "lifecycle controller (ci/start-kube.sh)",
                "notes": "The Lease's renewTime stops at the kubelet's last renewal (every 10 s of "
                "its 40 s leaseDurationSeconds) and moves again once it is resumed; the Node's "
                "Ready condition stays True (no node lifecycle controller runs to set it "
                "Unknown); the Pod keeps its deletionTimestamp and its container 'running'. Kept out "
                "of the bodies: managedFields, and the Node's status.images.",
                "t0_wall_clock": datetime.fromtimestamp(t0, UTC).isoformat(),
                "kubelet_stopped_offset_s": round(stopped - t0, 3),
                "kubelet_resumed_offset_s": round(resumed - t0, 3),
                "exchanges": exchanges,
            },
            indent=1,
        )
        + "\n"
    )
    sys.stderr.write(f"wrote {OUT}\n")


if __name__ == "__main__":
    anyio.run(main, sys.argv[1])
