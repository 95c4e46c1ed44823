"""Reading traffic from EndpointSlices, and the Service a plan asks for: pure functions."""

from __future__ import annotations

from typing import Any

import attrs

from asyncdeploy.drivers.kubernetes._manifest import pod_manifest, service_manifest
from asyncdeploy.drivers.kubernetes._traffic import (
    PROPAGATION_WINDOW,
    gate_traffic_left,
    propagation_window,
    ready_in,
    routing_services,
    traffic_left_commands,
)
from asyncdeploy.labels import LABEL_SERVICE
from asyncdeploy.plan import WorkloadPlan
from asyncdeploy.plan.gating import expand_gates

POD = {"metadata": {"uid": "u1", "labels": {"app": "a", "tier": "web"}}}


def _slice(service: str, *endpoints: tuple[str, bool | None]) -> dict[str, Any]:
    return {
        "metadata": {"name": f"{service}-x", "labels": {"kubernetes.io/service-name": service}},
        "endpoints": [
            {"targetRef": {"uid": uid}, "conditions": {} if ready is None else {"ready": ready}}
            for uid, ready in endpoints
        ],
    }


def test_services_route_to_a_pod_by_selector_or_by_listing_it() -> None:
    services = [
        {"metadata": {"name": "by-selector"}, "spec": {"selector": {"app": "a"}}},
        {"metadata": {"name": "other"}, "spec": {"selector": {"app": "b"}}},
        {"metadata": {"name": "no-selector"}, "spec": {}},
    ]
    slices = [_slice("listed", ("u1", True)), _slice("unrelated", ("u2", True))]
    assert routing_services(POD, services, slices) == ("by-selector", "listed")
    assert routing_services(POD, services[1:], slices[1:]) == ()


def test_ready_unset_counts_as_ready_and_false_as_gone() -> None:
    slices = [_slice("a", ("u1", None)), _slice("b", ("u1", False)), _slice("c", ("u2", True))]
    assert ready_in(slices, "u1") == {"a"}
    assert ready_in(slices[1:], "u1") == set()


def test_the_window_is_the_hooks_propagation_wait_within_the_grace() -> None:
    def pod(*command: str) -> dict[str, Any]:
        hook = {"preStop": {"exec": {"command": list(command)}}}
        return {"spec": {"containers": [{"name": "c", "lifecycle": hook}]}}

    assert propagation_window(pod("asyncdeploy", "drain", "--propagation-wait", "4s"), 30) == 4
    assert propagation_window(pod("drain", "--propagation-wait=2.5s"), 30) == 2.5
    assert propagation_window(pod("sleep", "3"), 30) == PROPAGATION_WINDOW
    assert propagation_window(pod("drain", "--propagation-wait", "40s"), 30) == 30
    assert propagation_window({"spec": {}}, 0) == 1.0


def test_the_window_of_a_gated_pod_is_its_gates_propagation_wait() -> None:
    """The gate's drain is an httpGet preStop (``/-/drain?propagation_wait=1s&...``): its wait
    is the window (before: the 10 s default, so a stale endpoint was warned of 9 s late)."""
    plan = WorkloadPlan.from_mapping(
        {
            "name": "llm",
            "termination_grace_period_seconds": 20,
            "containers": [
                {
                    "name": "engine",
                    "image": "x:1",
                    "ports": [{"container_port": 8000}],
                    "gate": {"upstream": 8001, "propagation_seconds": 1},
                }
            ],
        }
    )
    pod = pod_manifest(expand_gates(plan), namespace="ml")
    assert pod["spec"]["containers"][0]["lifecycle"]["preStop"]["httpGet"]["path"].startswith(
        "/-/drain?propagation_wait=1"
    )
    assert propagation_window(pod, 20) == 1.0


def test_the_service_selects_every_instance_of_the_plan() -> None:
    plan = WorkloadPlan.from_mapping(
        {
            "name": "llm",
            "containers": [{"name": "c", "image": "x:1"}],
            "service": {"ports": [{"port": 80, "target_port": 8000}]},
        }
    )
    service = service_manifest(plan, namespace="ml")
    assert service["metadata"] == {
        "name": "llm",
        "namespace": "ml",
        "labels": {LABEL_SERVICE: "llm"},
    }
    assert service["spec"] == {
        "type": "ClusterIP",
        "selector": {LABEL_SERVICE: "llm"},
        "ports": [{"protocol": "TCP", "port": 80, "targetPort": 8000}],
    }
    assert pod_manifest(plan, namespace="ml")["metadata"]["labels"][LABEL_SERVICE] == "llm"
    # an instance replace (or verify) starts under another name is selected by the same Service
    instance = attrs.evolve(plan, name="llm-2", instance_of="llm")
    assert service_manifest(instance, namespace="ml")["metadata"]["name"] == "llm"
    assert pod_manifest(instance, namespace="ml")["metadata"]["labels"][LABEL_SERVICE] == "llm"
    plain = WorkloadPlan.from_mapping({"name": "p", "containers": [{"name": "c", "image": "x:1"}]})
    assert LABEL_SERVICE not in pod_manifest(plain, namespace="ml")["metadata"]["labels"]


def test_the_traffic_events_are_rendered_logged_and_serialised() -> None:
    from asyncdeploy._events import TrafficLeft, TrafficStillRouted, event_to_dict
    from asyncdeploy.cli.render import event_line

    left = TrafficLeft(workload="llm", elapsed=0.21, services=("llm", "llm-internal"))
    late = TrafficStillRouted(workload="llm", elapsed=10.0, services=("old",), window=10.0)
    assert event_line(left) == "out of the ready endpoints of llm, llm-internal: traffic has left"
    assert event_line(late) == "warning: still a ready endpoint of old 10 s into the drain"
    assert event_to_dict(left) == {
        "event": "TrafficLeft",
        "workload": "llm",
        "elapsed": 0.21,
        "services": ["llm", "llm-internal"],
    }


def test_the_kits_drain_hooks_are_told_that_traffic_left() -> None:
    """On TrafficLeft the driver runs the kit's own drain program in each container whose
    preStop hook is it, with its socket and --traffic-left; any other hook is left alone."""

    def container(name: str, command: list[str] | None, http: bool = False) -> dict[str, Any]:
        hook: dict[str, Any] = {}
        if command is not None:
            hook = {"preStop": {"exec": {"command": command}}}
        if http:
            hook = {"preStop": {"httpGet": {"path": "/-/drain", "port": 8000}}}
        return {"name": name, "lifecycle": hook}

    pod = {
        "spec": {
            "containers": [
                container(
                    "kit",
                    [
                        "python3",
                        "-m",
                        "asyncdeploy.workload.drain_cmd",
                        "--socket",
                        "/run/a/c.sock",
                        "--propagation-wait",
                        "10s",
                    ],
                ),
                container("cli", ["/usr/local/bin/asyncdeploy", "drain", "--socket=/s.sock"]),
                container("default-socket", ["asyncdeploy", "drain", "--timeout", "20s"]),
                container("shell", ["sh", "-c", "asyncdeploy drain"]),
                container("sleep", ["sleep", "5"]),
                container("gate", None, http=True),
                container("none", None),
            ]
        }
    }
    assert traffic_left_commands(pod) == [
        (
            "kit",
            [
                "python3",
                "-m",
                "asyncdeploy.workload.drain_cmd",
                "--socket",
                "/run/a/c.sock",
                "--traffic-left",
            ],
        ),
        ("cli", ["/usr/local/bin/asyncdeploy", "drain", "--socket=/s.sock", "--traffic-left"]),
        ("default-socket", ["asyncdeploy", "drain", "--traffic-left"]),
    ]


def test_the_gates_are_told_that_traffic_left_on_their_admin_port() -> None:
    """On TrafficLeft the driver sends a drain gate's admin port ``/-/traffic-left`` with the
    token of its preStop hook (through the API server's pod proxy); other hooks are left alone."""

    def container(name: str, hook: dict[str, Any]) -> dict[str, Any]:
        return {"name": name, "lifecycle": {"preStop": hook}}

    pod = {
        "spec": {
            "containers": [
                container(
                    "gated",
                    {"httpGet": {"path": "/-/drain?timeout=25s&token=s3cret", "port": 9901}},
                ),
                container("no-token", {"httpGet": {"path": "/-/drain", "port": 9902}}),
                container("other", {"httpGet": {"path": "/shutdown", "port": 8080}}),
                container("named-port", {"httpGet": {"path": "/-/drain", "port": "admin"}}),
                container("exec", {"exec": {"command": ["asyncdeploy", "drain"]}}),
            ]
        }
    }
    assert gate_traffic_left(pod) == [
        (9901, "/-/traffic-left", {"X-Asyncdeploy-Token": "s3cret"}),
        (9902, "/-/traffic-left", {}),
    ]
