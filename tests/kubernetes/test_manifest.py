"""Plan → Pod translation, quantities and the apply decision: pure, no cluster, no server."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any, cast

import attrs
import fake_pods as k8s
import pytest

from asyncdeploy import (
    Checks,
    Container,
    HTTPGet,
    Mount,
    PlanError,
    Port,
    Probe,
    Resources,
    WorkloadConflict,
    WorkloadPlan,
)
from asyncdeploy.drivers.kubernetes._manifest import (
    apply_decision,
    pod_manifest,
    restart_policy,
    stop_signal_name,
    volume_name,
)
from asyncdeploy.drivers.kubernetes._status import masked_pod
from asyncdeploy.labels import LABEL_PLAN, LABEL_PLAN_DIGEST, LABEL_WORKLOAD
from asyncdeploy.plan import plan_digest, plan_from_record, plan_record
from asyncdeploy.plan.quantity import parse_quantity


def minimal(**changes: Any) -> WorkloadPlan:
    fields: dict[str, Any] = {
        "name": "demo",
        "containers": [Container(name="server", image="registry.example/infer:1.0")],
    }
    fields.update(changes)
    return WorkloadPlan(**fields)


def rich() -> WorkloadPlan:
    return WorkloadPlan(
        name="infer",
        labels={"app": "infer", "team": "ml"},
        termination_grace_period_seconds=45,
        shm_size="1Gi",
        containers=[
            Container(
                name="fetch",
                image="busybox:1.36",
                role="init",
                command=["sh", "-c", "echo ok > /srv/index.html"],
                mounts=[Mount(source="models", target="/srv", type="volume")],
            ),
            Container(
                name="server",
                image="registry.example/infer:1.0",
                command=["python", "-m", "server"],
                args=["--port", "8000"],
                env={"MODEL": "m1", "HF_TOKEN": "secret"},
                ports=[Port(container_port=8000, host_port=18000, name="http")],
                resources=Resources(cpu=0.5, memory="1.5Gi"),
                checks=Checks(
                    startup=Probe(exec=["true"], period_seconds=1, failure_threshold=30),
                    readiness=Probe(http=HTTPGet(path="/ready", port=8000)),
                    liveness=Probe(tcp=8000, initial_delay_seconds=5, timeout_seconds=2),
                ),
                pre_stop=["sh", "-c", "sleep 1"],
                stop_signal="SIGINT",
                restart_policy="always",
                mounts=[
                    Mount(source="models", target="/models", type="volume", read_only=True),
                    Mount(source="/var/cache/hf", target="/cache"),
                    Mount(target="/tmp", type="tmpfs"),
                ],
            ),
        ],
    )


def test_a_pod_records_its_plan_and_inspect_masks_its_secrets() -> None:
    """A failed recreate brings the old Pod back from the plan it recorded (issue 24 item 2)."""
    plan = attrs.evolve(minimal(), instance_of="demo-base", labels={"team": "ml"})
    secret = attrs.evolve(plan.containers[0], env={"HF_TOKEN": "hf_secret", "MODE": "fast"})
    plan = attrs.evolve(plan, containers=[secret])
    pod = pod_manifest(plan, namespace="ns")
    assert plan_from_record(pod["metadata"]["annotations"][LABEL_PLAN]) == plan
    shown = masked_pod(pod)["metadata"]["annotations"][LABEL_PLAN]
    assert "hf_secret" not in shown and '"fast"' in shown
    assert plan_from_record("{") is None and plan_from_record(None) is None


def test_a_minimal_plan_becomes_a_minimal_pod() -> None:
    plan = minimal()
    digest = plan_digest(plan)
    assert pod_manifest(plan, namespace="ns") == {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "demo",
            "namespace": "ns",
            "labels": {LABEL_WORKLOAD: "demo", LABEL_PLAN_DIGEST: digest},
            "annotations": {LABEL_PLAN_DIGEST: digest, LABEL_PLAN: plan_record(plan)},
        },
        "spec": {
            "terminationGracePeriodSeconds": 30,
            "restartPolicy": "Never",
            "shareProcessNamespace": True,
            "containers": [{"name": "server", "image": "registry.example/infer:1.0"}],
        },
    }


def test_a_rich_plan_maps_every_field() -> None:
    pod = pod_manifest(rich(), namespace="ns")
    spec = pod["spec"]
    assert pod["metadata"]["labels"] == {
        "app": "infer",
        "team": "ml",
        LABEL_WORKLOAD: "infer",
        LABEL_PLAN_DIGEST: plan_digest(rich()),
    }
    assert spec["terminationGracePeriodSeconds"] == 45
    assert spec["restartPolicy"] == "Always"
    assert spec["os"] == {"name": "linux"}  # required by lifecycle.stopSignal
    [init] = spec["initContainers"]
    assert init["command"] == ["sh", "-c", "echo ok > /srv/index.html"]
    [server] = spec["containers"]
    assert server["command"] == ["python", "-m", "server"]
    assert server["args"] == ["--port", "8000"]
    assert server["env"] == [
        {"name": "HF_TOKEN", "value": "secret"},
        {"name": "MODEL", "value": "m1"},
    ]
    assert server["ports"] == [
        {"containerPort": 8000, "protocol": "TCP", "name": "http", "hostPort": 18000}
    ]
    quantities = {"cpu": "500m", "memory": "1536Mi"}
    assert server["resources"] == {"limits": quantities, "requests": quantities}
    assert server["startupProbe"] == {
        "exec": {"command": ["true"]},
        "initialDelaySeconds": 0,
        "periodSeconds": 1,
        "timeoutSeconds": 1,
        "failureThreshold": 30,
    }
    assert server["readinessProbe"]["httpGet"] == {"path": "/ready", "port": 8000}
    assert server["livenessProbe"]["tcpSocket"] == {"port": 8000}
    assert server["livenessProbe"]["initialDelaySeconds"] == 5
    assert server["lifecycle"] == {
        "preStop": {"exec": {"command": ["sh", "-c", "sleep 1"]}},
        "stopSignal": "SIGINT",
    }
    volumes = {v["name"]: v for v in spec["volumes"]}
    models = volume_name("vol", "models")
    assert volumes[models] == {"name": models, "emptyDir": {}}
    cache = volume_name("host", "/var/cache/hf")
    assert volumes[cache] == {"name": cache, "hostPath": {"path": "/var/cache/hf"}}
    assert volumes["shm"] == {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}}
    [tmpfs] = [v for v in spec["volumes"] if v["name"].startswith("tmp-")]
    assert tmpfs["emptyDir"] == {"medium": "Memory"}
    assert init["volumeMounts"] == [
        {"name": models, "mountPath": "/srv"},
        {"name": "shm", "mountPath": "/dev/shm"},
    ]
    assert server["volumeMounts"][:2] == [
        {"name": models, "mountPath": "/models", "readOnly": True},
        {"name": cache, "mountPath": "/cache"},
    ]
    assert len(spec["volumes"]) == 4  # the shared "models" volume appears once


def test_toggles_are_sent_only_when_on() -> None:
    assert "hostNetwork" not in pod_manifest(minimal(), namespace="ns")["spec"]
    assert pod_manifest(minimal(host_network=True), namespace="ns")["spec"]["hostNetwork"] is True
    assert (
        "shareProcessNamespace"
        not in pod_manifest(minimal(pid_shared=False), namespace="ns")["spec"]
    )


def test_autoheal_and_the_pause_image_do_not_exist_on_kubernetes() -> None:
    from asyncdeploy import Autoheal

    plan = minimal(autoheal=Autoheal(image="autoheal:1"), pause_image="pause:9")
    spec = pod_manifest(plan, namespace="ns")["spec"]
    assert [c["name"] for c in spec["containers"]] == ["server"]
    assert "pause:9" not in json.dumps(spec) and "autoheal" not in json.dumps(spec)


@pytest.mark.parametrize(
    ("policies", "expected"),
    [
        (["no"], "Never"),
        (["on-failure"], "OnFailure"),
        (["always"], "Always"),
        (["unless-stopped"], "Always"),
        (["no", "on-failure"], "OnFailure"),
        (["on-failure", "always", "no"], "Always"),
    ],
)
def test_the_pod_restart_policy_is_the_most_restarting_run_container(
    policies: list[str], expected: str
) -> None:
    containers = [
        Container(name=f"c{i}", image="x:1", restart_policy=cast(Any, p))
        for i, p in enumerate(policies)
    ]
    assert restart_policy(minimal(containers=containers)) == expected


@pytest.mark.parametrize(
    ("sent", "expected"),
    [
        ("SIGTERM", "SIGTERM"),
        ("TERM", "SIGTERM"),
        ("15", "SIGTERM"),
        ("2", "SIGINT"),
        ("10", "SIGUSR1"),
        ("34", "SIGRTMIN"),
        ("40", "SIGRTMIN+6"),
        ("64", "SIGRTMAX"),
        ("RTMIN+3", "SIGRTMIN+3"),
    ],
)
def test_stop_signals_are_spelled_as_the_pod_api_wants(sent: str, expected: str) -> None:
    assert stop_signal_name(sent) == expected


def test_an_unknown_signal_number_is_a_plan_error_naming_the_container() -> None:
    plan = minimal(containers=[Container(name="server", image="x:1", stop_signal="99")])
    with pytest.raises(PlanError) as caught:
        pod_manifest(plan, namespace="ns")
    assert caught.value.path == "containers[0].stop_signal"


def test_a_host_port_that_differs_under_host_network_is_refused_before_any_call() -> None:
    """The API server would answer 422 (07b); the plan error names the field instead."""
    container = Container(name="server", image="x:1", ports=[Port(container_port=80, host_port=81)])
    plan = minimal(host_network=True, containers=[container])
    with pytest.raises(PlanError) as caught:
        pod_manifest(plan, namespace="ns")
    assert caught.value.path == "containers[0].ports[0].host_port"


def test_volume_names_are_dns_labels_and_keep_look_alike_paths_apart() -> None:
    names = {volume_name("host", p) for p in ("/data/a", "/data-a", "/DATA/A", "/" + "x" * 300)}
    assert len(names) == 4
    for name in names:
        assert len(name) <= 63
        assert k8s._DNS_LABEL.fullmatch(name)


# --- quantities -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cpu", "memory"),
    [(0.5, "1.5Gi"), ("250m", "1610612736"), ("2", "1.5G"), ("0.001", "1Ki"), (4, 512 * 2**20)],
)
def test_quantities_survive_the_api_servers_normalisation_by_value(cpu: Any, memory: Any) -> None:
    """What the Pod carries is what the plan means, whatever spelling the server stores."""
    container = Container(name="s", image="x:1", resources=Resources(cpu=cpu, memory=memory))
    [sent] = pod_manifest(minimal(containers=[container]), namespace="ns")["spec"]["containers"]
    assert sent["resources"]["requests"] == sent["resources"]["limits"]
    for key, value in (("cpu", cpu), ("memory", memory)):
        stored = k8s.canonical_quantity(sent["resources"]["limits"][key])
        assert k8s.quantity_value(stored) == parse_quantity(value)
        assert (
            stored == sent["resources"]["limits"][key]
        )  # the plan's spelling is already canonical


def test_the_api_server_accepts_the_manifest_as_guaranteed() -> None:
    stored = k8s.defaulted_pod(
        pod_manifest(rich(), namespace="ns"), namespace="ns", manager="t", now=datetime.now(UTC)
    )
    assert stored["status"]["qosClass"] == "Burstable"  # the init container has no resources
    only = minimal(
        containers=[Container(name="s", image="x:1", resources=Resources(cpu=1, memory="1Gi"))]
    )
    stored = k8s.defaulted_pod(
        pod_manifest(only, namespace="ns"), namespace="ns", manager="t", now=datetime.now(UTC)
    )
    assert stored["status"]["qosClass"] == "Guaranteed"


# --- the apply decision -----------------------------------------------------------------------


def stored(plan: WorkloadPlan) -> dict[str, Any]:
    """The Pod as the API server stores it: defaulted, normalised, with status."""
    return k8s.defaulted_pod(
        pod_manifest(plan, namespace="ns"), namespace="ns", manager="t", now=datetime.now(UTC)
    )


def test_no_pod_means_create() -> None:
    assert apply_decision(None, rich()) == "create"


def test_the_same_plan_is_unchanged_although_the_server_rewrote_the_spec() -> None:
    live = stored(rich())
    sent = pod_manifest(rich(), namespace="ns")
    assert live["spec"] != sent["spec"]  # defaults added, toggles dropped, quantities respelled
    assert apply_decision(live, rich()) == "unchanged"


def test_an_equal_plan_spelled_differently_is_unchanged() -> None:
    first = minimal(containers=[Container(name="s", image="x:1", resources=Resources(cpu=0.5))])
    again = minimal(containers=[Container(name="s", image="x:1", resources=Resources(cpu="500m"))])
    assert apply_decision(stored(first), again) == "unchanged"


@pytest.mark.parametrize(
    "change",
    [
        {"termination_grace_period_seconds": 31},
        {"containers": [Container(name="server", image="registry.example/infer:1.1")]},
        {"labels": {"app": "other"}},
        {"host_network": True},
    ],
    ids=["grace", "image", "labels", "host-network"],
)
def test_any_change_replaces(change: dict[str, Any]) -> None:
    assert apply_decision(stored(minimal()), minimal(**change)) == "replace"


def test_a_pod_being_deleted_is_replaced_even_with_the_same_plan() -> None:
    live = stored(minimal())
    live["metadata"]["deletionTimestamp"] = "2026-11-29T14:34:27Z"
    assert apply_decision(live, minimal()) == "replace"


def test_a_pod_asyncdeploy_did_not_create_is_a_conflict() -> None:
    live = stored(minimal())
    del live["metadata"]["labels"][LABEL_WORKLOAD]
    with pytest.raises(WorkloadConflict):
        apply_decision(live, minimal())


def test_node_selector_is_the_pods_and_takes_any_domains_node_labels() -> None:
    """``node_selector`` → ``nodeSelector``; the nodes' own keys (``kubernetes.io/hostname``)
    are allowed, even those of asyncdeploy's reserved domain (the nodes' labels are not its to
    write); a key or value that is no label is refused by its path; none set, none sent; it is
    part of the plan's digest (a changed selector is a changed plan)."""
    pinned = minimal(node_selector={"kubernetes.io/hostname": "127.0.0.2", "disk": "ssd"})
    spec = pod_manifest(pinned, namespace="default")["spec"]
    assert spec["nodeSelector"] == {"kubernetes.io/hostname": "127.0.0.2", "disk": "ssd"}
    assert "nodeSelector" not in pod_manifest(minimal(), namespace="default")["spec"]
    assert plan_digest(pinned) != plan_digest(minimal())
    assert minimal(node_selector={"asyncdeploy.io/pool": "gpu"}).node_selector
    with pytest.raises(PlanError, match=r"node_selector\.bad key: is not a valid label key"):
        minimal(node_selector={"bad key": "x"})
    with pytest.raises(PlanError, match=r"node_selector\.disk: is not a valid label value"):
        minimal(node_selector={"disk": "not valid!"})
    with pytest.raises(PlanError, match="node_selector: must be a mapping"):
        WorkloadPlan.from_mapping(
            {"name": "demo", "containers": [{"name": "s", "image": "x:1"}], "node_selector": ["a"]}
        )
    again = plan_from_record(plan_record(pinned))
    assert again is not None and again.node_selector == pinned.node_selector
