"""What a deployer reports as it happens: one frozen value per step of a drain, the summary
that ends it, and the image pulls of a create.

Every drain event carries the ``workload`` it belongs to and ``elapsed``, the seconds since that
workload's drain started. Events about one container also carry ``container`` and ``role``
(``pause``, ``init``, ``run`` or ``autoheal``). Consumers ``match`` on :data:`DrainEvent`.

Every pull event carries the ``workload`` and ``image`` it belongs to and ``elapsed``, the seconds
since that workload's pulls started. An image is pulled once per create, however many containers
use it. Pull events never carry credentials: the registry is named, the user and password are not.
Consumers ``match`` on :data:`PullEvent`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import attrs

from asyncdeploy.labels import ContainerRole

__all__ = [
    "ContainerEnd",
    "ContainerExited",
    "ContainerForceKilled",
    "ContainerOutcome",
    "ContainerRemoved",
    "DrainEvent",
    "DrainFinished",
    "DrainStarted",
    "DrainSummary",
    "Emit",
    "Event",
    "NodeUnreachable",
    "PauseRemoved",
    "PreStopFinished",
    "PreStopStarted",
    "PullEvent",
    "PullFailed",
    "PullFinished",
    "PullProgress",
    "PullStarted",
    "SidecarRemoved",
    "SignalSent",
    "TeardownPending",
    "TrafficLeft",
    "TrafficStillRouted",
    "event_to_dict",
    "ignore_events",
]

ContainerEnd = Literal["exited", "killed", "already-exited", "missing", "unreachable"]
"""How a container ended: ``unreachable`` when the engine stopped answering before its end was
seen (a later delete finishes the job); ``missing`` when it went without its end being seen."""
CONTAINER_ENDS: tuple[ContainerEnd, ...] = (
    "exited",
    "killed",
    "already-exited",
    "missing",
    "unreachable",
)


@attrs.frozen(kw_only=True)
class DrainStarted:
    """The drain of one workload began; every container must be gone by ``deadline``."""

    workload: str
    elapsed: float
    grace_period_seconds: int
    deadline: float  # wall-clock (UNIX) time
    containers: tuple[str, ...]


@attrs.frozen(kw_only=True)
class SidecarRemoved:
    """The autoheal sidecar was removed, before any other container was touched."""

    workload: str
    elapsed: float
    container: str
    role: ContainerRole = "autoheal"


@attrs.frozen(kw_only=True)
class PreStopStarted:
    """A container's ``pre_stop`` hook (a command, or a ``pre_stop_http`` GET) began."""

    workload: str
    elapsed: float
    container: str
    role: ContainerRole = "run"
    #: The propagation window this hook holds, at most (``--propagation-wait``, the gate's):
    #: new requests still served so that balancers notice. None: none known.
    propagation_seconds: float | None = None


@attrs.frozen(kw_only=True)
class PreStopFinished:
    """A pre-stop hook ended: ``exit_code`` is None when it was cut off at the deadline."""

    workload: str
    elapsed: float
    container: str
    exit_code: int | None
    timed_out: bool
    role: ContainerRole = "run"


@attrs.frozen(kw_only=True)
class SignalSent:
    """A container was sent its stop signal (once, never twice), after its hook."""

    workload: str
    elapsed: float
    container: str
    signal: str
    role: ContainerRole = "run"
    #: The propagation window the server holds after this signal, at most (the built-in demo's
    #: ``--propagation-window``): new requests still served so that balancers notice. None:
    #: none known (a server of the user's own: its plan does not say).
    propagation_seconds: float | None = None


@attrs.frozen(kw_only=True)
class ContainerExited:
    """A container exited; ``graceful`` is False when it had to be killed."""

    workload: str
    elapsed: float
    container: str
    exit_code: int | None
    graceful: bool
    role: ContainerRole = "run"


@attrs.frozen(kw_only=True)
class ContainerForceKilled:
    """The deadline passed (or the drain was cancelled) and the container was sent SIGKILL."""

    workload: str
    elapsed: float
    container: str
    reason: str = "deadline"
    role: ContainerRole = "run"


@attrs.frozen(kw_only=True)
class ContainerRemoved:
    """A drained (or killed) container was removed from the engine."""

    workload: str
    elapsed: float
    container: str
    role: ContainerRole = "run"


@attrs.frozen(kw_only=True)
class PauseRemoved:
    """The pause container, holder of the shared namespaces, was removed last."""

    workload: str
    elapsed: float
    container: str
    role: ContainerRole = "pause"


@attrs.frozen(kw_only=True)
class TrafficLeft:
    """Kubernetes: the Pod has left the ready endpoints of every Service that routed to it
    (``services``): from here on no new connection is sent to it (kube-proxy and the balancers
    following EndpointSlices still need their own moment to notice)."""

    workload: str
    elapsed: float
    services: tuple[str, ...]


@attrs.frozen(kw_only=True)
class TrafficStillRouted:
    """Kubernetes, a warning: ``window`` seconds into the drain (the propagation window) the
    Pod was still a ready endpoint of ``services``: something still sends it traffic (an
    EndpointSlice nobody updates, a controller that is not running)."""

    workload: str
    elapsed: float
    services: tuple[str, ...]
    window: float


@attrs.frozen(kw_only=True)
class TeardownPending:
    """Kubernetes: every container of the workload ended, but its Pod was still there when the
    wait for it ended, ``timeout`` seconds into the drain (the caller's ``--timeout``, else the
    grace period plus the teardown margin): the kubelet is still tearing it down (volumes,
    devices, the sandbox) and the Pod keeps its name until then. Not a failed drain: the summary
    says ``tearing_down`` and carries no error; the CLI exits 4."""

    workload: str
    elapsed: float
    timeout: float


@attrs.frozen(kw_only=True)
class NodeUnreachable:
    """Kubernetes: the workload's Pod was still there when the wait for it ended, and its
    ``node`` had stopped reporting (its kubelet's lease not renewed for ``silent_for`` seconds,
    or the node's Ready condition ``Unknown``): nobody saw what became of the containers that
    were not seen to end, and the Pod stays (Terminating) until that kubelet reports again. Not
    "tearing down": the summary carries the error and ``unreachable_node``; the CLI exits 5.
    ``remedy`` says what to run: bring the kubelet back, or, for a node gone for good,
    ``kubectl delete pod --force`` (which removes the object, not what may still run there)."""

    workload: str
    elapsed: float
    node: str
    pod: str
    silent_for: float | None
    remedy: str


@attrs.frozen(kw_only=True)
class ContainerOutcome:
    """How one container ended: ``seconds`` from the start of the drain to its exit."""

    name: str
    role: ContainerRole
    outcome: ContainerEnd
    exit_code: int | None
    seconds: float | None


@attrs.frozen(kw_only=True)
class DrainSummary:
    """The result of draining one workload."""

    workload: str
    grace_period_seconds: int
    seconds: float
    containers: tuple[ContainerOutcome, ...]
    errors: tuple[str, ...] = ()
    tearing_down: bool = False  # every container ended; the Pod was still going (TeardownPending)
    unreachable_node: str | None = None  # the Pod's node had stopped reporting (NodeUnreachable)

    def count(self, outcome: ContainerEnd) -> int:
        """How many containers ended this way (``exited``, ``killed``, ...)."""
        return sum(1 for c in self.containers if c.outcome == outcome)

    @property
    def ok(self) -> bool:
        """Whether every step of the drain succeeded (what was killed at the deadline counts
        as done: a kill is no error)."""
        return not self.errors


@attrs.frozen(kw_only=True)
class DrainFinished:
    """The last event of a workload's drain, carrying its summary."""

    workload: str
    elapsed: float
    summary: DrainSummary


DrainEvent = (
    DrainStarted
    | SidecarRemoved
    | PreStopStarted
    | PreStopFinished
    | SignalSent
    | ContainerExited
    | ContainerForceKilled
    | ContainerRemoved
    | PauseRemoved
    | TrafficLeft
    | TrafficStillRouted
    | TeardownPending
    | NodeUnreachable
    | DrainFinished
)


# --- image pulls ------------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class PullStarted:
    """The engine began pulling ``image`` from ``registry`` (``docker.io`` for Docker Hub)."""

    workload: str
    elapsed: float
    image: str
    registry: str
    policy: str  # IfNotPresent (the image was absent) or Always


@attrs.frozen(kw_only=True)
class PullProgress:
    """Bytes and layers downloaded so far.

    ``bytes_total`` counts the layers whose size the engine has announced so far (Docker
    announces a layer's size when its download starts); it is None, like ``bytes_done``, when the
    engine reports no byte counts at all (Podman 4.3 reports finished layers only).
    """

    workload: str
    elapsed: float
    image: str
    bytes_done: int | None
    bytes_total: int | None
    layers_done: int
    layers_total: int


@attrs.frozen(kw_only=True)
class PullFinished:
    """``image`` is on the engine; ``digest`` is its registry digest (``sha256:...``)."""

    workload: str
    elapsed: float
    image: str
    digest: str
    seconds: float


@attrs.frozen(kw_only=True)
class PullFailed:
    """The pull of ``image`` failed with the engine's or registry's ``reason``; nothing was created."""

    workload: str
    elapsed: float
    image: str
    reason: str


PullEvent = PullStarted | PullProgress | PullFinished | PullFailed


Event = DrainEvent | PullEvent
"""Everything a deployer reports as it happens: drains, and the image pulls of a create."""


def event_to_dict(event: Event) -> dict[str, Any]:
    """Plain JSON-ready data: ``event`` (the type's name) first, then the event's fields.

    ``DrainFinished`` is flattened: its summary's containers and totals sit at the top level.
    """
    out: dict[str, Any] = {"event": type(event).__name__}
    if isinstance(event, DrainFinished):
        summary = event.summary
        out.update(
            workload=event.workload,
            elapsed=round(event.elapsed, 3),
            grace_period_seconds=summary.grace_period_seconds,
            seconds=round(summary.seconds, 3),
            containers=[
                {
                    "name": c.name,
                    "role": c.role,
                    "outcome": c.outcome,
                    "exit_code": c.exit_code,
                    "seconds": None if c.seconds is None else round(c.seconds, 3),
                }
                for c in summary.containers
            ],
            totals={outcome: summary.count(outcome) for outcome in CONTAINER_ENDS},
            errors=list(summary.errors),
            tearing_down=summary.tearing_down,
            unreachable_node=summary.unreachable_node,
        )
        return out
    for key, value in attrs.asdict(event, recurse=False).items():
        out[key] = round(value, 3) if key == "elapsed" else value
    for key in ("containers", "services"):
        if key in out:
            out[key] = list(out[key])
    return out


Emit = Callable[[Event], None]
"""Hands an event to the consumer without ever waiting for it (a slow consumer never delays a kill)."""


def ignore_events(_: Event) -> None:
    """An :data:`Emit` for drains nobody listens to (a replacement inside ``apply``)."""
