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
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import attrs
import k8s_contract
import k8s_kubelet
import pytest
import yaml
from click.testing import CliRunner
from kubernetes_asyncio.client import CoreV1Api
from kubernetes_asyncio.client.exceptions import ApiException

from asyncdeploy import Deployer, Selector, WorkloadNotFound, WorkloadPlan
from asyncdeploy.cli import main
from asyncdeploy.drivers.kubernetes import KubernetesDriver
from asyncdeploy.verify import TrafficMix, VerifyOptions, demo_plan, run_verify

KUBECONFIG = os.environ.get("ASYNCDEPLOY_TEST_KUBECONFIG", "")
IMAGE = os.environ.get("ASYNCDEPLOY_TEST_K8S_IMAGE", "busybox:1.36")
DEMO_IMAGE = os.environ.get("ASYNCDEPLOY_TEST_K8S_DEMO_IMAGE", "asyncdeploy-demo/server:kube")
RUN_ID = secrets.token_hex(3)
NAMESPACE = f"asyncdeploy-test-{RUN_ID}"

pytestmark = pytest.mark.anyio


def _required() -> bool:
    return os.environ.get("ASYNCDEPLOY_REQUIRE_KUBERNETES") == "1" or "kubernetes" in (
        os.environ.get("ASYNCDEPLOY_REQUIRE_ENGINES", "").split(",")
    )


# Module, not session: while an async fixture lives its event loop runs, and the anyio.run of a
# later test (the CLI under CliRunner) would fail with "Already running asyncio in this thread".
@pytest.fixture(scope="module")
async def cluster() -> AsyncIterator[str]:
    """The run's namespace on the real cluster, deleted (with what is left in it) afterwards."""
    if not KUBECONFIG:
        reason = (
            "ASYNCDEPLOY_TEST_KUBECONFIG is not set: no real cluster (ci/start-kube.sh starts "
            "one from ASYNCDEPLOY_KUBE_ASSETS or ../shared/kubernetes/bin)"
        )
        if _required():
            pytest.fail(reason)
        pytest.skip(reason)
    admin = await KubernetesDriver.connect(kubeconfig=KUBECONFIG, namespace=NAMESPACE)
    core = CoreV1Api(admin.api.client)
    try:
        await core.create_namespace(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}  # type: ignore[arg-type]
        )
        await _default_service_account(core)
        yield NAMESPACE
    finally:
        with anyio.CancelScope(shield=True):
            try:
                await core.delete_collection_namespaced_pod(NAMESPACE, grace_period_seconds=0)
                await core.delete_namespace(NAMESPACE)
            except ApiException:
                pass
            await admin.aclose()


async def _default_service_account(core: CoreV1Api) -> None:
    """Pods are refused until the namespace's ``default`` ServiceAccount exists."""
    with anyio.move_on_after(5):
        while True:
            try:
                await core.read_namespaced_service_account("default", NAMESPACE)
                return
            except ApiException as exc:
                if exc.status != 404:
                    raise
            await anyio.sleep(0.2)
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}}
    try:
        await core.create_namespaced_service_account(NAMESPACE, account)  # type: ignore[arg-type]
    except ApiException as exc:
        if exc.status != 409:
            raise


@pytest.fixture
async def driver(cluster: str) -> AsyncIterator[KubernetesDriver]:
    opened = await KubernetesDriver.connect(kubeconfig=KUBECONFIG, namespace=cluster)
    try:
        yield opened
    finally:
        with anyio.CancelScope(shield=True):
            try:
                left = await opened.find_matching(
                    Selector.from_labels({k8s_contract.RUN_LABEL: RUN_ID})
                )
                await opened.drain(left, grace_period_seconds=0, emit=lambda _: None)
            except WorkloadNotFound:
                pass  # gone in the meantime
            finally:
                await opened.aclose()


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
    config = yaml.safe_load(Path(KUBECONFIG).read_text())
    for context in config["contexts"]:
        context["context"]["namespace"] = cluster
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return {"KUBECONFIG": str(path)}


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
