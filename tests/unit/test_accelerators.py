"""Accelerators in the plan and their pure translation into engine create bodies."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from asyncdeploy import Container, CreateError, PlanError, Resources, WorkloadPlan
from asyncdeploy.drivers.engine._libpod import libpod_spec
from asyncdeploy.drivers.engine._spec import container_config, refuse_unsupported_devices
from asyncdeploy.drivers.kubernetes._manifest import pod_manifest
from asyncdeploy.plan import plan_digest, plan_to_mapping
from asyncdeploy.plan.lint import Finding, lint_plan
from asyncdeploy.plan.schema import plan_schema


def gpu_plan(resources: dict[str, Any], **container: Any) -> WorkloadPlan:
    return WorkloadPlan.from_mapping(
        {
            "name": "llm",
            "containers": [
                {"name": "server", "image": "vllm/vllm-openai:v0.6.3", "resources": resources}
                | container
            ],
        }
    )


def host_config(resources: dict[str, Any], engine: str, api: str = "1.41") -> dict[str, Any]:
    plan = gpu_plan(resources)
    config = container_config(plan, plan.containers[0], "p1", engine=engine, api_version=api)
    return dict(config["HostConfig"])


# --- the plan --------------------------------------------------------------------------------


def test_extended_resources_sit_beside_cpu_and_memory_in_a_plan_file() -> None:
    """A plan file writes ``nvidia.com/gpu: 1`` beside cpu and memory, and reads back the same."""
    data = {"cpu": 4, "memory": "16Gi", "nvidia.com/gpu": 1, "example.com/fpga": "2"}
    plan = gpu_plan(data)
    resources = plan.containers[0].resources
    assert resources.extended == {"nvidia.com/gpu": 1, "example.com/fpga": 2}
    assert plan_to_mapping(resources) == {
        "cpu": "4",
        "memory": "16Gi",
        "example.com/fpga": 2,
        "nvidia.com/gpu": 1,
    }
    assert WorkloadPlan.from_mapping(plan_to_mapping(plan)) == plan


def test_devices_take_cdi_names() -> None:
    """Pinned devices are CDI names, the vendor a domain."""
    plan = gpu_plan({"devices": ["nvidia.com/gpu=0", "nvidia.com/gpu=GPU-1a2b", "amd.com/gpu=all"]})
    assert plan.containers[0].resources.devices == (
        "nvidia.com/gpu=0",
        "nvidia.com/gpu=GPU-1a2b",
        "amd.com/gpu=all",
    )
    assert plan.containers[0].resources.accelerated


@pytest.mark.parametrize(
    ("resources", "path"),
    [
        ({"nvidia.com/gpu": 1.5}, 'containers[0].resources["nvidia.com/gpu"]'),
        ({"nvidia.com/gpu": "500m"}, 'containers[0].resources["nvidia.com/gpu"]'),
        ({"nvidia.com/gpu": -1}, 'containers[0].resources["nvidia.com/gpu"]'),
        ({"nvidia.com/gpu": True}, 'containers[0].resources["nvidia.com/gpu"]'),
        ({"nvidia.com/gpu": None}, 'containers[0].resources["nvidia.com/gpu"]'),
        ({"nvidia.com/gpu": " 1"}, 'containers[0].resources["nvidia.com/gpu"]'),
        ({"kubernetes.io/gpu": 1}, 'containers[0].resources["kubernetes.io/gpu"]'),
        ({"Nvidia.com/gpu": 1}, 'containers[0].resources["Nvidia.com/gpu"]'),
        ({"gpu": 1}, "containers[0].resources.gpu"),
        ({"devices": "nvidia.com/gpu=0"}, "containers[0].resources.devices"),
        ({"devices": ["nvidia/gpu=0"]}, "containers[0].resources.devices[0]"),
        ({"devices": ["nvidia.com/gpu"]}, "containers[0].resources.devices[0]"),
        ({"devices": ["nvidia.com/gpu=0", "x.io/y="]}, "containers[0].resources.devices[1]"),
        ({"devices": ["nvidia.com/gpu=0", "nvidia.com/gpu=0"]}, "containers[0].resources.devices"),
        (
            {"nvidia.com/gpu": 1, "devices": ["nvidia.com/gpu=0"]},
            "containers[0].resources.devices[0]",
        ),
    ],
)
def test_bad_accelerators_name_the_field(resources: dict[str, Any], path: str) -> None:
    """Counts are whole numbers >= 0, names are qualified, devices are CDI names."""
    with pytest.raises(PlanError) as caught:
        gpu_plan(resources)
    assert caught.value.path == path


def test_a_plan_without_accelerators_keeps_its_digest() -> None:
    """The digest of a plan without accelerators is the one it had before they existed
    (pinned from the previous release), so upgrading does not recreate running workloads."""
    plan = WorkloadPlan.from_mapping(
        {
            "name": "llm",
            "containers": [
                {
                    "name": "server",
                    "image": "vllm/vllm-openai:v0.6.3",
                    "resources": {"cpu": 4, "memory": "16Gi"},
                }
            ],
            "shm_size": "8Gi",
        }
    )
    assert plan_digest(plan) == "e0da8d2ba14a4b4c"
    with_gpu = gpu_plan({"cpu": 4, "memory": "16Gi", "nvidia.com/gpu": 1})
    assert plan_digest(with_gpu) != plan_digest(gpu_plan({"cpu": 4, "memory": "16Gi"}))


def test_python_construction_takes_the_same_values() -> None:
    """``Resources(extended=..., devices=...)`` is the attribute form of the plan-file form."""
    resources = Resources(cpu=2, extended={"nvidia.com/gpu": 2}, devices=["x.io/fpga=a"])
    container = Container(name="s", image="i", resources=resources)
    assert container.resources.extended["nvidia.com/gpu"] == 2
    assert not Resources(extended={"nvidia.com/gpu": 0}).accelerated


# --- Docker ----------------------------------------------------------------------------------


def test_docker_counts_nvidia_gpus_through_the_nvidia_driver() -> None:
    """``nvidia.com/gpu: 2`` is what ``docker run --gpus 2`` sends."""
    assert host_config({"nvidia.com/gpu": 2}, "docker")["DeviceRequests"] == [
        {"Driver": "nvidia", "Count": 2, "Capabilities": [["gpu"]]}
    ]


def test_docker_pins_nvidia_devices_by_id_and_all_by_count() -> None:
    """Pinned NVIDIA devices are ``--gpus device=0,1``; ``=all`` is ``--gpus all``."""
    pinned = host_config({"devices": ["nvidia.com/gpu=0", "nvidia.com/gpu=GPU-9f"]}, "docker")
    assert pinned["DeviceRequests"] == [
        {"Driver": "nvidia", "DeviceIDs": ["0", "GPU-9f"], "Capabilities": [["gpu"]]}
    ]
    every = host_config({"devices": ["nvidia.com/gpu=all"]}, "docker")
    assert every["DeviceRequests"] == [{"Driver": "nvidia", "Count": -1, "Capabilities": [["gpu"]]}]


def test_docker_takes_other_cdi_names_through_the_cdi_driver_from_api_1_44() -> None:
    """Docker 25 (API 1.44) resolves CDI names itself: the ``cdi`` driver with device IDs."""
    body = host_config({"devices": ["amd.com/gpu=0", "nvidia.com/gpu=1"]}, "docker", "1.44")
    assert body["DeviceRequests"] == [
        {"Driver": "nvidia", "DeviceIDs": ["1"], "Capabilities": [["gpu"]]},
        {"Driver": "cdi", "DeviceIDs": ["amd.com/gpu=0"]},
    ]
    assert "Devices" not in body


def test_docker_before_25_refuses_cdi_names_before_creating_anything() -> None:
    """Docker 20.10 (API 1.41) has no CDI: a clear CreateError naming container and device."""
    plan = gpu_plan({"devices": ["asyncdeploy.test/device=dev0"]})
    with pytest.raises(CreateError, match=r"llm_server.*asyncdeploy.test/device=dev0.*Docker 25"):
        refuse_unsupported_devices(plan, engine="docker", api_version="1.41")
    refuse_unsupported_devices(plan, engine="docker", api_version="1.44")


def test_docker_refuses_counts_of_other_vendors() -> None:
    """Docker can count only NVIDIA GPUs: ``amd.com/gpu: 1`` asks for CDI names instead."""
    plan = gpu_plan({"amd.com/gpu": 1})
    with pytest.raises(CreateError, match=r"llm_server asks for amd.com/gpu: 1.*CDI name"):
        refuse_unsupported_devices(plan, engine="docker", api_version="1.47")


def test_a_zero_count_asks_for_nothing() -> None:
    """``nvidia.com/gpu: 0`` adds no device request on any engine."""
    assert "DeviceRequests" not in host_config({"nvidia.com/gpu": 0}, "docker")
    assert "Devices" not in host_config({"nvidia.com/gpu": 0}, "podman")


# --- Podman ----------------------------------------------------------------------------------


def test_podman_takes_cdi_names_as_devices() -> None:
    """On Podman the compatible body carries the CDI names as devices (``--device``)."""
    body = host_config({"devices": ["asyncdeploy.test/device=dev0"]}, "podman")
    assert body["Devices"] == [
        {
            "PathOnHost": "asyncdeploy.test/device=dev0",
            "PathInContainer": "",
            "CgroupPermissions": "",
        }
    ]
    assert "DeviceRequests" not in body


def test_podman_refuses_counts_and_asks_for_pinned_devices() -> None:
    """Podman cannot count devices; mapping N to ``=all`` would hand out more than asked."""
    plan = gpu_plan({"nvidia.com/gpu": 1})
    with pytest.raises(CreateError, match=r"llm_server.*nvidia.com/gpu: 1.*nvidia.com/gpu=0"):
        refuse_unsupported_devices(plan, engine="podman", api_version="1.41")


def test_libpod_body_carries_what_the_compatible_body_says() -> None:
    """The libpod create body for a container with devices keeps every field of the
    compatible one: namespaces joined, limits, mounts, health check, stop signal, devices."""
    plan = WorkloadPlan.from_mapping(
        {
            "name": "llm",
            "containers": [
                {
                    "name": "server",
                    "image": "img",
                    "command": ["serve"],
                    "args": ["--port", "8000"],
                    "env": {"A": "1=2"},
                    "stop_signal": "SIGINT",
                    "restart_policy": "on-failure",
                    "resources": {"cpu": "1500m", "memory": "1Gi", "devices": ["x.io/d=a"]},
                    "mounts": [
                        {"source": "/srv", "target": "/data", "read_only": True},
                        {"type": "tmpfs", "target": "/tmp"},
                        {"type": "volume", "source": "models", "target": "/models"},
                    ],
                    "checks": {"liveness": {"exec": ["true"], "period_seconds": 5}},
                }
            ],
        }
    )
    config = container_config(plan, plan.containers[0], "p1", engine="podman")
    body = libpod_spec(config, "llm-server")
    assert body["name"] == "llm-server"
    assert body["image"] == "img"
    assert body["entrypoint"] == ["serve"] and body["command"] == ["--port", "8000"]
    assert body["env"] == {"A": "1=2"}
    assert body["labels"] == config["Labels"]
    assert body["stop_signal"] == 2 and body["stop_timeout"] == 30
    assert body["restart_policy"] == "on-failure"
    for key in ("netns", "ipcns", "pidns"):
        assert body[key] == {"nsmode": "container", "value": "p1"}
    assert body["resource_limits"] == {
        "cpu": {"quota": 150_000, "period": 100_000},
        "memory": {"limit": 2**30},
    }
    assert body["mounts"] == [
        {"destination": "/data", "type": "bind", "source": "/srv", "options": ["rbind", "ro"]},
        {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": []},
    ]
    assert body["volumes"] == [{"Name": "models", "Dest": "/models", "Options": []}]
    assert body["healthconfig"]["Test"] == ["CMD", "true"]
    assert body["devices"] == [{"path": "x.io/d=a"}]


def test_libpod_translation_refuses_a_field_it_does_not_know() -> None:
    """A create field added to the compatible body without a libpod translation is an error,
    never silently dropped."""
    with pytest.raises(ValueError, match="ShmSize"):
        libpod_spec({"Image": "i", "HostConfig": {"ShmSize": 1}}, "n")


# --- lint and the example plan ---------------------------------------------------------------

EXAMPLE = Path(__file__).parents[2] / "examples" / "plans" / "gpu-inference.yaml"
DRAIN_HOOK = ["drain", "--propagation-wait", "5s", "--timeout", "60s"]


def linted(grace: int, *, gpu: bool, **plan: Any) -> list[Finding]:
    checks = {"readiness": {"tcp": 8000}, "startup": {"tcp": 8000}, "liveness": {"exec": ["true"]}}
    resources = {"nvidia.com/gpu": 1} if gpu else {}
    document = gpu_plan(resources, pre_stop=DRAIN_HOOK, checks=checks)
    return lint_plan(
        WorkloadPlan.from_mapping(
            {**plan_to_mapping(document), "termination_grace_period_seconds": grace, **plan}
        )
    )


def test_the_gpu_example_loads_lints_clean_and_translates_for_every_engine() -> None:
    """The vLLM-shaped example: valid against the schema, no lint finding but the one its fixed
    host port earns (one GPU, one port: a replace drains first), a GPU limit on Kubernetes, a
    device request on Docker, and Podman's refusal of a count."""
    document = yaml.safe_load(EXAMPLE.read_text())
    jsonschema.validate(document, plan_schema(), cls=jsonschema.Draft202012Validator)
    plan = WorkloadPlan.from_file(EXAMPLE)
    [fixed_port] = lint_plan(plan)
    assert fixed_port.path == "containers[0].ports[0].host_port"
    assert "cannot be replaced in place" in fixed_port.message
    [server] = plan.run_containers
    assert server.resources.extended == {"nvidia.com/gpu": 1}
    assert plan.shm_size == "8Gi"
    pod = pod_manifest(plan, namespace="ns")["spec"]["containers"][0]
    assert pod["resources"]["limits"]["nvidia.com/gpu"] == "1"
    body = container_config(plan, server, "p", engine="docker", api_version="1.41")
    assert body["HostConfig"]["DeviceRequests"] == [
        {"Driver": "nvidia", "Count": 1, "Capabilities": [["gpu"]]}
    ]
    with pytest.raises(CreateError, match="Podman cannot count"):
        refuse_unsupported_devices(plan, engine="podman", api_version="1.41")


def test_a_gpu_container_without_shm_is_warned() -> None:
    """The engines' 64 MB /dev/shm breaks PyTorch data loaders: a warning, not an error."""
    findings = linted(120, gpu=True)
    assert [(f.level, f.path) for f in findings] == [("warning", "shm_size")]
    assert linted(120, gpu=True, shm_size="8Gi") == []
    assert linted(120, gpu=False) == []


def test_a_gpu_container_keeps_time_to_release_its_gpus() -> None:
    """85 s hold a 65 s drain plus the 15 s margin, but not the 10 s more a GPU server takes
    to free its device memory: a warning for the GPU plan only."""
    assert linted(85, gpu=False) == []
    [finding] = linted(85, gpu=True, shm_size="1Gi")
    assert finding.level == "warning"
    assert finding.path == "termination_grace_period_seconds"
    assert "releasing its GPUs" in finding.message


def test_a_gpu_liveness_check_without_a_startup_check_is_warned() -> None:
    """Loading a model takes minutes: liveness alone would restart the server meanwhile."""
    plan = gpu_plan(
        {"nvidia.com/gpu": 1},
        checks={"readiness": {"tcp": 8000}, "liveness": {"tcp": 8000}},
    )
    plan = WorkloadPlan.from_mapping({**plan_to_mapping(plan), "shm_size": "1Gi"})
    paths = [(f.level, f.path) for f in lint_plan(plan)]
    assert ("warning", "containers[0].checks.startup") in paths
    assert all(level == "warning" for level, _ in paths)
