"""The propagation window: how long a draining server keeps serving new requests.

A balancer keeps sending new requests to a server until it has taken it out of rotation:
HAProxy after ``fall`` failed checks ``inter`` apart (6 s at its defaults, 2 s x 3), kube-proxy
once the EndpointSlice update reached it, nginx (no active check) only after a request failed.
Refusing those requests with 503 loses them for every client that does not retry. So when a
drain starts, readiness fails at once but new requests are still *served* ("serving while
terminating") until the window closes, which happens at the first of:

- **evidence that every balancer stopped**, and no new request for ``quiet_seconds`` since:

  - the balancer's check is declared (``PropagationWindow(balancer=BalancerCheck(interval,
    fall))``, or the drain command's ``balancer-interval=``/``balancer-fall=``): a readiness
    probe was answered "not ready" and ``fall`` x ``interval`` + :data:`CHECK_MARGIN` passed
    since the drain start, by when that check has certainly taken the server out;
  - the deployer saw the Pod leave every Service's ready endpoints (the ``traffic-left``
    command; Kubernetes' ``TrafficLeft``) and :data:`ENDPOINTS_MARGIN` passed for kube-proxy
    to apply it;

- ``max_seconds`` after the drain start;
- the drain deadline, a cut, or the server stopping.

One failed probe is *not* evidence: a balancer needs ``fall`` of them, and which prober sent a
probe cannot be told (on Docker and Podman every connection from the host, each balancer's
checks and each client's requests alike, arrives from the bridge's gateway address). Without a
declared check or the deployer's word, the window runs to its maximum.

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

__all__ = [
    "CHECK_MARGIN",
    "ENDPOINTS_MARGIN",
    "BalancerCheck",
    "PropagationWindow",
    "WindowClose",
    "WindowTracker",
]

#: Seconds past ``fall`` x ``interval`` for the checks' own latency and a loaded host.
CHECK_MARGIN = 1.0
#: Seconds from the Pod leaving the ready endpoints until every kube-proxy applied it
#: (iptables/nftables modes sync at most once a second by default).
ENDPOINTS_MARGIN = 2.0


def _non_negative(instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    if not value >= 0 or math.isinf(value):
        raise ValueError(f"{attribute.name} must be a finite number >= 0, not {value!r}")


def _positive(instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    if not value > 0 or math.isinf(value):
        raise ValueError(f"{attribute.name} must be a finite number > 0, not {value!r}")


def _at_least_one(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if type(value) is not int or not 1 <= value <= 1000:  # bool is no count
        raise ValueError(f"{attribute.name} must be a whole number 1-1000, not {value!r}")


@attrs.frozen(kw_only=True)
class BalancerCheck:
    """A balancer's active health check as it is configured: a probe every ``interval``
    seconds, the server out after ``fall`` failed ones (HAProxy's ``inter``/``fall``)."""

    interval: float = attrs.field(validator=_positive)
    fall: int = attrs.field(default=3, validator=_at_least_one)

    @property
    def takes_out_within(self) -> float:
        """Seconds from the drain start by which the check has taken the server out: its next
        probe within one interval, ``fall - 1`` more after it, and the margin."""
        return self.fall * self.interval + CHECK_MARGIN


@attrs.frozen(kw_only=True)
class PropagationWindow:
    """The window's bounds and the evidence it may close early on.

    ``max_seconds`` (10 s) holds HAProxy at its defaults (2 s x 3 = 6 s, plus the checks'
    latency) and an endpoint update reaching kube-proxy, inside the usual 30 s grace period.
    ``quiet_seconds`` (2 s): after the evidence, the window stays open while new requests still
    arrive (a sender nobody declared). ``balancer``: the check of the balancer in front, when
    known; without it (or the deployer's ``traffic-left``) the window runs to its maximum.
    """

    max_seconds: float = attrs.field(default=10.0, validator=_non_negative)
    quiet_seconds: float = attrs.field(default=2.0, validator=_non_negative)
    balancer: BalancerCheck | None = None
    endpoints_margin: float = attrs.field(default=ENDPOINTS_MARGIN, validator=_non_negative)

    @classmethod
    def refuse_at_once(cls) -> PropagationWindow:
        """No window: new requests are refused from the drain start (behind a retrying gateway)."""
        return cls(max_seconds=0.0)

    @property
    def refuses_at_once(self) -> bool:
        return self.max_seconds == 0


class WindowClose(enum.Enum):
    """Why the window closed."""

    #: The declared balancer check has taken the server out (a probe failed, fall x interval
    #: passed) and no new request came for the quiet period.
    BALANCER_CHECK = "balancer-check"
    #: The deployer saw the endpoints leave, the margin passed, and no new request came for
    #: the quiet period.
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
        self.check = window.balancer
        self.endpoints_margin = window.endpoints_margin
        self.first_failed_probe: float | None = None
        self.traffic_left: float | None = None
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

    def declare_check(self, check: BalancerCheck) -> None:
        """The balancer's check, told with the drain; of two, the slower one holds."""
        if self.check is None or check.takes_out_within > self.check.takes_out_within:
            self.check = check

    def evidence(self) -> tuple[float, WindowClose] | None:
        """When every balancer has certainly stopped sending, and by which evidence."""
        found: list[tuple[float, WindowClose]] = []
        if self.check is not None and self.first_failed_probe is not None:
            out = max(self.first_failed_probe, self.started + self.check.takes_out_within)
            found.append((out, WindowClose.BALANCER_CHECK))
        if self.traffic_left is not None:
            found.append((self.traffic_left + self.endpoints_margin, WindowClose.TRAFFIC_LEFT))
        return min(found, key=lambda item: item[0], default=None)

    def due(self) -> tuple[float, WindowClose]:
        """When the window closes if nothing else arrives, and why."""
        due, reason = self.max_end, WindowClose.MAX
        if self.deadline is not None and self.deadline < due:
            due, reason = self.deadline, WindowClose.DEADLINE
        evidence = self.evidence()
        if evidence is not None:
            last_activity = max(self.started, self.last_request or self.started)
            quiet_end = max(evidence[0], last_activity + self.quiet)
            if quiet_end < due:
                due, reason = quiet_end, evidence[1]
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

    def note_traffic_left(self, at: float) -> None:
        if self.traffic_left is None:
            self.traffic_left = at

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

    def traffic_left_after(self) -> float | None:
        """When the deployer said traffic left (negative: before the drain began)."""
        if self.traffic_left is None:
            return None
        return self.traffic_left - self.started
