"""Two nodes (issue 31 item 5): what a one-node cluster could not show.

``ci/start-kube.sh`` starts two kubelets, ``127.0.0.1`` and ``127.0.0.2`` (each with its own
containerd, root directory, cgroup root and bridge) and prints their names
(``ASYNCDEPLOY_TEST_K8S_NODES``) and its state dir (``ASYNCDEPLOY_TEST_K8S_STATE``: the kubelets'
PIDs, ``kubelet@NODE.pid``). The plans pin their Pods with ``node_selector``
(``kubernetes.io/hostname``).

- Pods of one selector spread over both nodes drain under one deadline (``delete -l``);
- a node whose kubelet stops in the middle of a drain (SIGSTOP: it stops reporting, its Pod
  stays Terminating, exactly as a kubelet that died or a node cut off from the API server) ends
  the delete at its deadline with ``NodeUnreachable`` naming the node and what to run, exit 5,
  never a hang and never exit 4's "every container ended"; ``list -o wide`` and ``get`` say
  where the Pod is. The kubelet is resumed afterwards (SIGCONT) and finishes the Pod.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import k8s_contract
import pytest
from real_cluster import IMAGE, RUN_ID, cli_kubeconfig, namespace_fixtures, required

from asyncdeploy import Container, WorkloadNotFound, WorkloadPlan
from asyncdeploy.drivers.kubernetes import KubernetesDriver
from tests.cli_runner import invoke_in_thread
from tests.polling import until

NAMESPACE = f"asyncdeploy-test-{RUN_ID}-nodes"
NODES = [n for n in os.environ.get("ASYNCDEPLOY_TEST_K8S_NODES", "").split(",") if n]
STATE = os.environ.get("ASYNCDEPLOY_TEST_K8S_STATE", "")
HOSTNAME = "kubernetes.io/hostname"

pytestmark = [pytest.mark.anyio, pytest.mark.engine]

cluster, driver = namespace_fixtures(NAMESPACE)


def _need_two_nodes() -> tuple[str, str]:
    if len(NODES) < 2:
        reason = (
            "ASYNCDEPLOY_TEST_K8S_NODES does not name two nodes: these tests need the two-node "
            "cluster ci/start-kube.sh starts"
        )
        if required():
            pytest.fail(reason)
        pytest.skip(reason)
    return NODES[0], NODES[1]


def _kubelet_pid(node: str) -> int:
    path = Path(STATE) / f"kubelet@{node}.pid"
    if not STATE or not path.is_file():
        reason = (
            f"no PID file of node {node}'s kubelet ({path}): ASYNCDEPLOY_TEST_K8S_STATE names "
            "the state dir of ci/start-kube.sh"
        )
        if required():
            pytest.fail(reason)
        pytest.skip(reason)
    return int(path.read_text().strip())


def _plan(name: str, node: str, *, grace: int, drain: float, selector: str) -> WorkloadPlan:
    return WorkloadPlan(
        name=f"t{RUN_ID}-{name}",
        labels={k8s_contract.RUN_LABEL: RUN_ID, "group": selector},
        termination_grace_period_seconds=grace,
        node_selector={HOSTNAME: node},
        containers=[
            Container(name="server", image=IMAGE, command=k8s_contract.trap_script(drain, False))
        ],
    )


async def _running_on(driver: KubernetesDriver, plan: WorkloadPlan) -> str:
    """Create and wait ready; the node the Pod runs on."""
    await driver.apply(plan)
    await driver.wait_ready(plan.name, timeout=180)
    pod = await driver.api.read(driver.namespace, plan.name)
    return str(pod["spec"]["nodeName"])


def _events(stdout: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


async def test_pods_of_one_selector_on_two_nodes_drain_under_one_deadline(
    driver: KubernetesDriver, cluster: str, tmp_path: Path
) -> None:
    """One Pod on each node, one ``delete -l``: one start, one deadline for both (their
    ``DrainStarted`` deadlines agree), each container signalled and exited gracefully on its
    own node, both Pods gone; ``list -o wide`` showed each Pod's node, ``get`` its node."""
    first, second = _need_two_nodes()
    group = f"spread-{RUN_ID}"
    plans = [
        _plan("spread-a", first, grace=10, drain=1, selector=group),
        _plan("spread-b", second, grace=10, drain=1, selector=group),
    ]
    with anyio.fail_after(240):
        async with anyio.create_task_group() as tg:
            nodes: dict[str, str] = {}

            async def start(plan: WorkloadPlan) -> None:
                nodes[plan.name] = await _running_on(driver, plan)

            for plan in plans:
                tg.start_soon(start, plan)
    assert nodes == {plans[0].name: first, plans[1].name: second}

    env = {"KUBECONFIG": str(cli_kubeconfig(cluster, tmp_path / "kubeconfig"))}
    kube = ("--driver", "kubernetes")
    listed = await invoke_in_thread(*kube, "list", "-l", f"group={group}", "-o", "wide", env=env)
    assert listed.exit_code == 0, listed.output
    header, *rows = listed.stdout.splitlines()
    node_at = header.index("NODE")  # the columns are aligned under their headings
    assert {row.split()[0]: row[node_at:].split()[0] for row in rows} == nodes
    got = await invoke_in_thread(*kube, "get", plans[1].name, env=env)
    assert got.exit_code == 0 and f"Node:        {second}" in got.stdout, got.output

    result = await invoke_in_thread(*kube, "delete", "-l", f"group={group}", "-o", "json", env=env)
    assert result.exit_code == 0, result.output
    events = _events(result.stdout)
    started = {e["workload"]: e for e in events if e["event"] == "DrainStarted"}
    assert set(started) == set(nodes)
    deadlines = [float(e["deadline"]) for e in started.values()]  # type: ignore[arg-type]
    assert max(deadlines) - min(deadlines) < 1.0, deadlines  # one start, one grace
    finished = {e["workload"]: e for e in events if e["event"] == "DrainFinished"}
    assert set(finished) == set(nodes)
    for summary in finished.values():
        assert summary["errors"] == [] and summary["unreachable_node"] is None, summary
        assert [c["outcome"] for c in summary["containers"]] == ["exited"], summary  # type: ignore[union-attr]
    signalled = [e["workload"] for e in events if e["event"] == "SignalSent"]
    assert sorted(signalled) == sorted(nodes)
    for plan in plans:
        with pytest.raises(WorkloadNotFound):
            await driver.api.read(driver.namespace, plan.name)


@contextmanager
def _frozen_on_demand(pid: int) -> Iterator[list[bool]]:
    """``freeze[0] = True`` once SIGSTOP was sent; SIGCONT on the way out, whatever happened
    (a kubelet left stopped would break every later test on its node)."""
    frozen: list[bool] = []
    try:
        yield frozen
    finally:
        if frozen:
            os.kill(pid, signal.SIGCONT)


async def test_a_node_lost_mid_drain_ends_the_delete_at_its_deadline_with_the_truth(
    driver: KubernetesDriver, cluster: str, tmp_path: Path
) -> None:
    """A Pod on each node, one ``delete -l``; once the delete took effect the second node's
    kubelet stops (SIGSTOP). The first Pod drains as ever. The second stays Terminating: the
    delete ends at its give-up time (grace 15 + the 15 s margin) with ``NodeUnreachable``
    naming the node, the Pod and what to run, the summary's ``unreachable_node`` and its error,
    the container ``missing`` (its end unseen), exit 5 — not exit 4 ("every container ended",
    which nobody saw), not a hang. ``list -o wide`` and ``get -o json`` then say the Pod is
    draining on that node. Resumed, the kubelet finishes it."""
    first, second = _need_two_nodes()
    pid = _kubelet_pid(second)
    group = f"lost-{RUN_ID}"
    kept = _plan("lost-a", first, grace=15, drain=1, selector=group)
    lost = _plan("lost-b", second, grace=15, drain=5, selector=group)
    with anyio.fail_after(240):
        assert await _running_on(driver, kept) == first
        assert await _running_on(driver, lost) == second
    env = {"KUBECONFIG": str(cli_kubeconfig(cluster, tmp_path / "kubeconfig"))}
    kube = ("--driver", "kubernetes")

    async def deleting() -> bool:
        pod = await driver.api.read(driver.namespace, lost.name)
        return bool(pod["metadata"].get("deletionTimestamp"))

    with _frozen_on_demand(pid) as frozen:

        async def stop_the_kubelet() -> None:
            await until(deleting, timeout=30, interval=0.05)
            os.kill(pid, signal.SIGSTOP)  # before the container's 5 s drain can end
            frozen.append(True)

        with anyio.fail_after(120):  # never a hang: the delete ends at its give-up time
            async with anyio.create_task_group() as tg:
                tg.start_soon(stop_the_kubelet)
                result = await invoke_in_thread(
                    *kube, "delete", "-l", f"group={group}", "-o", "json", env=env
                )
        assert frozen, "the kubelet was never stopped"
        assert result.exit_code == 5, result.output
        events = _events(result.stdout)
        finished = {e["workload"]: e for e in events if e["event"] == "DrainFinished"}
        assert finished[kept.name]["errors"] == [], finished[kept.name]
        assert finished[kept.name]["unreachable_node"] is None
        [unreachable] = [e for e in events if e["event"] == "NodeUnreachable"]
        assert unreachable["workload"] == lost.name and unreachable["node"] == second
        assert unreachable["pod"] == lost.name
        assert "--force" in str(unreachable["remedy"]) and second in str(unreachable["remedy"])
        assert unreachable["silent_for"] is not None and float(unreachable["silent_for"]) > 0  # type: ignore[arg-type]
        summary = finished[lost.name]
        assert summary["unreachable_node"] == second and summary["tearing_down"] is False
        assert [c["outcome"] for c in summary["containers"]] == ["missing"]  # type: ignore[union-attr]
        [error] = summary["errors"]  # type: ignore[misc]
        assert second in error and "kubectl delete pod" in error, error
        assert "TeardownPending" not in [e["event"] for e in events]
        kinds = [e["event"] for e in events if e["workload"] == lost.name]
        assert kinds[-2:] == ["NodeUnreachable", "DrainFinished"], kinds

        # where the Pod is, while its node is silent
        listed = await invoke_in_thread(
            *kube, "list", "-l", f"group={group}", "-o", "wide", env=env
        )
        assert listed.exit_code == 0, listed.output
        header, *rows = listed.stdout.splitlines()
        [row] = [r for r in rows if r.split()[0] == lost.name]
        state = row[header.index("STATE") : header.index("READY")].strip()
        assert row[header.index("NODE") :].split()[0] == second, listed.stdout
        assert state.startswith("draining"), listed.stdout  # kubectl's Terminating
        got = await invoke_in_thread(*kube, "get", lost.name, "-o", "json", env=env)
        assert got.exit_code == 0, got.output
        status = json.loads(got.stdout)
        assert status["node"] == second and status["state"] == "draining"

    async def gone() -> bool:
        try:
            await driver.api.read(driver.namespace, lost.name)
        except WorkloadNotFound:
            return True
        return False

    await until(gone, timeout=90, interval=0.2)  # the kubelet, resumed, finished it
