"""``verify --balancer service``: kube-proxy's choice among a Service's endpoints (pure)."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from asyncdeploy.drivers.kubernetes._traffic import EndpointState, endpoint_states
from asyncdeploy.plan import WorkloadPlan
from asyncdeploy.verify.service import ServiceFront, ServiceTarget, service_route


def _slice(*endpoints: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    return {
        "metadata": {"name": "s-1", "labels": {"kubernetes.io/service-name": "s"}},
        "endpoints": [
            {"targetRef": {"kind": "Pod", "name": name}, "conditions": conditions}
            for name, conditions in endpoints
        ],
    }


def test_endpoint_conditions_read_as_the_api_defines_them() -> None:
    states = endpoint_states(
        [
            _slice(
                ("a", {}),
                ("b", {"ready": False, "serving": True, "terminating": True}),
                ("c", {"ready": False}),
            )
        ]
    )
    assert states == {
        "a": EndpointState(ready=True, serving=True, terminating=False),
        "b": EndpointState(ready=False, serving=True, terminating=True),
        "c": EndpointState(ready=False, serving=False, terminating=False),
    }


READY = EndpointState(ready=True, serving=True, terminating=False)
LEAVING = EndpointState(ready=False, serving=True, terminating=True)
GONE = EndpointState(ready=False, serving=False, terminating=True)


def test_ready_endpoints_first_then_serving_terminating_ones_then_a_refusal() -> None:
    target = ServiceTarget(refused_url="http://127.0.0.1:9", ports={"a": 1001, "b": 1002})
    target.update({"a": READY, "b": LEAVING, "unknown": READY})
    assert {target.pick().name for _ in range(50)} == {"a"}  # type: ignore[union-attr]
    target.update({"a": GONE, "b": LEAVING})
    picked = target.pick()
    assert picked is not None and (picked.name, picked.base_url) == ("b", "http://127.0.0.1:1002")
    target.update({"a": GONE})
    refused = target.pick()
    assert refused is not None and refused.base_url == "http://127.0.0.1:9"
    assert [(s.server, s.status) for s in target.states] == [
        ("a", "READY"),
        ("b", "DOWN (terminating, still serving)"),
        ("a", "DOWN (terminating)"),
        ("b", "DOWN (not an endpoint)"),
    ]


def test_both_ready_endpoints_take_traffic() -> None:
    target = ServiceTarget(refused_url="http://127.0.0.1:9", ports={"a": 1001, "b": 1002})
    target.update({"a": READY, "b": READY})
    assert {target.pick().name for _ in range(100)} == {"a", "b"}  # type: ignore[union-attr]


def test_the_plan_must_have_a_service_sending_to_the_traffic_port() -> None:
    base = {"name": "p", "containers": [{"name": "c", "image": "x:1"}]}
    with pytest.raises(ValueError, match="needs a plan with a `service:`"):
        service_route(WorkloadPlan.from_mapping(base), 8080)
    plan = WorkloadPlan.from_mapping(
        {**base, "service": {"ports": [{"port": 80, "target_port": 9000}]}}
    )
    with pytest.raises(ValueError, match="not to the traffic port 8080"):
        service_route(plan, 8080)
    assert service_route(plan, 9000) == "p"


@pytest.mark.anyio
async def test_two_adds_at_once_are_both_woken_by_the_change_that_makes_them_ready() -> None:
    """Each ``add`` waits for its Pod to be a ready endpoint; one change listing both must end
    both waits, whichever started waiting first."""
    front = ServiceFront(None, "s", ServiceTarget(refused_url="http://127.0.0.1:9"))
    ready = EndpointState(ready=True, serving=True, terminating=False)
    done: list[str] = []

    async def add(name: str, port: int) -> None:
        await front.add(name, port)
        done.append(name)

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(add, "a", 1)
            tg.start_soon(add, "b", 2)
            await anyio.wait_all_tasks_blocked()
            front.saw({"a": ready, "b": ready})
    assert sorted(done) == ["a", "b"]
