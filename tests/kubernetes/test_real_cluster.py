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

import os
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable

import anyio
import k8s_contract
import k8s_kubelet
import pytest
from kubernetes_asyncio.client import CoreV1Api
from kubernetes_asyncio.client.exceptions import ApiException

from asyncdeploy import WorkloadNotFound
from asyncdeploy.drivers.kubernetes import KubernetesDriver

KUBECONFIG = os.environ.get("ASYNCDEPLOY_TEST_KUBECONFIG", "")
IMAGE = os.environ.get("ASYNCDEPLOY_TEST_K8S_IMAGE", "busybox:1.36")
RUN_ID = secrets.token_hex(3)
NAMESPACE = f"asyncdeploy-test-{RUN_ID}"

pytestmark = [pytest.mark.anyio, pytest.mark.engine]


def _required() -> bool:
    return os.environ.get("ASYNCDEPLOY_REQUIRE_KUBERNETES") == "1" or "kubernetes" in (
        os.environ.get("ASYNCDEPLOY_REQUIRE_ENGINES", "").split(",")
    )


@pytest.fixture(scope="session")
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
                left = [s.name for s in await opened.list({k8s_contract.RUN_LABEL: RUN_ID})]
                if left:
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


@pytest.mark.parametrize("check", k8s_kubelet.KUBELET_CHECKS, ids=lambda c: c.__name__)
async def test_the_kubelet_on_a_real_cluster(
    driver: KubernetesDriver, check: Callable[[k8s_contract.Env], Awaitable[None]]
) -> None:
    await check(k8s_contract.Env(driver, image=IMAGE, ready_timeout=180, run_id=RUN_ID))
