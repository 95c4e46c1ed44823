"""A first use that says what it does: port lint, ports and restarts in status, `get NAME`,
the engines' event records, and the drain's first line (pure parts; engines: tests/engines)."""

from __future__ import annotations

import json

import anyio
import pytest

from asyncdeploy import Container, Port, PublishedPort, WorkloadEvent, WorkloadPlan
from asyncdeploy._events import DrainStarted
from asyncdeploy._results import ContainerStatus, WorkloadStatus
from asyncdeploy.cli._describe import describe_workload
from asyncdeploy.cli.render import event_line
from asyncdeploy.cli.views import show_statuses, watch_workloads
from asyncdeploy.drivers.engine._history import events_query, parse_events
from asyncdeploy.drivers.engine._state import published_ports
from asyncdeploy.drivers.kubernetes._status import pod_events, workload_status
from asyncdeploy.labels import LABEL_CONTAINER, LABEL_WORKLOAD
from asyncdeploy.plan import Checks, HTTPGet, Probe
from asyncdeploy.plan.lint import lint_plan

DEMO = "localhost/asyncdeploy/demo:latest"


def plan(*containers: Container) -> WorkloadPlan:
    return WorkloadPlan(name="w", containers=list(containers))


def port_warnings(p: WorkloadPlan, **kwargs: object) -> list[str]:
    return [f.message for f in lint_plan(p, **kwargs) if "listens on" in f.message]  # type: ignore[arg-type]


# --- lint: published ports the server does not listen on ------------------------------------


def test_the_demo_image_on_a_port_it_does_not_serve_is_warned() -> None:
    """The issue's first plan: the demo image serves 8080, the plan published 8000."""
    [warning] = port_warnings(
        plan(
            Container(name="server", image=DEMO, ports=[Port(container_port=8000, host_port=18000)])
        )
    )
    assert "listens on 8080" in warning and "not on 8000" in warning and "18000" in warning


@pytest.mark.parametrize(
    "image",
    [DEMO, "localhost/asyncdeploy/demo:t1", "127.0.0.1:5000/asyncdeploy/demo"],
)
def test_the_demo_image_on_8080_is_quiet(image: str) -> None:
    assert (
        port_warnings(plan(Container(name="s", image=image, ports=[Port(container_port=8080)])))
        == []
    )


def test_the_demo_servers_own_port_flag_counts() -> None:
    command = ["python3", "-m", "asyncdeploy.workload.demo", "--port", "8000"]
    right = Container(name="s", image=DEMO, command=command, ports=[Port(container_port=8000)])
    assert port_warnings(plan(right)) == []
    wrong = Container(name="s", image=DEMO, command=command, ports=[Port(container_port=8080)])
    assert ["not on 8080" in w for w in port_warnings(plan(wrong))] == [True]


def test_a_check_on_a_port_nobody_serves_is_warned() -> None:
    checks = Checks(readiness=Probe(http=HTTPGet(path="/ready", port=8000)))
    [warning] = port_warnings(plan(Container(name="s", image=DEMO, checks=checks)))
    assert "readiness check will never pass" in warning


def test_exposed_ports_are_used_only_when_the_engine_was_asked() -> None:
    p = plan(Container(name="s", image="vendor/app:1", ports=[Port(container_port=9000)]))
    assert port_warnings(p) == []  # nothing known of vendor/app
    [warning] = port_warnings(p, image_ports={"vendor/app:1": frozenset({5000})})
    assert "EXPOSEs" in warning and "not on 9000" in warning
    assert port_warnings(p, image_ports={"vendor/app:1": frozenset({9000})}) == []
    own_command = plan(
        Container(
            name="s",
            image="vendor/app:1",
            command=["app", "--port", "9000"],
            ports=[Port(container_port=9000)],
        )
    )
    assert port_warnings(own_command, image_ports={"vendor/app:1": frozenset({5000})}) == []


def test_another_container_of_the_workload_may_serve_the_port() -> None:
    """The containers share the pause container's network: a port may be served by a sibling."""
    front = Container(name="front", image=DEMO, ports=[Port(container_port=8000)])
    back = Container(
        name="back",
        image=DEMO,
        command=["python3", "-m", "asyncdeploy.workload.demo", "--port", "8000"],
    )
    assert port_warnings(plan(front, back)) == []


def test_a_fixed_host_port_says_the_plan_cannot_be_replaced_in_place() -> None:
    fixed = plan(
        Container(name="s", image=DEMO, ports=[Port(container_port=8080, host_port=18000)])
    )
    [finding] = [f for f in lint_plan(fixed) if f.path.endswith("host_port")]
    assert finding.level == "warning" and "cannot be replaced in place" in finding.message
    free = plan(Container(name="s", image=DEMO, ports=[Port(container_port=8080)]))
    assert [f for f in lint_plan(free) if f.path.endswith("host_port")] == []


# --- ports, restarts, description ---------------------------------------------------------


def test_published_ports_count_an_ipv4_and_ipv6_binding_once() -> None:
    """Docker lists 0.0.0.0 and :: for one binding; Podman leaves the IP out."""
    docker = {
        "Ports": [
            {"IP": "0.0.0.0", "PrivatePort": 8080, "PublicPort": 32768, "Type": "tcp"},
            {"IP": "::", "PrivatePort": 8080, "PublicPort": 32768, "Type": "tcp"},
            {"IP": "127.0.0.1", "PrivatePort": 8081, "PublicPort": 18777, "Type": "tcp"},
            {"PrivatePort": 9000, "Type": "tcp"},  # exposed, not published
        ]
    }
    ports = published_ports([docker, {"Ports": None}])
    assert [str(p) for p in ports] == ["32768->8080/tcp", "127.0.0.1:18777->8081/tcp", "9000/tcp"]
    podman = {"Ports": [{"PrivatePort": 8080, "PublicPort": 34163, "Type": "tcp"}]}
    assert [str(p) for p in published_ports([podman])] == ["34163->8080/tcp"]


def pod() -> dict[str, object]:
    return {
        "metadata": {"name": "w", "labels": {LABEL_WORKLOAD: "w"}},
        "spec": {
            "containers": [
                {
                    "name": "server",
                    "image": DEMO,
                    "ports": [{"containerPort": 8080, "hostPort": 18000, "protocol": "TCP"}],
                    "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080}},
                },
                {"name": "side", "image": "b", "ports": [{"containerPort": 9090}]},
            ]
        },
        "status": {
            "containerStatuses": [
                {
                    "name": "server",
                    "state": {"running": {}},
                    "restartCount": 2,
                    "ready": True,
                    "started": True,
                },
                {"name": "side", "state": {"running": {}}, "restartCount": 0},
            ]
        },
    }


def test_a_pods_ports_restarts_and_checks() -> None:
    status = workload_status(pod())
    assert [str(p) for p in status.ports] == ["18000->8080/tcp", "9090/tcp"]
    assert [c.restarts for c in status.containers] == [2, 0]
    assert status.containers[0].checks == ("readiness",)


def status() -> WorkloadStatus:
    return WorkloadStatus(
        name="w",
        driver="docker",
        labels={"team": "ml"},
        grace_period_seconds=30,
        plan_digest=None,
        containers=(
            ContainerStatus(name="pause", role="pause", image="p", state="running", restarts=0),
            ContainerStatus(
                name="server",
                role="run",
                image=DEMO,
                state="running",
                health="healthy",
                restarts=3,
                checks=("readiness", "liveness"),
            ),
            ContainerStatus(
                name="job", role="run", image="b", state="exited", exit_code=3, restarts=1
            ),
        ),
        ports=(PublishedPort(container_port=8080, host_port=18000),),
    )


def test_list_shows_ports_and_wide_shows_restarts_and_images(
    capsys: pytest.CaptureFixture[str],
) -> None:
    show_statuses([status()], "text")
    header, row = capsys.readouterr().out.splitlines()
    assert "PORTS" in header and "18000->8080/tcp" in row and "1/2" in row
    show_statuses([status()], "wide")
    header, row = capsys.readouterr().out.splitlines()
    assert "RESTARTS" in header and "IMAGES" in header
    cells = row.split()
    assert cells[header.split().index("RESTARTS")] == "4"  # the pause's are not the server's
    assert DEMO in row
    show_statuses([status()], "json")
    [data] = json.loads(capsys.readouterr().out)
    assert data["ports"] == [
        {"container_port": 8080, "host_port": 18000, "protocol": "tcp", "host_ip": ""}
    ]


def test_get_describes_containers_ports_checks_and_events() -> None:
    events = [
        WorkloadEvent(time=1.0, container="job", action="start"),
        WorkloadEvent(time=2.0, container="job", action="die", message="exit code 3"),
    ]
    text = "\n".join(describe_workload(status(), events))
    assert "Ports:       18000->8080/tcp" in text
    assert text.startswith("w (docker): running, grace 30 s") and "Ready:       1/2" in text
    server = next(line for line in text.splitlines() if " server " in line)
    assert "healthy" in server and "readiness,liveness" in server and " 3 " in server
    assert "die" in text and "exit code 3" in text
    assert "the engine did not say" in "\n".join(describe_workload(status(), None))


# --- the engines' event records ----------------------------------------------------------


def test_engine_events_are_read_from_docker_and_podman_answers() -> None:
    docker_die = {
        "Action": "die",
        "timeNano": 2_000_000_000,
        "Actor": {"Attributes": {LABEL_CONTAINER: "server", "exitCode": "3"}},
    }
    podman_died = {
        "status": "died",
        "time": 3,
        "Actor": {"Attributes": {LABEL_CONTAINER: "server", "containerExitCode": "1"}},
    }
    noise = {"Action": "exec_start: sh -c wget", "time": 1, "Actor": {"Attributes": {}}}
    health = {
        "Action": "health_status: unhealthy",
        "time": 4,
        "Actor": {"Attributes": {LABEL_CONTAINER: "s"}},
    }
    lines = [json.dumps(e) for e in (podman_died, noise, docker_die, health)] + ["", "not json"]
    found = parse_events(lines, limit=10)
    assert [(e.action, e.message) for e in found] == [
        ("die", "exit code 3"),
        ("die", "exit code 1"),
        ("health_status", "unhealthy"),
    ]
    assert [e.action for e in parse_events(lines, limit=1)] == ["health_status"]
    assert "until" in events_query("w", 1, 2, engine="docker")
    assert (
        events_query("w", 1, 2, engine="podman")["stream"] == "false"
    )  # Podman 4 + until: nothing


def test_pod_events_oldest_first_with_their_container() -> None:
    listing = {
        "items": [
            {
                "reason": "BackOff",
                "message": "restarting",
                "lastTimestamp": "2026-01-01T00:00:05Z",
                "involvedObject": {"fieldPath": "spec.containers{server}"},
            },
            {
                "reason": "Scheduled",
                "message": "assigned",
                "eventTime": "2026-01-01T00:00:01.000000Z",
                "involvedObject": {},
            },
        ]
    }
    found = pod_events(listing, limit=5)
    assert [(e.action, e.container) for e in found] == [("Scheduled", ""), ("BackOff", "server")]


# --- the drain's first line and `list -w` ------------------------------------------------


def test_the_drain_start_counts_no_pause() -> None:
    def started(*names: str) -> str:
        return event_line(
            DrainStarted(
                workload="w", elapsed=0, grace_period_seconds=30, deadline=0, containers=names
            )
        )

    assert started("pause", "server").endswith("1 container and the pause container")
    assert started("server", "side").endswith("2 containers")  # Kubernetes: no pause listed


async def test_list_watch_says_no_resources_found_once(capsys: pytest.CaptureFixture[str]) -> None:
    async def nothing() -> list[WorkloadStatus]:
        return []

    with anyio.move_on_after(0.3):
        await watch_workloads(nothing, "text", period=0.01)
    assert capsys.readouterr().err.count("No resources found") == 1


pytestmark = pytest.mark.anyio


def test_a_label_value_error_says_the_limit() -> None:
    from asyncdeploy import PlanError

    with pytest.raises(PlanError) as raised:
        WorkloadPlan(
            name="w", labels={"team": "x" * 64}, containers=[Container(name="s", image="a")]
        )
    assert "is 64 characters" in str(raised.value) and "at most 63 characters" in str(raised.value)
