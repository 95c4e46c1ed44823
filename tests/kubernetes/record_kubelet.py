"""Record what a real kubelet shows during drains and failed starts (``recordings/08*``, ``09*``).

    python tests/kubernetes/record_kubelet.py            # ASYNCDEPLOY_TEST_KUBECONFIG, _K8S_IMAGE

For each scenario: a Pod is created in a scratch namespace and, for the drains, deleted (as the
driver deletes it); the Pod watch and the watch of the Pod's Events are recorded side by side,
each line with its offset in seconds from the delete (from the create, for the start-ups). The
files are replayed through the driver's pure parts by ``test_kubelet_recordings.py``.
"""

from __future__ import annotations

import copy
import json
import os
import secrets
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
from kubernetes_asyncio.client import CoreV1Api

from asyncdeploy import Container, Resources, WorkloadPlan
from asyncdeploy.drivers.kubernetes import KubernetesDriver, pod_manifest

sys.path.insert(0, str(Path(__file__).parent))
from k8s_contract import trap_script

OUT = Path(__file__).parent / "recordings"
IMAGE = os.environ.get("ASYNCDEPLOY_TEST_K8S_IMAGE", "asyncdeploy-test/busybox:kube")


def _container(**kw: Any) -> Container:
    kw.setdefault("command", trap_script(kw.pop("drain", 0.5), kw.pop("ignore", False)))
    return Container(name="c", image=kw.pop("image", IMAGE), **kw)


DRAINS: dict[str, tuple[str, Container, int, int | None]] = {
    # stem: (description, container, spec grace, delete grace)
    "08a-kubelet-events-prestop-ok": (
        "preStop `sleep 1`, then SIGTERM, drains 0.5 s, exits 0 (grace 10)",
        _container(pre_stop=["sh", "-c", "sleep 1"]),
        10,
        None,
    ),
    "08b-kubelet-events-prestop-failed": (
        "preStop `exit 3` fails, then SIGTERM, drains 1 s, exits 0 (grace 10)",
        _container(drain=1.0, pre_stop=["sh", "-c", "exit 3"]),
        10,
        None,
    ),
    "08c-kubelet-events-prestop-timeout": (
        "preStop `sleep 60` cut off at the grace period (3 s), then SIGTERM, exits 0",
        _container(drain=0.2, pre_stop=["sh", "-c", "sleep 60"]),
        3,
        None,
    ),
    "08d-kubelet-events-sigterm": (
        "no hook: SIGTERM, drains 2 s, exits 0 (grace 10)",
        _container(drain=2.0),
        10,
        None,
    ),
    "08e-kubelet-events-ignore-sigterm": (
        "SIGTERM ignored: SIGKILL at the deadline (grace 2)",
        _container(ignore=True),
        2,
        None,
    ),
    "08f-kubelet-events-grace-0": (
        "delete with gracePeriodSeconds 0 of a container that would drain 5 s",
        _container(drain=5.0),
        30,
        0,
    ),
}


def _never_pull(c: dict[str, Any]) -> None:
    c["image"] = IMAGE.rsplit(":", 1)[0] + ":absent"
    c["imagePullPolicy"] = "Never"


def _missing_config_map(c: dict[str, Any]) -> None:
    c["env"] = [
        {"name": "X", "valueFrom": {"configMapKeyRef": {"name": "no-such-config-map", "key": "k"}}}
    ]


STARTS: dict[str, tuple[str, Container, Any]] = {
    "09a-kubelet-start-err-image-pull": (
        "image tag that exists nowhere, IfNotPresent, no registry reachable",
        _container(image=IMAGE.rsplit(":", 1)[0] + ":no-such-tag"),
        None,
    ),
    "09b-kubelet-start-never-pull": (
        "absent image with imagePullPolicy Never",
        _container(),
        _never_pull,
    ),
    "09c-kubelet-start-config-error": (
        "env from a ConfigMap that does not exist",
        _container(),
        _missing_config_map,
    ),
    "09d-kubelet-start-crash-loop": (
        "a container that exits 2 at once, restartPolicy Always",
        _container(command=["sh", "-c", "echo bad config; exit 2"], restart_policy="always"),
        None,
    ),
    "09e-scheduler-insufficient-cpu": (
        "a container requesting 64 CPUs on a 2-CPU node",
        _container(resources=Resources(cpu="64")),
        None,
    ),
}


async def _follow(
    driver: KubernetesDriver,
    ns: str,
    resource: str,
    selector: str,
    version: str,
    t0: list[float],
    out: list[dict[str, Any]],
) -> None:
    async with driver.api.watch(
        ns,
        resource_version=version,
        timeout_seconds=60,
        field_selector=selector,
        resource=resource,  # type: ignore[arg-type]
    ) as lines:
        async for line in lines:
            if line.get("type") != "BOOKMARK":
                out.append({"offset_s": round(anyio.current_time() - t0[0], 3), **line})


async def record(driver: KubernetesDriver, ns: str, stem: str) -> dict[str, Any]:
    name = f"rec-{secrets.token_hex(2)}"
    pods: list[dict[str, Any]] = []
    events: list[dict[str, Any]] = []
    t0 = [anyio.current_time()]
    if stem in DRAINS:
        description, container, grace, delete_grace = DRAINS[stem]
        plan = WorkloadPlan(
            name=name, containers=[container], termination_grace_period_seconds=grace
        )
        await driver.apply(plan)
        await driver.wait_ready(name, timeout=60)
    else:
        description, container, edit = STARTS[stem]
        plan = WorkloadPlan(name=name, containers=[container])
        delete_grace = None
    pod_version = (await driver.api.list_pods(ns))["metadata"]["resourceVersion"]
    event_version = (await driver.api.list_events(ns, field_selector="involvedObject.kind=Pod"))[
        "metadata"
    ]["resourceVersion"]
    with anyio.move_on_after(25 if stem in STARTS else 40):
        async with anyio.create_task_group() as tg:
            tg.start_soon(
                _follow, driver, ns, "pods", f"metadata.name={name}", pod_version, t0, pods
            )
            tg.start_soon(
                _follow,
                driver,
                ns,
                "events",
                f"involvedObject.name={name}",
                event_version,
                t0,
                events,
            )
            await anyio.sleep(0.3)
            t0[0] = anyio.current_time()
            if stem in DRAINS:
                uid = (await driver.api.read(ns, name))["metadata"]["uid"]
                await driver.api.delete(ns, name, uid=uid, grace=delete_grace)
                while not any(p["type"] == "DELETED" for p in pods):  # noqa: ASYNC110
                    await anyio.sleep(0.1)  # a recording tool: polling its own list is enough
                await anyio.sleep(3)  # Events the kubelet records after the Pod is gone
            else:
                manifest = copy.deepcopy(pod_manifest(plan, namespace=ns))
                if edit is not None:
                    edit(manifest["spec"]["containers"][0])
                await driver.api.create(ns, manifest)
                await anyio.sleep(12)
            tg.cancel_scope.cancel()
    if stem in STARTS:
        await driver.drain(await driver.find([name]), grace_period_seconds=0, emit=lambda _: None)
    return {
        "description": description,
        "recorded": datetime.now(UTC).isoformat(timespec="seconds"),
        "notes": [
            "kube-apiserver, kube-scheduler, kubelet v1.36.2 on containerd 1.6 (ci/start-kube.sh)",
            "offset_s: seconds since the delete (drains) or the create (start-ups)",
            "pod_watch: watch of the Pod (fieldSelector metadata.name)",
            "event_watch: watch of its Events (fieldSelector involvedObject.name)",
        ],
        "delete_grace_period_seconds": delete_grace,
        "pod_watch": pods,
        "event_watch": events,
    }


async def main() -> None:
    kubeconfig = os.environ["ASYNCDEPLOY_TEST_KUBECONFIG"]
    ns = f"asyncdeploy-record-{secrets.token_hex(2)}"
    admin = await KubernetesDriver.connect(kubeconfig=kubeconfig)
    core = CoreV1Api(admin.api.client)
    await core.create_namespace({"metadata": {"name": ns}})  # type: ignore[arg-type]
    await anyio.sleep(1.5)  # the default ServiceAccount
    driver = await KubernetesDriver.connect(kubeconfig=kubeconfig, namespace=ns)
    try:
        wanted = sys.argv[1:] or [*DRAINS, *STARTS]
        for stem in wanted:
            data = await record(driver, ns, stem)
            (OUT / f"{stem}.json").write_text(json.dumps(data, indent=1) + "\n")
            reasons = [e["object"].get("reason") for e in data["event_watch"]]
            print(f"{stem}: {len(data['pod_watch'])} pod states, events {reasons}")  # noqa: T201
    finally:
        await driver.aclose()
        await core.delete_namespace(ns)
        await admin.aclose()


if __name__ == "__main__":
    anyio.run(main)
