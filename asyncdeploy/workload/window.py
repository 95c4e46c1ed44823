"""The propagation window: how long a draining server keeps serving new requests.

A balancer keeps sending new requests to a server until it has seen its readiness fail: at
least one health-check interval (HAProxy ``inter`` x ``fall``; on Kubernetes, the endpoint
update reaching every kube-proxy). Refusing those requests with 503 loses them for every client
that does not retry (nginx does not retry a POST, kube-proxy never retries). So when a drain
starts, readiness fails at once but new requests are still *served* ("serving while
terminating") until the window closes, which happens at the first of:

- traffic has visibly left: a readiness probe was answered "not ready" at least once, and no
  new request arrived for ``quiet_seconds`` (counted from the drain start or the last request);
- ``max_seconds`` after the drain start;
- the drain deadline, a cut, or the server stopping.

After it, new requests are refused with 503 + ``Retry-After`` + ``Connection: close``.
``PropagationWindow.refuse_at_once()`` (``max_seconds=0``) refuses from the drain start, for a
server behind a gateway that retries a 503 elsewhere.

:class:`WindowTracker` is the pure bookkeeping (times are ``time.monotonic()`` values); the
:class:`~asyncdeploy.workload.state.DrainController` owns one per drain.
"""

from __future__ import annotations

import enum
import math

import attrs

__all__ = ["PropagationWindow", "WindowClose", "WindowTracker"]


def _non_negative(instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    if not value >= 0 or math.isinf(value):
        raise ValueError(f"{attribute.name} must be a finite number >= 0, not {value!r}")


@attrs.frozen(kw_only=True)
class PropagationWindow:
    """The window's bounds; the defaults suit a balancer checking every 0.5-2 s, fall 1-3.

    ``max_seconds`` (10 s) holds the slowest of those (2 s x 3 falls = 6 s) plus the time an
    endpoint update takes to reach kube-proxy, and stays well inside the usual 30 s grace
    period. ``quiet_seconds`` (2 s) is as long as the slowest common check interval, so a
    second balancer that has not probed yet is still sending when the first one stopped.
    """

    max_seconds: float = attrs.field(default=10.0, validator=_non_negative)
    quiet_seconds: float = attrs.field(default=2.0, validator=_non_negative)

    @classmethod
    def refuse_at_once(cls) -> PropagationWindow:
        """No window: new requests are refused from the drain start (behind a retrying gateway)."""
        return cls(max_seconds=0.0)

    @property
    def refuses_at_once(self) -> bool:
        return self.max_seconds == 0


class WindowClose(enum.Enum):
    """Why the window closed."""

    #: A readiness probe saw the drain and no new request came for the quiet period.
    TRAFFIC_LEFT = "traffic-left"
    #: ``max_seconds`` passed.
    MAX = "max"
    #: Configured (or requested) with no window.
    REFUSE_AT_ONCE = "refuse-at-once"
    #: The drain began before the server ever served: no balancer sends it anything.
    NEVER_SERVED = "never-served"
    #: The drain deadline passed, a cut was ordered, or the server stopped.
    DEADLINE = "deadline"
    CUT = "cut"
    STOPPED = "stopped"


class WindowTracker:
    """One drain's window: opened at ``started``, closed lazily when :meth:`refresh` finds it due."""

    def __init__(self, started: float, window: PropagationWindow, deadline: float | None) -> None:
        self.started = started
        self.quiet = window.quiet_seconds
        self.max_end = started + window.max_seconds
        self.deadline = deadline
        self.first_failed_probe: float | None = None
        self.last_request: float | None = None
        self.admitted = 0
        self.closed_at: float | None = None
        self.reason: WindowClose | None = None
        if window.refuses_at_once:
            self.close(started, WindowClose.REFUSE_AT_ONCE)

    @property
    def is_open(self) -> bool:
        return self.closed_at is None

    def shorten(self, max_seconds: float) -> None:
        """Bring the maximum forward (a later drain request never extends the window)."""
        self.max_end = min(self.max_end, self.started + max(0.0, max_seconds))

    def due(self) -> tuple[float, WindowClose]:
        """When the window closes if nothing else arrives, and why."""
        due, reason = self.max_end, WindowClose.MAX
        if self.deadline is not None and self.deadline < due:
            due, reason = self.deadline, WindowClose.DEADLINE
        if self.first_failed_probe is not None:
            last_activity = max(self.started, self.last_request or self.started)
            quiet_end = max(self.first_failed_probe, last_activity + self.quiet)
            if quiet_end < due:
                due, reason = quiet_end, WindowClose.TRAFFIC_LEFT
        return due, reason

    def refresh(self, now: float) -> bool:
        """Close the window if it is due at ``now`` (at the time it was due); True if closed."""
        if self.closed_at is None:
            due, reason = self.due()
            if now >= due:
                self.close(due, reason)
        return self.closed_at is not None

    def close(self, at: float, reason: WindowClose) -> None:
        if self.closed_at is None:
            self.closed_at = max(at, self.started)
            self.reason = reason

    def note_request(self, now: float) -> None:
        self.admitted += 1
        self.last_request = now

    def note_failed_probe(self, now: float) -> None:
        if self.first_failed_probe is None:
            self.first_failed_probe = now

    # -- what was observed (seconds from the drain start) ------------------------------------
    def propagation_observed(self, now: float) -> float:
        """Until the last new request arrived (0: none came after the drain start)."""
        if self.last_request is None:
            return 0.0
        return self.last_request - self.started

    def open_for(self, now: float) -> float:
        end = now if self.closed_at is None else self.closed_at
        return max(0.0, end - self.started)

    def failed_probe_after(self) -> float | None:
        if self.first_failed_probe is None:
            return None
        return self.first_failed_probe - self.started
