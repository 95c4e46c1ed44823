"""Day two on the real cluster (issue 24 items 2 and 3): a changed ``service:`` is applied to the
plan's Service (in place: its name and ClusterIP kept), by ``create`` and by ``replace``; a
recreate whose new Pod never becomes ready brings the old plan back and leaves the Service as
it was (same uid, same ClusterIP).
"""

from __future__ import annotations

from typing import Any

import k8s_contract
import pytest
from kubernetes_asyncio.client import CoreV1Api
from real_cluster import IMAGE, RUN_ID, namespace_fixtures

from asyncdeploy import Checks, Container, Deployer, Probe, ReplaceFailed, WorkloadPlan
from asyncdeploy.drivers.kubernetes import KubernetesDriver
from asyncdeploy.plan import Service, ServicePort, plan_digest

NAMESPACE = f"asyncdeploy-test-{RUN_ID}-day2"

pytestmark = [pytest.mark.anyio, pytest.mark.engine]

cluster, driver = namespace_fixtures(NAMESPACE)

STAY = "trap 'exit 0' TERM; while :; do sleep 1 & wait $!; done"


def web(app: str, version: str, port: int, target: int, *, ready: bool = True) -> WorkloadPlan:
    probe = Probe(exec=["test", "-f", "/tmp/ready" if ready else "/never"], period_seconds=1)
    server = Container(
        name="server",
        image=IMAGE,
        command=["sh", "-c", f"touch /tmp/ready; {STAY}"],
        env={"VERSION": version},
        checks=Checks(readiness=probe),
    )
    return WorkloadPlan(
        name=app,
        labels={k8s_contract.RUN_LABEL: RUN_ID},
        termination_grace_period_seconds=2,
        containers=[server],
        service=Service(ports=(ServicePort(port=port, target_port=target),)),
    )


async def service_of(driver: KubernetesDriver, app: str) -> Any:
    return await CoreV1Api(driver.api.client).read_namespaced_service(app, driver.namespace)


def ports(service: Any) -> list[tuple[int, int]]:
    return [(p.port, int(p.target_port)) for p in service.spec.ports]


async def test_a_changed_service_is_applied_by_create_and_by_replace(
    driver: KubernetesDriver,
) -> None:
    deployer = Deployer(driver)
    app = f"svc-{RUN_ID}"
    await deployer.create(web(app, "v1", 80, 8080))
    await deployer.wait_ready(app, timeout=120)
    before = await service_of(driver, app)
    assert ports(before) == [(80, 8080)]

    await deployer.create(web(app, "v2", 81, 8000))
    await deployer.wait_ready(app, timeout=120)
    after_create = await service_of(driver, app)
    assert ports(after_create) == [(81, 8000)], "create applied the plan's new ports"
    assert after_create.spec.cluster_ip == before.spec.cluster_ip, "updated in place"

    result = await deployer.replace(web(app, "v3", 82, 9000), ready_timeout=120)
    assert result.strategy == "surge"
    after_replace = await service_of(driver, app)
    assert ports(after_replace) == [(82, 9000)], "replace applied them too"
    assert after_replace.metadata.uid == before.metadata.uid


async def test_a_failed_recreate_brings_the_old_pod_back_behind_the_same_service(
    driver: KubernetesDriver,
) -> None:
    deployer = Deployer(driver)
    app = f"rec-{RUN_ID}"
    v1 = web(app, "v1", 80, 8080)
    await deployer.create(v1)
    await deployer.wait_ready(app, timeout=120)
    before = await service_of(driver, app)

    with pytest.raises(ReplaceFailed, match="the previous plan serves again") as failed:
        await deployer.replace(
            web(app, "v2", 80, 8080, ready=False),
            strategy="recreate",
            ready_timeout=8,
        )
    assert failed.value.serving == (app,)
    status = await deployer.get(app)
    assert status.name == app and status.plan_digest == plan_digest(v1), "the old plan serves"
    after = await service_of(driver, app)
    assert (after.metadata.uid, after.spec.cluster_ip) == (
        before.metadata.uid,
        before.spec.cluster_ip,
    ), "the Service was never removed"
