"""The states a kubectl user reads (issue 24 item 6), from the status values alone: READY counts
what the plan checks (an image's own HEALTHCHECK is shown, not counted; a gated container is
ready when its gate is), STATE says draining with the time left, AGE as kubectl writes it."""

from __future__ import annotations

import json

from asyncdeploy._results import ContainerStatus, WorkloadStatus
from asyncdeploy.cli._states import age, ready_text, state_text, status_dict
from asyncdeploy.drivers.engine._state import workload_status
from asyncdeploy.labels import LABEL_CONTAINER, LABEL_LIVENESS, LABEL_ROLE, LABEL_WORKLOAD


def status(*containers: ContainerStatus, **kw: object) -> WorkloadStatus:
    return WorkloadStatus(
        name="llama",
        driver="docker",
        labels={},
        grace_period_seconds=30,
        plan_digest=None,
        containers=containers,
        **kw,  # type: ignore[arg-type]
    )


def run(name: str, health: str | None = None, checks: tuple[str, ...] = ()) -> ContainerStatus:
    return ContainerStatus(
        name=name, role="run", image="i", state="running", health=health, checks=checks
    )


def test_an_images_own_health_check_is_shown_not_counted() -> None:
    assert ready_text(status(run("engine", "unhealthy"))) == "1/1"
    assert ready_text(status(run("engine", "unhealthy", ("liveness",)))) == "0/1"
    assert ready_text(status(run("engine", "starting", ("readiness",)))) == "0/1"


def test_a_gated_container_is_ready_when_its_gate_is() -> None:
    gate = ContainerStatus(
        name="engine-gate", role="sidecar", image="g", state="running", health="healthy",
        checks=("readiness",),
    )  # fmt: skip
    engine = run("engine", "unhealthy")  # llama.cpp's HEALTHCHECK on a port the plan moved
    assert ready_text(status(gate, engine)) == "1/1"
    down = ContainerStatus(name="engine-gate", role="sidecar", image="g", state="exited")
    assert ready_text(status(down, run("engine"))) == "0/1"


def test_the_engine_counts_health_only_where_the_plan_asked_for_it() -> None:
    def item(labels: dict[str, str]) -> dict[str, object]:
        return {
            "Id": "x",
            "Labels": {LABEL_WORKLOAD: "w", LABEL_ROLE: "run", LABEL_CONTAINER: "s", **labels},
            "State": "running",
            "Status": "Up 3 minutes (unhealthy)",
            "Created": 1_700_000_000,
        }

    image_only = workload_status("docker", "w", [item({})])
    assert image_only.containers[0].health == "unhealthy" and image_only.ready == (1, 1)
    planned = workload_status("docker", "w", [item({LABEL_LIVENESS: "true"})])
    assert planned.ready == (0, 1) and planned.created == 1_700_000_000


def test_a_drain_is_said_with_its_time_left_and_in_json() -> None:
    draining = status(run("engine"), draining_until=1_000.0, created=900.0)
    assert state_text(draining, now=988.0) == "draining (12s left)"
    data = json.loads(json.dumps(status_dict(draining, now=988.0)))
    assert data["state"] == "draining" and data["drain_seconds_left"] == 12.0
    assert data["age"] == "88s" and data["ready"] == {"ready": 1, "total": 1}
    assert data["created"].startswith("1970-01-01T00:15:00")
    paused = ContainerStatus(name="pause", role="pause", image="p", state="paused")
    assert status(paused).state == "draining", "a claimed pause, its record not read"
    dead = status(paused, unfinished="half-drained: its drain's owner (pid 1 on h) died")
    assert state_text(dead, now=0) == "half-drained"


def test_age_is_written_as_kubectl_writes_it() -> None:
    cases = {
        0: "0s", 119: "119s", 125: "2m5s", 600: "10m", 179 * 60: "179m",
        3 * 3600 + 60: "3h1m", 30 * 3600: "30h", 3 * 86400 + 3600: "3d1h", 400 * 86400: "400d",
        800 * 86400: "2y",
    }  # fmt: skip
    assert {seconds: age(seconds) for seconds in cases} == cases
    assert age(None) == "-"
