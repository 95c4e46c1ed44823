"""A stock gRPC server behind the drain gate on the real cluster (issue 30 item 5): the gate a
native sidecar speaking h2c to the engine on the Pod's loopback, grpcio clients (unary and
server-streaming calls, each calling until its first refusal) on the loopback host port the
plan publishes, while the Pod is deleted or replaced. No call is cut: each ends OK and whole, or
is refused before any work (the gate's GOAWAY, then the closed port). The same server
published directly (the negative control): the kubelet's SIGTERM cuts calls.

The image is the node's copy of ``asyncdeploy-test/grpc-engine`` (``ci/build-grpc-image.sh``,
imported by ``ci/start-kube.sh``, which prints ``ASYNCDEPLOY_TEST_K8S_GRPC_IMAGE``); the calls
and their outcomes are ``tests/engines/test_gate_grpc.py``'s, shared with Docker and Podman.
"""

from __future__ import annotations

import logging
import os

import attrs
import k8s_contract
import pytest
from real_cluster import GATE_IMAGE, RUN_ID, namespace_fixtures

from asyncdeploy import Deployer, WorkloadPlan
from asyncdeploy.drivers.kubernetes import KubernetesDriver
from asyncdeploy.verify._ports import free_port
from tests.engines.test_gate_grpc import during_calls, grpc_plan

NAMESPACE = f"asyncdeploy-test-{RUN_ID}-grpc"
GRPC_IMAGE = os.environ.get("ASYNCDEPLOY_TEST_K8S_GRPC_IMAGE", "")

pytestmark = pytest.mark.anyio
logger = logging.getLogger(__name__)

cluster, driver = namespace_fixtures(NAMESPACE)


def _plan(tag: str, *, gated: bool) -> tuple[WorkloadPlan, int]:
    if not GRPC_IMAGE:
        pytest.fail(
            "ASYNCDEPLOY_TEST_K8S_GRPC_IMAGE is not set: ci/start-kube.sh imports "
            "asyncdeploy-test/grpc-engine (ci/build-grpc-image.sh) into the nodes"
        )
    port = free_port()
    plan = grpc_plan(
        f"t{RUN_ID}-{tag}",
        port,
        gated=gated,
        image=GRPC_IMAGE,
        gate_image=GATE_IMAGE,
        labels={k8s_contract.RUN_LABEL: RUN_ID},
        host_ip="127.0.0.1",
        image_pull_policy="Never",
    )
    return plan, port


@pytest.mark.parametrize("mode", ["delete", "replace"])
async def test_grpc_calls_in_flight_end_whole_through_a_pod_delete_or_replace_behind_the_gate(
    driver: KubernetesDriver, mode: str
) -> None:
    """The kubelet runs the gate's drain (the engine's preStop httpGet: the window, then
    GOAWAY and refusals), then signals the engine once nothing is in flight."""
    plan, port = _plan(f"grpc{mode[0]}", gated=True)
    deployer = Deployer(driver)
    await deployer.create(plan)
    await deployer.wait_ready(plan.name, timeout=120)

    async def disrupt() -> None:
        if mode == "delete":
            await deployer.delete(plan.name)
            return
        # the same plan, another version: its host port held, the old Pod drains first
        engine = plan.containers[0]
        args = (*(engine.args or ()), "--token-ms", "99")
        await deployer.create(attrs.evolve(plan, containers=[attrs.evolve(engine, args=args)]))

    outcomes = await during_calls(port, disrupt)
    logger.info(f"kubernetes gRPC behind the gate, {mode}: {outcomes}")
    cut = [outcome for outcome in outcomes if outcome not in ("ok", "refused")]
    assert cut == [], outcomes
    assert outcomes.count("ok") >= 8, outcomes


async def test_without_the_gate_a_pod_delete_cuts_grpc_calls(driver: KubernetesDriver) -> None:
    plan, port = _plan("grpcn", gated=False)
    deployer = Deployer(driver)
    await deployer.create(plan)
    await deployer.wait_ready(plan.name, timeout=120)
    outcomes = await during_calls(port, lambda: deployer.delete(plan.name))
    logger.info(f"kubernetes gRPC without the gate: {outcomes}")
    assert any(outcome not in ("ok", "refused") for outcome in outcomes), outcomes
