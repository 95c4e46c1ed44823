"""A real LLM server behind the drain gate on the real cluster (issue 22 item 5): llama.cpp's
``llama-server`` in two gated Pods (the gate a native sidecar, the engine on the Pod's loopback,
the model a read-only hostPath), behind a stock HAProxy (no retry) that reaches each Pod at the
loopback host port its plan publishes, as verify's HAProxy does; OpenAI-style keep-alive
clients. One Pod deleted or replaced loses nothing; the same engine without its gate loses
requests. The server, the clients and the run are ``tests/engines/llama.py``'s and
``chat_clients.py``'s, shared with Docker and Podman.

The image is the node's copy of ``asyncdeploy-test/llama-server`` (``ci/start-kube.sh`` imports
it when Docker has it and prints ``ASYNCDEPLOY_TEST_K8S_LLAMA_IMAGE``); the model is read from
this host's cache, so the node must be this host (the project's cluster is).
"""

from __future__ import annotations

import os

import k8s_contract
import pytest
from real_cluster import GATE_IMAGE, RUN_ID, namespace_fixtures

from asyncdeploy import Deployer, WorkloadPlan
from asyncdeploy.drivers.kubernetes import KubernetesDriver
from asyncdeploy.verify._ports import free_port
from tests.engines.chat_clients import assert_nothing_lost, serve_and_disrupt
from tests.engines.llama import llama_plan, require_model, unavailable

NAMESPACE = f"asyncdeploy-test-{RUN_ID}-llama"
LLAMA_IMAGE = os.environ.get("ASYNCDEPLOY_TEST_K8S_LLAMA_IMAGE", "")

pytestmark = pytest.mark.anyio

cluster, driver = namespace_fixtures(NAMESPACE)


def _plans(tag: str, *, gated: bool, count: int) -> list[tuple[WorkloadPlan, int]]:
    if not LLAMA_IMAGE:
        unavailable(
            "ASYNCDEPLOY_TEST_K8S_LLAMA_IMAGE is not set: no llama-server image in the node"
        )
    require_model()
    made = []
    for letter in "abn"[:count]:
        port = free_port()
        plan = llama_plan(
            f"t{RUN_ID}-{tag}-{letter}",
            gated=gated,
            host_port=port,
            labels={k8s_contract.RUN_LABEL: RUN_ID},
            image=LLAMA_IMAGE,
            gate_image=GATE_IMAGE,
            engine_extra={"image_pull_policy": "Never"},
        )
        made.append((plan, port))
    return made


@pytest.mark.parametrize("mode", ["delete", "replace"])
async def test_keep_alive_chat_clients_lose_nothing_when_a_gated_llama_server_pod_goes(
    driver: KubernetesDriver, mode: str
) -> None:
    """The Docker/Podman test on the cluster: the kubelet runs the gate's drain (the engine's
    preStop httpGet) and signals llama-server after it; HAProxy takes the Pod out by its
    failing /ready. Fails on main's gate with ``502 engine unreachable`` (the reused upstream
    connection llama-server closed)."""
    *plans, successor = _plans(f"ll{mode[0]}", gated=True, count=3)
    served = await serve_and_disrupt(
        Deployer(driver), plans, successor if mode == "replace" else None, check_path="/ready"
    )
    assert_nothing_lost(served)


async def test_without_the_gate_a_llama_server_pod_delete_loses_requests(
    driver: KubernetesDriver,
) -> None:
    """The control: llama-server published directly from its Pod, readiness on its own /health,
    the same clients and delete: the kubelet's SIGTERM stops it generating at once, and what is
    in flight or still sent to it is lost."""
    plans = _plans("lln", gated=False, count=2)
    served = await serve_and_disrupt(Deployer(driver), plans, None, check_path="/health")
    lost = served.clients.failures()
    assert any(e.server == served.drained and e.ended > served.drain_started for e in lost), (
        served.report()
    )


@pytest.mark.parametrize("mode", ["delete", "replace"])
async def test_the_openai_sdk_loses_no_call_when_a_gated_llama_server_pod_goes(
    driver: KubernetesDriver, mode: str
) -> None:
    """Issue 30 item 8 on the cluster: the OpenAI Python SDK (``AsyncOpenAI``, its default
    keep-alive pool, ``max_retries=0``) through a stock HAProxy at its defaults to two gated
    Pods, one deleted (or replaced): 0 failed calls, every stream whole."""
    *plans, successor = _plans(f"lo{mode[0]}", gated=True, count=3)
    served = await serve_and_disrupt(
        Deployer(driver),
        plans,
        successor if mode == "replace" else None,
        check_path="/ready",
        sdk=True,
    )
    assert_nothing_lost(served)


async def test_without_the_gate_the_openai_sdk_loses_calls_when_a_pod_goes(
    driver: KubernetesDriver,
) -> None:
    """The control: the same SDK calls and delete, llama-server published directly."""
    plans = _plans("lon", gated=False, count=2)
    served = await serve_and_disrupt(Deployer(driver), plans, None, check_path="/health", sdk=True)
    lost = served.clients.failures()
    assert any(e.server == served.drained and e.ended > served.drain_started for e in lost), (
        served.report()
    )
