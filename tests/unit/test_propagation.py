"""Where a container's propagation window falls (``asyncdeploy.plan.propagation``): the rule
``lint``'s budget counts and a delete's live view names, recorded on the engine's container."""

from __future__ import annotations

import json

import pytest

from asyncdeploy import Container, Gate, Port, WorkloadPlan
from asyncdeploy.builtin_images import DEMO_IMAGE
from asyncdeploy.drivers.engine._spec import container_config
from asyncdeploy.drivers.engine._state import snapshot
from asyncdeploy.labels import LABEL_CONTAINER, LABEL_PROPAGATION, LABEL_ROLE
from asyncdeploy.plan.gating import expand_gates
from asyncdeploy.plan.propagation import propagation

DEMO = ["python3", "-m", "asyncdeploy.workload.demo"]


def _container(**kw: object) -> Container:
    fields: dict[str, object] = {"name": "app", "image": "example/server:1", **kw}
    return Container(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("container", "seconds", "during"),
    [
        (_container(image=DEMO_IMAGE), 10.0, "signal"),  # the demo's default
        (_container(image=DEMO_IMAGE, command=DEMO, args=["--propagation-window", "2s"]), 2.0, "signal"),
        (_container(image=DEMO_IMAGE, command=[*DEMO, "--refuse-at-once"]), 0.0, "signal"),
        (
            _container(pre_stop=["python3", "-m", "asyncdeploy.workload.drain_cmd", "--propagation-wait", "7s"]),
            7.0,
            "pre_stop",
        ),
        (
            _container(ports=[Port(container_port=8000)], gate=Gate(upstream=8001, propagation_seconds=4)),
            4.0,
            "pre_stop",
        ),
    ],
)  # fmt: skip
def test_the_window_and_the_step_it_falls_in(
    container: Container, seconds: float, during: str
) -> None:
    window = propagation(container)
    assert window is not None and (window.seconds, window.during) == (seconds, during)


def test_a_server_of_ones_own_holds_no_window_the_plan_knows_of() -> None:
    assert propagation(_container()) is None
    assert propagation(_container(pre_stop=["sleep", "5"])) is None


def test_the_gates_window_survives_its_expansion_into_a_drain_hook() -> None:
    """The engine drivers create from the expanded plan: the gated container then has a
    ``pre_stop_http`` to the gate, whose query carries the window."""
    plan = WorkloadPlan(
        name="g",
        containers=[
            _container(ports=[Port(container_port=8000)], gate=Gate(upstream=8001, propagation_seconds=6))
        ],
    )  # fmt: skip
    expanded = next(c for c in expand_gates(plan).containers if c.name == "app")
    assert expanded.gate is None and expanded.pre_stop_http is not None
    window = propagation(expanded)
    assert window is not None and (window.seconds, window.during) == (6.0, "pre_stop")


def _listed(labels: dict[str, str]) -> dict[str, object]:
    return {"Id": "c1", "State": "running", "Labels": {LABEL_CONTAINER: "app", LABEL_ROLE: "run", **labels}}  # fmt: skip


def test_the_container_records_its_window_and_a_delete_reads_it_back() -> None:
    plan = WorkloadPlan(name="d", containers=[_container(image=DEMO_IMAGE)])
    labels = container_config(plan, plan.containers[0], "pause-id")["Labels"]
    assert json.loads(labels[LABEL_PROPAGATION]) == {"seconds": 10.0, "during": "signal"}
    (ref,) = snapshot("d", [_listed(labels)]).containers
    assert ref.propagation == (10.0, "signal")


@pytest.mark.parametrize(
    "label", ["", "not json", "[1]", '{"seconds": "x"}', '{"during": "signal"}']
)
def test_a_label_that_is_not_ours_to_read_never_breaks_a_delete(label: str) -> None:
    (ref,) = snapshot("d", [_listed({LABEL_PROPAGATION: label})]).containers
    assert ref.propagation is None


def test_no_window_no_label() -> None:
    plan = WorkloadPlan(name="d", containers=[_container()])
    assert LABEL_PROPAGATION not in container_config(plan, plan.containers[0], "p")["Labels"]
