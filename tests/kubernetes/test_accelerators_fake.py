"""Extended resources on Kubernetes: the Pod manifest, and the fake API server storing it."""

from __future__ import annotations

from datetime import UTC, datetime

import fake_pods as k8s
import pytest
from fake_apiserver import NAMESPACE, FakeApiServer

from asyncdeploy import Container, PlanError, Resources, WorkloadPlan
from asyncdeploy.drivers.kubernetes import KubernetesDriver
from asyncdeploy.drivers.kubernetes._manifest import pod_manifest

PODS = f"/api/v1/namespaces/{NAMESPACE}/pods"


def gpu_plan(resources: Resources) -> WorkloadPlan:
    return WorkloadPlan(
        name="llm",
        containers=[Container(name="server", image="busybox:1.36", resources=resources)],
    )


def test_extended_resources_go_into_limits_and_requests() -> None:
    """``nvidia.com/gpu: 1`` sits beside cpu and memory in limits, requests equal to them."""
    resources = Resources(cpu=4, memory="16Gi", extended={"nvidia.com/gpu": 1, "x.io/fpga": 0})
    [server] = pod_manifest(gpu_plan(resources), namespace="ns")["spec"]["containers"]
    wanted = {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1", "x.io/fpga": "0"}
    assert server["resources"] == {"limits": wanted, "requests": wanted}


def test_a_gpu_pod_keeps_guaranteed_qos() -> None:
    """Extended resources do not count for QoS: cpu and memory at their limits stay Guaranteed."""
    resources = Resources(cpu=1, memory="1Gi", extended={"nvidia.com/gpu": 1})
    stored = k8s.defaulted_pod(
        pod_manifest(gpu_plan(resources), namespace="ns"),
        namespace="ns",
        manager="t",
        now=datetime.now(UTC),
    )
    assert stored["status"]["qosClass"] == "Guaranteed"


def test_pinned_cdi_devices_are_refused_naming_the_field() -> None:
    """Kubernetes gives devices through device plugins: CDI names in a Pod are refused."""
    plan = gpu_plan(Resources(devices=["nvidia.com/gpu=0"]))
    with pytest.raises(PlanError, match="device plugins") as caught:
        pod_manifest(plan, namespace="ns")
    assert caught.value.path == "containers[0].resources.devices"


@pytest.mark.anyio
async def test_the_driver_sends_the_gpu_request_and_refuses_devices_before_any_call(
    driver: KubernetesDriver, fake: FakeApiServer
) -> None:
    """The created Pod carries the GPU request as the server stores it; a plan with pinned
    devices makes no call at all."""
    await driver.apply(gpu_plan(Resources(extended={"nvidia.com/gpu": 2})))
    stored = fake.pods[(NAMESPACE, "llm")]["spec"]["containers"][0]["resources"]
    assert stored == {"limits": {"nvidia.com/gpu": "2"}, "requests": {"nvidia.com/gpu": "2"}}
    fake.requests.clear()
    with pytest.raises(PlanError):
        await driver.apply(
            WorkloadPlan(
                name="pinned",
                containers=[
                    Container(
                        name="s", image="busybox:1.36", resources=Resources(devices=["a.io/b=c"])
                    )
                ],
            )
        )
    assert fake.calls() == []
