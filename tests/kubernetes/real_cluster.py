"""What the real-cluster suites share: the cluster's settings, a scratch namespace, a driver that
cleans up after itself, and a kubeconfig for CLI processes.

``ASYNCDEPLOY_TEST_KUBECONFIG`` names the cluster (``ci/start-kube.sh`` starts one); without it
the suites skip with a one-line reason, or fail when ``ASYNCDEPLOY_REQUIRE_KUBERNETES=1``.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import k8s_contract
import pytest
import yaml
from kubernetes_asyncio.client import CoreV1Api
from kubernetes_asyncio.client.exceptions import ApiException

from asyncdeploy import Selector, WorkloadNotFound
from asyncdeploy.drivers.kubernetes import KubernetesDriver

KUBECONFIG = os.environ.get("ASYNCDEPLOY_TEST_KUBECONFIG", "")
IMAGE = os.environ.get("ASYNCDEPLOY_TEST_K8S_IMAGE", "busybox:1.36")
DEMO_IMAGE = os.environ.get("ASYNCDEPLOY_TEST_K8S_DEMO_IMAGE", "localhost/asyncdeploy/demo:kube")
GATE_IMAGE = os.environ.get("ASYNCDEPLOY_TEST_K8S_GATE_IMAGE", "localhost/asyncdeploy/gate:kube")
RUN_ID = secrets.token_hex(3)


def required() -> bool:
    return os.environ.get("ASYNCDEPLOY_REQUIRE_KUBERNETES") == "1" or "kubernetes" in (
        os.environ.get("ASYNCDEPLOY_REQUIRE_ENGINES", "").split(",")
    )


def skip_without_cluster() -> None:
    if not KUBECONFIG:
        reason = (
            "ASYNCDEPLOY_TEST_KUBECONFIG is not set: no real cluster (ci/start-kube.sh starts "
            "one from ASYNCDEPLOY_KUBE_ASSETS or ../shared/kubernetes/bin)"
        )
        if required():
            pytest.fail(reason)
        pytest.skip(reason)


@asynccontextmanager
async def scratch_namespace(namespace: str) -> AsyncIterator[str]:
    """``namespace`` on the real cluster, deleted (with what is left in it) afterwards."""
    skip_without_cluster()
    admin = await KubernetesDriver.connect(kubeconfig=KUBECONFIG, namespace=namespace)
    core = CoreV1Api(admin.api.client)
    try:
        await core.create_namespace(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}  # type: ignore[arg-type]
        )
        await _default_service_account(core, namespace)
        yield namespace
    finally:
        with anyio.CancelScope(shield=True):
            try:
                await core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
                await core.delete_namespace(namespace)
            except ApiException:
                pass
            await admin.aclose()


async def _default_service_account(core: CoreV1Api, namespace: str) -> None:
    """Pods are refused until the namespace's ``default`` ServiceAccount exists."""
    with anyio.move_on_after(5):
        while True:
            try:
                await core.read_namespaced_service_account("default", namespace)
                return
            except ApiException as exc:
                if exc.status != 404:
                    raise
            await anyio.sleep(0.2)
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}}
    try:
        await core.create_namespaced_service_account(namespace, account)  # type: ignore[arg-type]
    except ApiException as exc:
        if exc.status != 409:
            raise


@asynccontextmanager
async def cleaning_driver(namespace: str) -> AsyncIterator[KubernetesDriver]:
    """A driver on ``namespace`` that kills what the run left there when the test ends."""
    opened = await KubernetesDriver.connect(kubeconfig=KUBECONFIG, namespace=namespace)
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


def namespace_fixtures(namespace: str) -> tuple[Any, Any]:
    """A test module's ``cluster`` (its scratch namespace, deleted with what is left in it at
    the module's end) and ``driver`` (a cleaning driver on it) fixtures:
    ``cluster, driver = namespace_fixtures(NAMESPACE)``.

    Module, not session: while an async fixture lives its event loop runs, and the anyio.run of
    a later test (the CLI under CliRunner) would fail with "Already running asyncio in this
    thread"."""

    @pytest.fixture(scope="module")
    async def cluster() -> AsyncIterator[str]:
        async with scratch_namespace(namespace) as made:
            yield made

    @pytest.fixture
    async def driver(cluster: str) -> AsyncIterator[KubernetesDriver]:
        async with cleaning_driver(cluster) as opened:
            yield opened

    return cluster, driver


def cli_kubeconfig(namespace: str, path: Path) -> Path:
    """The test kubeconfig with ``namespace`` as every context's default, written to ``path``."""
    config = yaml.safe_load(Path(KUBECONFIG).read_text())
    for context in config["contexts"]:
        context["context"]["namespace"] = namespace
    path.write_text(yaml.safe_dump(config))
    return path
