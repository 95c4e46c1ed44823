"""What verify does to the workloads while traffic flows, one small function per mode.

``delete`` drains the first instance, ``replace`` starts a successor (``<plan>-next``) and drains
the first instance once the successor is ready and routed to, ``delete-all`` drains every
instance of the run at once. Each is a :class:`Disruption` in :data:`DISRUPTIONS`: the drain as
one event stream, and what the run must prepare and expect around it. Each drain begins once a
request is in flight on what it drains (waited for a while: sparse traffic may leave an
instance idle for seconds), or the run would test nothing of a drain.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal

import anyio
import attrs

from asyncdeploy._events import DrainEvent
from asyncdeploy._operations import Operation
from asyncdeploy._results import WorkloadStatus
from asyncdeploy.deployer import Deployer
from asyncdeploy.plan import WorkloadPlan
from asyncdeploy.verify.front import Front

__all__ = ["DISRUPTIONS", "Disruption", "DrainStream", "Mode", "Scene"]

Mode = Literal["delete", "replace", "delete-all"]
DrainStream = Operation[DrainEvent, Any]  # a Drain, or a Replacement (the old one's drain)


@attrs.frozen(kw_only=True)
class Scene:
    """What a disruption acts on: the run's instances (the first is the one disrupted), the
    successor a replace starts, and the front the traffic enters by."""

    deployer: Deployer
    names: Sequence[str]
    successor: tuple[WorkloadPlan, int]  # the plan and its published port
    front: Front
    selector: dict[str, str]  # every workload of this run
    grace_period_seconds: int | None
    ready_timeout: float
    say: Callable[[str], None]
    #: Returns once a request is in flight on one of the named workloads (or after a while).
    in_flight_on: Callable[[Sequence[str]], Awaitable[None]]


@attrs.frozen
class Disruption:
    """One mode: its drain, whether it starts the successor (so the balancer must know of it
    from the start), whether instances are left serving afterwards (traffic goes on a while
    to show it), and the workloads that must hold a request before the drain is started (none:
    it waits itself, once its successor is routed to)."""

    drain: Callable[[Scene], DrainStream]
    starts_successor: bool
    leaves_serving: Callable[[int], bool]  # given the number of instances
    busy_first: Callable[[Scene], Sequence[str]] = lambda scene: ()


def _delete_first(scene: Scene) -> DrainStream:
    scene.say(f"draining {scene.names[0]} with requests in flight")
    return scene.deployer.terminate(scene.names[0], grace_period_seconds=scene.grace_period_seconds)


def _delete_every(scene: Scene) -> DrainStream:
    scene.say(f"draining {', '.join(scene.names)} with requests in flight")
    return scene.deployer.terminate_all(
        scene.selector, grace_period_seconds=scene.grace_period_seconds
    )


def _replace_first(scene: Scene) -> DrainStream:
    new, new_port = scene.successor
    old = scene.names[0]

    async def route_to_new(status: WorkloadStatus) -> None:
        # a request in flight on the old one first, while traffic is shared by two and not
        # three (sparse traffic left the old idle for the whole wait, one run in twenty); a
        # stream caught here outlives the routing below
        await scene.in_flight_on([old])
        await scene.front.add(new.name, new_port)
        if scene.front.name is None:
            await anyio.sleep(1)  # the router follows readiness: let it see it
        scene.say(f"{new.name} ready; draining {old} with requests in flight")

    scene.say(f"replacing {old} by {new.name} (Deployer.replacing)")
    return scene.deployer.replacing(
        new,
        old=[old],
        new_name=new.name,
        ready_timeout=scene.ready_timeout,
        grace_period_seconds=scene.grace_period_seconds,
        on_ready=route_to_new,
    )


DISRUPTIONS: dict[Mode, Disruption] = {
    "delete": Disruption(
        _delete_first,
        starts_successor=False,
        leaves_serving=lambda n: n > 1,
        busy_first=lambda scene: scene.names[:1],
    ),
    "replace": Disruption(_replace_first, starts_successor=True, leaves_serving=lambda n: True),
    "delete-all": Disruption(
        _delete_every,
        starts_successor=False,
        leaves_serving=lambda n: False,
        busy_first=lambda scene: scene.names,
    ),
}
