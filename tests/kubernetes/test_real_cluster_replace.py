"""Replace strategies on the real cluster (issue 17 item 2): a GPU count the node cannot hold
twice. The node is patched to advertise 2 ``nvidia.com/gpu`` (the GPU test's fixture); a plan
asking for 2 fits once, so a surge's new Pod stays Pending with ``Insufficient nvidia.com/gpu``.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import anyio
import attrs
import k8s_contract
import pytest
import yaml
from kubernetes_asyncio.client import CoreV1Api
from test_real_cluster import (  # noqa: F401
    GPU,
    IMAGE,
    RUN_ID,
    cli_env,
    cluster,
    driver,
    gpu_node,
)

from asyncdeploy import Checks, Container, CreateError, Deployer, Probe, Resources, WorkloadPlan
from asyncdeploy.drivers.kubernetes import KubernetesDriver
from asyncdeploy.labels import LABEL_INSTANCE_OF
from asyncdeploy.plan import plan_to_mapping
from asyncdeploy.replace._lock import lock_key
from asyncdeploy.replace.events import ReplaceDowntime, ReplaceStrategy
from tests.polling import until

pytestmark = [pytest.mark.anyio, pytest.mark.engine]


def gpu_plan(workload: str, version: str) -> WorkloadPlan:
    server = Container(
        name="server",
        image=IMAGE,
        command=["sh", "-c", "trap 'exit 0' TERM; while :; do sleep 1 & wait $!; done"],
        env={"VERSION": version},
        resources=Resources(extended={GPU: 2}),
    )
    return WorkloadPlan(
        name=workload,
        labels={k8s_contract.RUN_LABEL: RUN_ID},
        termination_grace_period_seconds=2,
        containers=[server],
    )


async def serving(deployer: Deployer, app: str) -> set[str]:
    names = {w.name for w in await deployer.list({k8s_contract.RUN_LABEL: RUN_ID})}
    return ({app} & names) | {w.name for w in await deployer.list({LABEL_INSTANCE_OF: app})}


async def test_auto_falls_back_to_recreate_when_the_gpus_cannot_be_held_twice(
    driver: KubernetesDriver,  # noqa: F811
    gpu_node: str,  # noqa: F811
) -> None:
    deployer = Deployer(driver)
    app = f"gpu-rep-{RUN_ID}"
    await deployer.create(gpu_plan(app, "v1"))
    await deployer.wait_ready(app, timeout=120)
    events: list[object] = []

    result = await deployer.replace(gpu_plan(app, "v2"), on_event=events.append, ready_timeout=120)
    said = [(e.strategy, e.reason) for e in events if isinstance(e, ReplaceStrategy)]
    assert [s for s, _ in said] == ["surge", "recreate"], said
    assert f"Insufficient {GPU}" in said[1][1]
    assert result.strategy == "recreate" and [s.workload for s in result.drained] == [app]
    assert result.downtime is not None and result.downtime > 0
    assert any(isinstance(e, ReplaceDowntime) for e in events)
    assert await serving(deployer, app) == {result.new.name}
    assert (await deployer.get(app)).name == result.new.name, "the plan's name finds it"


async def test_surge_that_cannot_be_scheduled_fails_clearly_and_keeps_the_old(
    driver: KubernetesDriver,  # noqa: F811
    gpu_node: str,  # noqa: F811
) -> None:
    deployer = Deployer(driver)
    app = f"gpu-surge-{RUN_ID}"
    await deployer.create(gpu_plan(app, "v1"))
    before = await deployer.wait_ready(app, timeout=120)
    with pytest.raises(CreateError, match=f"Insufficient {GPU}"):
        await deployer.replace(gpu_plan(app, "v2"), strategy="surge", ready_timeout=60)
    assert await serving(deployer, app) == {app}, "the new Pod was removed"
    assert (await deployer.get(app)).containers == before.containers


async def test_recreate_drains_first_and_reports_the_downtime(
    driver: KubernetesDriver,  # noqa: F811
    gpu_node: str,  # noqa: F811
) -> None:
    deployer = Deployer(driver)
    app = f"gpu-recr-{RUN_ID}"
    await deployer.create(gpu_plan(app, "v1"))
    await deployer.wait_ready(app, timeout=120)
    result = await deployer.replace(gpu_plan(app, "v2"), strategy="recreate", ready_timeout=120)
    assert result.strategy == "recreate" and result.downtime is not None
    assert [s.workload for s in result.drained] == [app] and not result.drained[0].errors
    assert await serving(deployer, app) == {result.new.name}


async def test_a_killed_replace_leaves_a_lock_the_next_replace_takes_over(
    driver: KubernetesDriver,  # noqa: F811
    cli_env: dict[str, str],  # noqa: F811
    tmp_path: Path,
) -> None:
    """``kill -9`` of a replace while its new Pod is waited for: its lock (a ConfigMap naming a
    dead owner) stops nobody; the next replace drains the old Pod and the killed one's."""
    deployer = Deployer(driver)
    app = f"lock-{RUN_ID}"
    slow = Container(
        name="server",
        image=IMAGE,
        command=["sh", "-c", "trap 'exit 0' TERM; while :; do sleep 1 & wait $!; done"],
        checks=Checks(readiness=Probe(exec=["test", "-f", "/never"], period_seconds=1)),
    )
    first = WorkloadPlan(
        name=app,
        labels={k8s_contract.RUN_LABEL: RUN_ID},
        termination_grace_period_seconds=2,
        containers=[attrs.evolve(slow, checks=Checks())],
    )
    await deployer.create(first)
    await deployer.wait_ready(app, timeout=120)
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(plan_to_mapping(attrs.evolve(first, containers=[slow]))))
    process = await anyio.open_process(
        [sys.executable, "-m", "asyncdeploy", "--driver", "kubernetes", "replace", "-f", str(path)],
        env={**os.environ, **cli_env},
        start_new_session=True,
    )
    await until(lambda: deployer.list({LABEL_INSTANCE_OF: app}), timeout=120, interval=0.5)
    await anyio.sleep(2)
    os.killpg(process.pid, signal.SIGKILL)
    await process.wait()
    core = CoreV1Api(driver.api.client)
    await core.read_namespaced_config_map(lock_key(app), driver.namespace)  # left behind

    result = await deployer.replace(first, ready_timeout=120)
    drained = {s.workload for s in result.drained}
    assert app in drained and len(drained) == 2, "the old Pod and the killed replace's new one"
    assert await serving(deployer, app) == {result.new.name}
