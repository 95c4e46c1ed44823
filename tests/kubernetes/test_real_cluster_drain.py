"""The drain's hard paths on the real cluster: a second Ctrl-C to a real CLI process, a
same-named successor created between the look and the delete, the plan's namespace (issue 16
items 4, 6 and 15), traffic leaving a Pod behind a Service (issue 15 item 4: needs the
endpointslice controller, which ci/start-kube.sh runs).

What a real cluster cannot show on demand (a 503 or 429 on a delete, a connection lost mid-call)
is tested against the fake API server (``test_driver_fake.py``).
"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import anyio
import attrs
import k8s_contract
import pytest
import yaml
from kubernetes_asyncio.client import CoreV1Api, DiscoveryV1Api
from real_cluster import (
    DEMO_IMAGE,
    IMAGE,
    RUN_ID,
    cli_kubeconfig,
    namespace_fixtures,
)

from asyncdeploy import (
    Checks,
    Container,
    Deployer,
    DrainEvent,
    Probe,
    TrafficLeft,
    TrafficStillRouted,
    WorkloadNotFound,
    WorkloadPlan,
)
from asyncdeploy.drivers.kubernetes import KubernetesDriver
from asyncdeploy.plan import Service, ServicePort
from tests.cli_runner import invoke_in_thread
from tests.engines.cli_process import start_cli
from tests.polling import until

NAMESPACE = f"asyncdeploy-test-{RUN_ID}-drain"

pytestmark = [pytest.mark.anyio, pytest.mark.engine]


cluster, driver = namespace_fixtures(NAMESPACE)


def _plan(name: str, *, grace: int, drain: float) -> WorkloadPlan:
    return WorkloadPlan(
        name=f"t{RUN_ID}-{name}",
        labels={k8s_contract.RUN_LABEL: RUN_ID},
        termination_grace_period_seconds=grace,
        containers=[
            Container(name="server", image=IMAGE, command=k8s_contract.trap_script(drain, False))
        ],
    )


async def _running(driver: KubernetesDriver, plan: WorkloadPlan) -> str:
    await driver.apply(plan)
    await driver.wait_ready(plan.name, timeout=180)
    pod = await driver.api.read(driver.namespace, plan.name)
    return str(pod["metadata"]["uid"])


async def test_two_sigints_to_a_cli_delete_kill_the_pod_at_once(
    driver: KubernetesDriver, cluster: str, tmp_path: Path
) -> None:
    """A 20 s drain under a 30 s grace; two SIGINTs 50 ms apart once the kubelet signalled it:
    the CLI sends the grace-0 delete, its JSON ends with DrainFinished (the container killed),
    it exits 130, and the Pod is gone — not still draining for its 30 s."""
    plan = _plan("int", grace=30, drain=20)
    await _running(driver, plan)
    kubeconfig = cli_kubeconfig(cluster, tmp_path / "kubeconfig")
    cli = await start_cli(
        "kubernetes", "--kubeconfig", str(kubeconfig), "delete", plan.name, "-o", "json"
    )
    await cli.next_event("SignalSent", timeout=60)
    cli.send(signal.SIGINT)
    await anyio.sleep(0.05)
    cli.send(signal.SIGINT)
    code, err = await cli.finish(timeout=60)
    assert code == 130, err
    # killed at once, not at the 30 s deadline: the reason below ("cancelled", not "deadline")
    assert "killing the remaining containers now" in err
    finished = cli.lines[-1]
    assert finished["event"] == "DrainFinished", cli.lines
    assert [c["outcome"] for c in finished["containers"]] == ["killed"]
    assert finished["errors"] == []
    kills = [e for e in cli.lines if e["event"] == "ContainerForceKilled"]
    assert [e["reason"] for e in kills] == ["cancelled"]
    with pytest.raises(WorkloadNotFound):
        await driver.get(plan.name)  # removed at once, not still terminating


async def test_a_same_named_successor_created_after_the_look_survives_the_drain(
    driver: KubernetesDriver,
) -> None:
    """The drain's look finds a Pod; before its delete, someone replaces that Pod by a
    same-named one. The uid-guarded delete leaves the successor serving, and the drain of the
    Pod it found succeeds."""
    plan = _plan("succ", grace=5, drain=0.2)
    old_uid = await _running(driver, plan)
    found = await driver.find([plan.name])
    await driver.api.delete(driver.namespace, plan.name, uid=old_uid, grace=0)

    async def gone() -> bool:
        try:
            await driver.api.read(driver.namespace, plan.name)
        except WorkloadNotFound:
            return True
        return False

    await until(gone, timeout=30, interval=0.2)
    successor = await _running(driver, plan)
    assert successor != old_uid
    events: list[DrainEvent] = []
    [summary] = await driver.drain(found, grace_period_seconds=None, emit=events.append)
    assert summary.ok, summary.errors
    pod = await driver.api.read(driver.namespace, plan.name)
    assert pod["metadata"]["uid"] == successor
    assert "deletionTimestamp" not in pod["metadata"]
    assert (await driver.get(plan.name)).state == "running"


def _plan_file(cluster: str, tmp_path: Path, name: str) -> Path:
    plan = _plan(name, grace=3, drain=0.2)
    document = {
        "name": plan.name,
        "namespace": cluster,
        "labels": dict(plan.labels),
        "termination_grace_period_seconds": 3,
        "containers": [
            {"name": "server", "image": IMAGE, "command": k8s_contract.trap_script(0.2, False)}
        ],
    }
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


async def test_create_wait_works_in_the_plans_namespace(
    driver: KubernetesDriver, cluster: str, tmp_path: Path
) -> None:
    """Issue 16 item 15 on the real cluster: the kubeconfig's context says "default", the plan
    names the run's namespace: create --wait waits for the Pod it made there; -n default
    against that plan is refused (exit 2)."""
    path = _plan_file(cluster, tmp_path, "nsc")
    env = {"KUBECONFIG": str(cli_kubeconfig("default", tmp_path / "kubeconfig"))}
    args = ("--driver", "kubernetes")
    result = await invoke_in_thread(
        *args, "create", "-f", str(path), "--wait", "--timeout", "120", env=env
    )
    assert result.exit_code == 0, result.output
    assert (await driver.get(f"t{RUN_ID}-nsc")).state == "running"
    result = await invoke_in_thread(*args, "create", "-f", str(path), "-n", "default", env=env)
    assert result.exit_code == 2, result.output
    assert "was asked for" in result.stderr


async def test_replace_works_in_the_plans_namespace(
    driver: KubernetesDriver, cluster: str, tmp_path: Path
) -> None:
    """replace from a context in "default" of a plan naming the run's namespace leaves exactly
    the new instance there (it was left running in the plan's namespace, the old kept)."""
    path = _plan_file(cluster, tmp_path, "nsr")
    env = {"KUBECONFIG": str(cli_kubeconfig("default", tmp_path / "kubeconfig"))}
    args = ("--driver", "kubernetes")
    result = await invoke_in_thread(
        *args, "create", "-f", str(path), "--wait", "--timeout", "120", env=env
    )
    assert result.exit_code == 0, result.output
    new = f"t{RUN_ID}-nsr-2"
    result = await invoke_in_thread(
        *args, "replace", "-f", str(path), "--name", new, "--timeout", "120", env=env
    )
    assert result.exit_code == 0, result.output
    names = [s.name for s in await driver.list({k8s_contract.RUN_LABEL: RUN_ID})]
    assert f"t{RUN_ID}-nsr" not in names and new in names


async def test_a_pod_behind_its_service_leaves_the_endpoints_before_it_is_signalled(
    driver: KubernetesDriver,
) -> None:
    """Issue 15 item 4: a plan asking for a Service; its Pod (ready) is an endpoint. Deleted
    with a 3 s preStop hook (the kubelet signals only after it), the drain stream reports
    TrafficLeft, from the endpointslice controller's update, before SignalSent and within the
    hook's 3 s; the Service goes with the last instance."""
    plan = attrs.evolve(
        _plan("svc", grace=10, drain=0.2),
        service=Service(ports=(ServicePort(port=80, target_port=8000),)),
        containers=(
            attrs.evolve(
                _plan("svc", grace=10, drain=0.2).containers[0],
                pre_stop=["sh", "-c", "sleep 3"],
                checks=Checks(readiness=Probe(exec=["true"], period_seconds=1)),
            ),
        ),
    )
    uid = await _running(driver, plan)
    core = CoreV1Api(driver.api.client)
    discovery = DiscoveryV1Api(driver.api.client)

    async def endpoint_ready() -> bool:
        slices = await discovery.list_namespaced_endpoint_slice(
            driver.namespace, label_selector=f"kubernetes.io/service-name={plan.name}"
        )
        return any(
            e.target_ref is not None and e.target_ref.uid == uid and e.conditions.ready
            for s in slices.items
            for e in s.endpoints or []
        )

    await until(endpoint_ready, timeout=60, interval=0.2)  # the controller made its slice
    events: list[DrainEvent] = []
    async with Deployer(driver).terminate(plan.name) as stream:
        events = [e async for e in stream]
    kinds = [type(e).__name__ for e in events]
    [left] = [e for e in events if isinstance(e, TrafficLeft)]
    assert left.services == (plan.name,)
    assert kinds.index("TrafficLeft") < kinds.index("SignalSent"), kinds  # inside the hook
    assert "TrafficStillRouted" not in kinds
    assert events[-1].summary.ok  # type: ignore[union-attr]
    services = await core.list_namespaced_service(driver.namespace)
    assert plan.name not in [s.metadata.name for s in services.items]  # with the last instance


async def test_a_pod_still_routed_past_the_window_is_a_warning(driver: KubernetesDriver) -> None:
    """A selector-less Service whose EndpointSlice (made by hand: no controller updates it)
    lists the Pod as ready: past the propagation window (the hook's --propagation-wait, 1 s)
    the stream warns, naming the Service."""
    base = _plan("stale", grace=6, drain=0.2)
    hook = ["sh", "-c", "sleep 3", "--propagation-wait", "1s"]  # the window the drain reads
    plan = attrs.evolve(base, containers=(attrs.evolve(base.containers[0], pre_stop=hook),))
    uid = await _running(driver, plan)
    core = CoreV1Api(driver.api.client)
    discovery = DiscoveryV1Api(driver.api.client)
    name = f"{plan.name}-manual"
    await core.create_namespaced_service(
        driver.namespace,
        {"metadata": {"name": name}, "spec": {"ports": [{"port": 80}]}},  # type: ignore[arg-type]
    )
    await discovery.create_namespaced_endpoint_slice(
        driver.namespace,
        {  # type: ignore[arg-type]
            "metadata": {"name": name, "labels": {"kubernetes.io/service-name": name}},
            "addressType": "IPv4",
            "ports": [{"port": 80}],
            "endpoints": [
                {
                    "addresses": ["10.0.0.99"],
                    "conditions": {"ready": True},
                    "targetRef": {"kind": "Pod", "name": plan.name, "uid": uid},
                }
            ],
        },
    )
    try:
        async with Deployer(driver).terminate(plan.name) as stream:
            events = [e async for e in stream]
    finally:
        await core.delete_namespaced_service(name, driver.namespace)
        await discovery.delete_namespaced_endpoint_slice(name, driver.namespace)
    [warning] = [e for e in events if isinstance(e, TrafficStillRouted)]
    assert warning.services == (name,) and warning.window == 1.0
    kinds = [type(e).__name__ for e in events]
    assert warning.elapsed > 0.9  # past the window
    assert kinds.index("TrafficStillRouted") < kinds.index("SignalSent"), kinds  # in the hook
    assert not any(isinstance(e, TrafficLeft) for e in events)


async def test_the_service_example_plan_drains_with_traffic_leaving_first(
    driver: KubernetesDriver,
) -> None:
    """``examples/plans/service.yaml`` as written (the cluster's copy of the demo image, and
    the run's label and name): ready behind its Service, then deleted: TrafficLeft comes
    inside the hook's 5 s propagation wait, before the server is signalled."""
    path = Path(__file__).parents[2] / "examples" / "plans" / "service.yaml"
    written = WorkloadPlan.from_file(path)
    [server] = written.containers
    plan = attrs.evolve(
        written,
        name=f"t{RUN_ID}-example",
        labels={k8s_contract.RUN_LABEL: RUN_ID},
        containers=(attrs.evolve(server, image=DEMO_IMAGE),),
    )
    await _running(driver, plan)
    await until(lambda: _ready_endpoint(driver, plan.name), timeout=60, interval=0.2)
    async with Deployer(driver).terminate(plan.name) as stream:
        events = [e async for e in stream]
    kinds = [type(e).__name__ for e in events]
    assert len([e for e in events if isinstance(e, TrafficLeft)]) == 1, kinds
    assert kinds.index("TrafficLeft") < kinds.index("SignalSent"), kinds  # inside the hook
    assert events[-1].summary.ok  # type: ignore[union-attr]


async def _ready_endpoint(driver: KubernetesDriver, service: str) -> bool:
    slices = await DiscoveryV1Api(driver.api.client).list_namespaced_endpoint_slice(
        driver.namespace, label_selector=f"kubernetes.io/service-name={service}"
    )
    return any(e.conditions.ready for s in slices.items for e in s.endpoints or [])


async def test_the_kubelet_records_a_repeated_event_as_a_count_bump(
    driver: KubernetesDriver,
) -> None:
    """What the fake's recorder does (and the drain now reads, issue 16 item 13), on a real
    kubelet: a container restarted again and again is one "Started" Event (one name) whose
    ``count`` grows, not a new Event per start."""
    plan = WorkloadPlan(
        name=f"t{RUN_ID}-again",
        labels={k8s_contract.RUN_LABEL: RUN_ID},
        termination_grace_period_seconds=1,
        containers=[
            Container(
                name="server", image=IMAGE, command=["sh", "-c", "exit 1"], restart_policy="always"
            )
        ],
    )
    await driver.apply(plan)
    core = CoreV1Api(driver.api.client)

    async def started() -> list[Any]:
        events = await core.list_namespaced_event(
            driver.namespace, field_selector=f"involvedObject.name={plan.name}"
        )
        return [e for e in events.items if e.reason == "Started"]

    async def bumped() -> bool:
        return any((e.count or 1) >= 2 for e in await started())

    try:
        await until(bumped, timeout=90, interval=0.5)
    except TimeoutError:
        seen = await core.list_namespaced_event(driver.namespace)
        pytest.fail(f"no bumped Event: {[(e.reason, e.count) for e in seen.items]}")
    assert len(await started()) == 1  # one Event, its count bumped


HOLD = "asyncdeploy.io/test-hold"  # a finalizer: the Pod stays after its containers end


async def _hold(driver: KubernetesDriver, name: str, finalizers: list[str]) -> None:
    await CoreV1Api(driver.api.client).patch_namespaced_pod(
        name,
        driver.namespace,
        {"metadata": {"finalizers": finalizers}},
        _content_type="application/merge-patch+json",
    )


async def _ended(driver: KubernetesDriver, name: str) -> bool:
    """The Pod is being deleted and every container's end is on record."""
    try:
        pod = await driver.api.read(driver.namespace, name)
    except WorkloadNotFound:
        return False
    states = [s.get("state") or {} for s in pod["status"].get("containerStatuses") or []]
    deleting = bool(pod["metadata"].get("deletionTimestamp"))
    return deleting and bool(states) and all("terminated" in s for s in states)


async def test_a_pod_still_torn_down_after_its_containers_ended_is_exit_4_not_a_failure(
    driver: KubernetesDriver, cluster: str, tmp_path: Path
) -> None:
    """Issue 25 item 6 on the real cluster. A Pod that stays after every container ended (held
    here by a finalizer, as a slow node's teardown holds it): ``delete --timeout 6s`` reports
    it tearing down (``TeardownPending``, ``tearing_down``, exit 4), not a failed drain; the
    same Pod released 3 s after its containers ended is waited for within ``--timeout 90s``
    (exit 0), as kubectl waits."""
    plan = _plan("hold", grace=3, drain=0.2)
    env = {"KUBECONFIG": str(cli_kubeconfig(cluster, tmp_path / "kubeconfig"))}
    delete = ("--driver", "kubernetes", "delete", plan.name, "-o", "json")

    async def gone() -> bool:
        try:
            await driver.api.read(driver.namespace, plan.name)
        except WorkloadNotFound:
            return True
        return False

    await _running(driver, plan)
    await _hold(driver, plan.name, [HOLD])
    try:
        result = await invoke_in_thread(*delete, "--timeout", "6s", env=env)
        assert result.exit_code == 4, result.output
        lines = [json.loads(line) for line in result.stdout.splitlines()]
        kinds = [line["event"] for line in lines]
        assert kinds[-2:] == ["TeardownPending", "DrainFinished"], kinds
        assert "ContainerExited" in kinds and "PauseRemoved" not in kinds
        assert lines[-1]["tearing_down"] is True and lines[-1]["errors"] == []
        assert [c["outcome"] for c in lines[-1]["containers"]] == ["exited"]
        assert await _ended(driver, plan.name)  # still there, every container ended
    finally:
        await _hold(driver, plan.name, [])
    await until(gone, timeout=60, interval=0.2)

    await _running(driver, plan)
    await _hold(driver, plan.name, [HOLD])
    released: list[float] = []

    async def release_later() -> None:
        await until(lambda: _ended(driver, plan.name), timeout=60, interval=0.2)
        await anyio.sleep(3)
        await _hold(driver, plan.name, [])
        released.append(anyio.current_time())

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(release_later)
            result = await invoke_in_thread(*delete, "--timeout", "90s", env=env)
    finally:
        with anyio.CancelScope(shield=True):
            if not released and not await gone():
                await _hold(driver, plan.name, [])
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert lines[-1]["tearing_down"] is False and lines[-1]["errors"] == []
    assert "PauseRemoved" in [line["event"] for line in lines]
    assert await gone()
