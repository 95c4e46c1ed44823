"""The driver contract, the kubelet's Events and start-up reasons, on a real cluster.

``ASYNCDEPLOY_TEST_KUBECONFIG`` names the cluster: CI starts one (``ci/start-kube.sh``: etcd,
kube-apiserver, a kubelet on containerd, ... on 127.0.0.1) whenever the Kubernetes binaries are
there (``../shared/kubernetes/bin``, or ``ASYNCDEPLOY_KUBE_ASSETS``), and then sets
``ASYNCDEPLOY_REQUIRE_KUBERNETES=1``: a missing cluster fails the run. Without the variable every
test here is skipped with a one-line reason naming it (``-ra`` lists it).

Each run works in its own namespace, ``asyncdeploy-test-<run id>``, deleted afterwards. The
cluster must be able to run ``ASYNCDEPLOY_TEST_K8S_IMAGE`` (default ``busybox:1.36``: a shell,
``sleep`` and ``trap``) and must run kube-controller-manager's service-account controllers
(the ``default`` account and the ``kube-root-ca.crt`` ConfigMap of a new namespace); the
``default`` account is created here if it does not appear. ``exec`` and ``logs`` need the API
server to reach the kubelets, as ``kubectl exec`` does.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import attrs
import k8s_contract
import k8s_kubelet
import pytest
import yaml
from anyio.streams.buffered import BufferedByteReceiveStream
from click.testing import CliRunner
from kubernetes_asyncio.client import CoreV1Api
from real_cluster import (
    DEMO_IMAGE,
    GATE_IMAGE,
    IMAGE,
    RUN_ID,
    cli_kubeconfig,
    namespace_fixtures,
)

from asyncdeploy import Deployer, TrafficLeft, WorkloadNotFound, WorkloadPlan
from asyncdeploy.cli import main
from asyncdeploy.drivers.kubernetes import KubernetesDriver
from asyncdeploy.verify import TrafficMix, VerifyOptions, demo_plan, run_verify
from tests.engines.cli_process import CLIProcess
from tests.polling import until

NAMESPACE = f"asyncdeploy-test-{RUN_ID}"

pytestmark = pytest.mark.anyio


cluster, driver = namespace_fixtures(NAMESPACE)


@pytest.mark.parametrize("check", k8s_contract.CHECKS, ids=lambda c: c.__name__)
async def test_contract_on_a_real_cluster(
    driver: KubernetesDriver, check: Callable[[k8s_contract.Env], Awaitable[None]]
) -> None:
    # A first pull of the image may take a while: ready_timeout is generous.
    await check(k8s_contract.Env(driver, image=IMAGE, ready_timeout=180, run_id=RUN_ID))


# --- accelerators: a node that advertises GPUs ------------------------------------------------

GPU = "nvidia.com/gpu"
_GPU_PATH = GPU.replace("/", "~1")  # JSON pointer escaping of the "/" in the resource name


@pytest.fixture
async def gpu_node(driver: KubernetesDriver) -> AsyncIterator[str]:
    """The first node, patched to advertise 2 GPUs (as a device plugin would); the capacity is
    removed again afterwards. No device plugin runs, so nothing is ever handed a device."""
    core = CoreV1Api(driver.api.client)
    node = (await core.list_node()).items[0].metadata.name
    patch = [
        {"op": "add", "path": f"/status/capacity/{_GPU_PATH}", "value": "2"},
        {"op": "add", "path": f"/status/allocatable/{_GPU_PATH}", "value": "2"},
    ]
    await core.patch_node_status(node, patch)
    try:
        yield node
    finally:
        with anyio.CancelScope(shield=True):
            status = (await core.read_node_status(node)).status
            undo = [
                {"op": "remove", "path": f"/status/{part}/{_GPU_PATH}"}
                for part, values in (
                    ("capacity", status.capacity),
                    ("allocatable", status.allocatable),
                )
                if GPU in (values or {})
            ]
            if undo:
                await core.patch_node_status(node, undo)


async def test_gpu_requests_are_scheduled_against_the_nodes_capacity(
    driver: KubernetesDriver, gpu_node: str
) -> None:
    """A Pod asking for 1 of the node's 2 GPUs is scheduled; one asking for 4 stays Pending,
    and wait_ready fails at once with the scheduler's reason, not after its timeout."""
    from asyncdeploy import Container, CreateError, Resources, WorkloadPlan

    def gpu_plan(workload: str, count: int) -> WorkloadPlan:
        server = Container(
            name="server",
            image=IMAGE,
            command=["sleep", "3600"],
            resources=Resources(extended={GPU: count}),
        )
        return WorkloadPlan(
            name=workload,
            labels={k8s_contract.RUN_LABEL: RUN_ID},
            termination_grace_period_seconds=0,
            containers=[server],
        )

    core = CoreV1Api(driver.api.client)
    await driver.apply(gpu_plan(f"gpu-one-{RUN_ID}", 1))
    with anyio.fail_after(60):
        while True:
            pod = await core.read_namespaced_pod(f"gpu-one-{RUN_ID}", driver.namespace)
            conditions = {c.type: c.status for c in pod.status.conditions or []}
            if conditions.get("PodScheduled") == "True":
                break
            await anyio.sleep(0.5)
    assert pod.spec.node_name == gpu_node

    await driver.apply(gpu_plan(f"gpu-four-{RUN_ID}", 4))
    with anyio.fail_after(60):  # the scheduler's verdict, as the Pod's condition carries it
        while True:
            pod = await core.read_namespaced_pod(f"gpu-four-{RUN_ID}", driver.namespace)
            verdicts = {
                c.reason: c.message
                for c in pod.status.conditions or []
                if c.type == "PodScheduled" and c.status == "False"
            }
            if "Unschedulable" in verdicts:
                break
            await anyio.sleep(0.5)
    assert f"Insufficient {GPU}" in verdicts["Unschedulable"]
    started = anyio.current_time()
    with pytest.raises(CreateError, match=f"Insufficient {GPU}") as caught:
        await driver.wait_ready(f"gpu-four-{RUN_ID}", timeout=120)
    assert anyio.current_time() - started < 60, "wait_ready waited for its timeout"
    assert "server" in str(caught.value)
    pod = await core.read_namespaced_pod(f"gpu-four-{RUN_ID}", driver.namespace)
    assert pod.status.phase == "Pending"


@pytest.mark.parametrize("check", k8s_kubelet.KUBELET_CHECKS, ids=lambda c: c.__name__)
async def test_the_kubelet_on_a_real_cluster(
    driver: KubernetesDriver, check: Callable[[k8s_contract.Env], Awaitable[None]]
) -> None:
    await check(k8s_contract.Env(driver, image=IMAGE, ready_timeout=180, run_id=RUN_ID))


# --- the CLI and `verify` on the real cluster ----------------------------------------------


@pytest.fixture
def cli_env(cluster: str, tmp_path: Path) -> dict[str, str]:
    """KUBECONFIG for the CLI: the test kubeconfig with the run's namespace as its default."""
    return {"KUBECONFIG": str(cli_kubeconfig(cluster, tmp_path / "kubeconfig"))}


async def _cli(env: dict[str, str], *args: str) -> tuple[int, str, str]:
    def invoke() -> tuple[int, str, str]:
        result = CliRunner(env=env).invoke(main, ["--driver", "kubernetes", *args])
        return result.exit_code, result.stdout, result.stderr

    return await anyio.to_thread.run_sync(invoke)


async def test_the_cli_on_a_real_cluster(
    driver: KubernetesDriver, cli_env: dict[str, str], tmp_path: Path
) -> None:
    """create --wait, get, logs, exec, delete with its events; and a start that cannot work
    fails create --wait at once with the kubelet's reason (exit 1, no traceback)."""
    name = f"t{RUN_ID}-cli"
    plan = {
        "name": name,
        "labels": {k8s_contract.RUN_LABEL: RUN_ID},
        "termination_grace_period_seconds": 5,
        "containers": [
            {"name": "server", "image": IMAGE, "command": k8s_contract.trap_script(0.5, False)}
        ],
    }
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(plan))
    code, out, err = await _cli(
        cli_env, "create", "-f", str(path), "--wait", "--timeout", "60", "-o", "json"
    )
    assert code == 0, err
    assert json.loads(out)["workload"]["state"] == "running"
    code, out, _ = await _cli(cli_env, "get", name)
    assert code == 0 and f"{name} (kubernetes)" in out
    code, out, _ = await _cli(cli_env, "logs", name)
    assert (code, out) == (0, "started\n")
    code, out, _ = await _cli(cli_env, "delete", name, "-o", "json")
    assert code == 0, out
    lines = [json.loads(line) for line in out.splitlines()]
    assert [e["event"] for e in lines][:3] == ["DrainStarted", "SignalSent", "ContainerExited"]
    assert lines[-1]["containers"][0]["outcome"] == "exited"

    plan["containers"][0]["image"] = IMAGE.rsplit(":", 1)[0] + ":no-such-tag"  # type: ignore[index]
    path.write_text(yaml.safe_dump(plan))
    started = anyio.current_time()
    code, out, err = await _cli(cli_env, "create", "-f", str(path), "--wait", "--timeout", "90")
    assert code == 1, (out, err)
    assert "Traceback" not in err
    assert re.search(r"(ErrImagePull|ImagePullBackOff): server of ", err), err
    assert anyio.current_time() - started < 30
    assert f"removed {name}: it will not start" in err
    with pytest.raises(WorkloadNotFound):
        await driver.get(name)  # nothing left behind


async def test_create_wait_fails_for_a_container_that_exits_after_its_start_on_a_real_cluster(
    driver: KubernetesDriver, cli_env: dict[str, str], tmp_path: Path
) -> None:
    """Without a readiness probe a Pod is Ready the moment its container starts; a server that
    dies a second later must still fail `create --wait`, with its exit code and its output (the
    same rule as on Docker and Podman: running, and still running after the settle time)."""
    name = f"t{RUN_ID}-crash"
    crash = [
        "sh",
        "-c",
        "echo loading the model; sleep 1; echo 'CUDA error: out of memory'; exit 3",
    ]
    plan = {
        "name": name,
        "labels": {k8s_contract.RUN_LABEL: RUN_ID},
        "termination_grace_period_seconds": 1,
        "containers": [{"name": "server", "image": IMAGE, "command": crash}],
    }
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(plan))
    started = anyio.current_time()
    code, out, err = await _cli(
        cli_env, "create", "-f", str(path), "--wait", "--timeout", "90", "-o", "json"
    )
    assert code == 1, (out, err)
    assert anyio.current_time() - started < 45, err
    error = json.loads(out.strip().splitlines()[-1])["error"]
    assert error["container_exit_code"] == 3, error
    assert "CUDA error: out of memory" in error["logs"], error
    with pytest.raises(WorkloadNotFound):
        await driver.get(name)  # removed after the logs were read


VERIFY_MIX = TrafficMix(
    short_per_second=4, long_per_second=1, stream_per_second=2, long_seconds=2, stream_tokens=20
)


def _demo(name: str, **kw: Any) -> WorkloadPlan:
    made = demo_plan(f"t{RUN_ID}-{name}", image=DEMO_IMAGE, **kw)
    return attrs.evolve(made, labels={k8s_contract.RUN_LABEL: RUN_ID})


@pytest.mark.parametrize("mode", ["delete", "replace"])
async def test_verify_on_a_real_cluster_loses_nothing(driver: KubernetesDriver, mode: str) -> None:
    """The demo server behind the kubelet's preStop and SIGTERM: not one request lost."""
    report = await run_verify(
        Deployer(driver),
        _demo(f"v-{mode[:3]}", grace_period_seconds=20),
        VerifyOptions(mode=mode, mix=VERIFY_MIX),  # type: ignore[arg-type]
    )
    assert report.passed, report.text()
    assert report.in_flight_at_drain > 0, "the disruption must happen with requests in flight"
    kinds = [type(e).__name__ for e in report.events]
    assert kinds.index("PreStopStarted") < kinds.index("SignalSent")


async def test_verify_catches_the_negative_control_on_a_real_cluster(
    driver: KubernetesDriver,
) -> None:
    """A server that ignores SIGTERM is killed at the deadline: the verifier sees the losses."""
    bad = _demo("v-bad", grace_period_seconds=4, ignore_sigterm=True)
    report = await run_verify(Deployer(driver), bad, VerifyOptions(mix=VERIFY_MIX))
    assert not report.passed
    assert report.counts()["stream"]["truncated"] >= 1, report.text()
    assert [s.count("killed") for s in report.summaries] == [1]


STOCK_IMAGE = os.environ.get(
    "ASYNCDEPLOY_TEST_K8S_STOCK_IMAGE", "asyncdeploy-test/stock-engine:kube"
)


async def test_the_gate_is_a_native_sidecar_draining_a_stock_server_on_a_real_cluster(
    driver: KubernetesDriver,
) -> None:
    """A server image with no shell, wget or python behind the gate: the gate runs as a native
    sidecar (an init container with restartPolicy Always), the engine's preStop is an httpGet
    to it, and a delete under short and streaming traffic fails nothing. With a Service
    selecting the Pod, the drain stream shows the order the whole sequence turns on: the Pod
    leaves the Service's ready endpoints (TrafficLeft) while the gate's drain (the engine's
    preStop) still runs, the engine is signalled after it, and the gate after the engine."""
    import socket

    from kubernetes_asyncio.client import DiscoveryV1Api

    from asyncdeploy import DrainEvent
    from tests.engines.test_gate import Traffic

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    plan = WorkloadPlan.from_mapping(
        {
            "name": f"t{RUN_ID}-gate",
            "labels": {k8s_contract.RUN_LABEL: RUN_ID},
            "termination_grace_period_seconds": 20,
            "service": {"ports": [{"port": 80, "target_port": 8000}]},
            "containers": [
                {
                    "name": "engine",
                    "image": STOCK_IMAGE,
                    "image_pull_policy": "Never",
                    "args": ["--port", "8001", "--load-seconds", "2", "--token-ms", "50"],
                    "ports": [{"container_port": 8000, "host_port": port, "host_ip": "127.0.0.1"}],
                    "gate": {
                        "upstream": 8001,
                        "ready": {"path": "/health"},
                        "image": GATE_IMAGE,
                        # the hook holds the engine's signal back at least this long
                        "propagation_seconds": 3,
                    },
                }
            ],
        }
    )
    deployer = Deployer(driver)
    await deployer.create(plan)
    await deployer.wait_ready(plan.name, timeout=90)
    pod = await CoreV1Api(driver.api.client).read_namespaced_pod(plan.name, NAMESPACE)
    (gate,) = pod.spec.init_containers
    assert (gate.name, gate.restart_policy, gate.image) == ("engine-gate", "Always", GATE_IMAGE)
    (engine,) = pod.spec.containers
    assert engine.lifecycle.pre_stop.http_get.path.startswith("/-/drain?")
    assert "&token=" in engine.lifecycle.pre_stop.http_get.path
    assert engine.lifecycle.pre_stop.http_get.port == 9901  # the admin port, no Service's
    (status,) = pod.status.init_container_statuses
    assert status.ready and status.started  # running beside the engine, not run to completion

    uid = pod.metadata.uid

    async def ready_endpoint() -> bool:
        slices = await DiscoveryV1Api(driver.api.client).list_namespaced_endpoint_slice(
            NAMESPACE, label_selector=f"kubernetes.io/service-name={plan.name}"
        )
        return any(
            e.target_ref is not None and e.target_ref.uid == uid and e.conditions.ready
            for s in slices.items
            for e in s.endpoints or []
        )

    await until(ready_endpoint, timeout=60, interval=0.2)  # the controller lists it as ready

    traffic = Traffic(port)
    events: list[DrainEvent] = []
    with anyio.fail_after(120):
        async with anyio.create_task_group() as tg:
            for kind in ["short"] * 4 + ["stream"] * 4:
                tg.start_soon(traffic.loop, kind)
            await anyio.sleep(1.0)
            async with deployer.terminate(plan.name) as stream:
                events = [e async for e in stream]
    assert traffic.failures == [], (traffic.failures, traffic.counts)
    assert traffic.counts["ok"] >= 8, traffic.counts
    summary = events[-1].summary  # type: ignore[union-attr]
    assert all(c.outcome != "killed" for c in summary.containers), summary
    assert summary.ok, summary

    def at(kind: str, container: str | None = None) -> tuple[int, float]:
        [(index, elapsed)] = [
            (i, e.elapsed)
            for i, e in enumerate(events)
            if type(e).__name__ == kind and getattr(e, "container", None) in (container, None)
        ]
        return index, elapsed

    shown = [(type(e).__name__, getattr(e, "container", ""), round(e.elapsed, 2)) for e in events]
    left = at("TrafficLeft")
    [traffic_left] = [e for e in events if isinstance(e, TrafficLeft)]
    assert traffic_left.services == (plan.name,), shown
    assert "TrafficStillRouted" not in [k for k, _, _ in shown], shown
    # The engine's stop begins with its preStop, the gate's drain; the kubelet records no
    # success of an httpGet hook, so the end of the hook and the engine's signal (it exits at
    # once on SIGTERM) are known when its exit is seen: the signal came at that moment or
    # before, and not before the hook's propagation window had closed: at its 3 s maximum, or
    # early once no request came for the kit's 2 s quiet period (counted from the drain's
    # start), so never before 2 s. The Pod left the endpoints before that, so before the signal.
    at("PreStopStarted", "engine")
    hook_done = at("PreStopFinished", "engine")
    engine_signalled = at("SignalSent", "engine")
    engine_exited = at("ContainerExited", "engine")
    gate_signalled = at("SignalSent", "engine-gate")
    gate_exited = at("ContainerExited", "engine-gate")
    assert left < hook_done < engine_signalled < engine_exited, shown
    assert left[1] < 2.0 <= engine_signalled[1], shown
    # the native sidecar's order: the gate is signalled only once the engine has exited
    assert engine_exited < gate_signalled < gate_exited, shown
    assert engine_exited[1] <= gate_signalled[1] <= gate_exited[1], shown


# --- signals and --wait through a real CLI process (issue 16 items 1(a) and 14) --------------


async def _start_cli(env: dict[str, str], *args: str) -> CLIProcess:
    process = await anyio.open_process(
        [sys.executable, "-m", "asyncdeploy", "--driver", "kubernetes", *args],
        env={**os.environ, **env},
        start_new_session=True,  # its own process group: the signal reaches it alone
    )
    assert process.stdout is not None
    return CLIProcess(process, BufferedByteReceiveStream(process.stdout))


def _trap_plan(path: Path, name: str, drain: float, version: str, **extra: Any) -> Path:
    plan = {
        "name": name,
        "labels": {k8s_contract.RUN_LABEL: RUN_ID},
        "termination_grace_period_seconds": 20,
        "containers": [
            {
                "name": "server",
                "image": IMAGE,
                "command": k8s_contract.trap_script(drain, False),
                "env": {"VERSION": version},
            }
        ],
        **extra,
    }
    path.write_text(yaml.safe_dump(plan))
    return path


async def test_a_ctrl_c_during_a_replacing_create_lets_the_old_pod_drain_on_a_real_cluster(
    driver: KubernetesDriver, cli_env: dict[str, str], tmp_path: Path
) -> None:
    """A changed plan replaces the Pod as ``replace`` does (issue 24 item 5): the new Pod ready
    first, then the old one drained; a Ctrl-C during that drain lets it run its whole 3 s (the
    create's cancellation once cut it and left at once) and the create ends as it would have
    (exit 0): the new Pod serves."""
    name = f"t{RUN_ID}-crsig"
    old = _trap_plan(tmp_path / "old.yaml", name, 3, "1")
    code, _, err = await _cli(cli_env, "create", "-f", str(old), "--wait", "--timeout", "60")
    assert code == 0, err
    cli = await _start_cli(
        cli_env, "create", "-f", str(_trap_plan(tmp_path / "new.yaml", name, 3, "2")), "-o", "json"
    )
    await cli.next_event("SignalSent", timeout=60)
    started = anyio.current_time()
    await anyio.sleep(0.5)
    cli.send(signal.SIGINT)
    code, stderr = await cli.finish()

    assert code == 0, stderr
    assert anyio.current_time() - started >= 2.5, stderr  # the old Pod's whole 3 s drain
    [finished] = [line for line in cli.lines if line.get("event") == "DrainFinished"]
    assert [(c["name"], c["outcome"]) for c in finished["containers"]] == [("server", "exited")]
    assert "the drain goes on until its deadline" in stderr
    with pytest.raises(WorkloadNotFound):
        await driver.get(name)  # the old Pod
    assert (await Deployer(driver).get(name)).name.startswith(f"{name}-"), "the new one serves"


async def test_a_failed_wait_leaves_an_unchanged_pod_running_on_a_real_cluster(
    driver: KubernetesDriver, cli_env: dict[str, str], tmp_path: Path
) -> None:
    """A sidecar that exits: create --wait of the unchanged plan fails (exit 1) and deletes
    nothing (before: everything was deleted at grace 0)."""
    name = f"t{RUN_ID}-waitkeep"
    sidecar = {"name": "sidecar", "image": IMAGE, "command": ["sh", "-c", "sleep 1; exit 1"]}
    path = tmp_path / "plan.yaml"
    plan = yaml.safe_load(_trap_plan(path, name, 0.5, "1").read_text())
    plan["containers"].append(sidecar)
    path.write_text(yaml.safe_dump(plan))
    code, _, err = await _cli(cli_env, "create", "-f", str(path))
    assert code == 0, err

    async def sidecar_ended() -> bool:
        status = await driver.get(name)
        return any(c.name == "sidecar" and c.state == "exited" for c in status.containers)

    await until(sidecar_ended, timeout=60, interval=0.5)
    code, _, err = await _cli(cli_env, "create", "-f", str(path), "--wait", "--timeout", "30")
    assert code == 1, err
    assert "left as it was" in err
    status = await driver.get(name)  # still there
    assert any(c.name == "server" and c.state == "running" for c in status.containers), status
