"""The drain kit's values: states, outcomes, the statistics snapshot, state-change events."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

import anyio
import attrs

__all__ = ["DrainFlag", "DrainState", "DrainStatistics", "RequestOutcome", "StateChanged"]


class DrainState(enum.Enum):
    STARTING = "starting"
    SERVING = "serving"
    DRAINING = "draining"
    STOPPED = "stopped"


class RequestOutcome(enum.Enum):
    """How an admitted request ended."""

    COMPLETED = "completed"
    CUT_AT_DEADLINE = "cut_at_deadline"
    CLIENT_DISCONNECTED = "client_disconnected"
    FAILED = "failed"


@attrs.frozen(kw_only=True)
class DrainStatistics:
    """A consistent snapshot of the controller (also the control socket's ``status`` payload)."""

    state: DrainState
    in_flight: int
    admitted: int
    completed: int
    rejected_while_draining: int
    rejected_while_starting: int
    cut_at_deadline: int
    client_disconnected: int
    failed: int
    #: Wall-clock time (epoch seconds) the drain began, None before.
    drain_started_at: float | None
    #: Seconds from the drain start until in-flight reached zero (or until now, if not yet).
    drain_duration: float | None
    #: Seconds left until streams still open are cut; None without a deadline.
    deadline_remaining: float | None
    #: Draining (or stopped) with nothing in flight.
    drained: bool
    #: Set by :meth:`DrainController.mark_broken`; liveness fails while set.
    broken_reason: str | None
    #: New work is admitted now: SERVING, or DRAINING with the propagation window open.
    accepting: bool = False
    #: Admitted after the drain began, inside the propagation window.
    admitted_while_draining: int = 0
    #: The propagation window, in seconds from the drain start (None before a drain):
    #: when the last new request arrived (the propagation actually observed; 0: none came),
    #: when a readiness probe first saw the drain (None: no probe came), when the window closed
    #: (None: still open) and why (a :class:`WindowClose` value).
    propagation_observed: float | None = None
    readiness_failed_after: float | None = None
    window_closed_after: float | None = None
    window_close_reason: str | None = None
    #: When the deployer said traffic left the server's endpoints (seconds from the drain
    #: start; negative: before it), and the balancer check declared for the drain.
    traffic_left_after: float | None = None
    balancer_interval: float | None = None
    balancer_fall: int | None = None

    def to_dict(self) -> dict[str, Any]:
        data = attrs.asdict(self, recurse=False)
        data["state"] = self.state.value
        return data

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> DrainStatistics:
        """Parse :meth:`to_dict` output (unknown keys are ignored)."""
        names = {field.name for field in attrs.fields(cls)}
        values = {key: value for key, value in data.items() if key in names}
        values["state"] = DrainState(values["state"])
        return cls(**values)


@attrs.frozen(kw_only=True)
class StateChanged:
    """The controller moved from ``previous`` to ``current`` (``previous`` None: the initial state)."""

    previous: DrainState | None
    current: DrainState
    #: ``time.monotonic()`` and wall-clock time of the change.
    at: float
    wall_time: float
    statistics: DrainStatistics


class DrainFlag:
    """Read-only view of the "draining" event, for internal queues that must stop fetching work."""

    __slots__ = ("_event",)

    def __init__(self, event: anyio.Event) -> None:
        self._event = event

    def is_set(self) -> bool:
        return self._event.is_set()

    async def wait(self) -> None:
        await self._event.wait()
