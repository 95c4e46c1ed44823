"""The drain state machine: STARTING → SERVING → DRAINING → STOPPED.

One :class:`DrainController` per process. Every trigger (SIGTERM, the control socket, a test)
calls the same idempotent :meth:`DrainController.begin_drain`; the ASGI middleware (or any other
front, such as a proxy) asks it to admit and release each unit of work and to answer readiness;
all methods are synchronous and non-blocking except ``wait_*`` ones and
:meth:`DrainController.open_state_changes`, so they can run from a signal callback.

DRAINING has two phases: while its propagation window is open (see
:mod:`asyncdeploy.workload.window`) readiness fails but new work is still admitted; once it has
closed, new work is refused. "Drained" means the window has closed and nothing is in flight.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import attrs
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from ._values import DrainFlag, DrainState, DrainStatistics, RequestOutcome, StateChanged
from .histogram import DRAIN_BUCKETS, REQUEST_BUCKETS, Histogram, HistogramSnapshot
from .window import BalancerCheck, PropagationWindow, WindowClose, WindowTracker

__all__ = [
    "Admission",
    "DrainController",
    "DrainFlag",
    "DrainState",
    "DrainStatistics",
    "RequestOutcome",
    "StateChanged",
]

logger = logging.getLogger("asyncdeploy.workload")

_DEFAULT_WINDOW = PropagationWindow()


class Admission:
    """One admitted unit of work; release it exactly once (later calls are ignored)."""

    __slots__ = ("_admitted_at", "_controller", "_outcome")

    def __init__(self, controller: DrainController) -> None:
        self._controller = controller
        self._outcome: RequestOutcome | None = None
        self._admitted_at = time.monotonic()

    @property
    def outcome(self) -> RequestOutcome | None:
        return self._outcome

    @property
    def released(self) -> bool:
        return self._outcome is not None

    def release(self, outcome: RequestOutcome = RequestOutcome.COMPLETED) -> bool:
        """Decrement in-flight and count ``outcome``; False if it was already released."""
        if self._outcome is not None:
            return False
        self._outcome = outcome
        self._controller._release(outcome, time.monotonic() - self._admitted_at)
        return True


class DrainController:
    """State, in-flight counter, counters, drain deadline and change notifications.

    ``drain_timeout`` is the default time from the drain start until the streams still open are
    cut (None: never cut). It applies to whichever trigger starts the drain first.
    ``propagation`` is the window during which a draining server still serves new work
    (default: :class:`PropagationWindow`'s; ``PropagationWindow.refuse_at_once()`` for none).
    """

    def __init__(
        self,
        *,
        drain_timeout: float | None = None,
        propagation: PropagationWindow = _DEFAULT_WINDOW,
    ) -> None:
        if drain_timeout is not None and drain_timeout < 0:
            raise ValueError("drain_timeout must be >= 0")
        self._drain_timeout = drain_timeout
        self._propagation = propagation
        self._window: WindowTracker | None = None
        self._traffic_left: float | None = None  # monotonic: the deployer's word, kept for a
        # drain that has not begun yet (the endpoints may leave before the preStop hook runs)
        self._last_release: float | None = None  # monotonic
        self._state = DrainState.STARTING
        self._in_flight = 0
        self._counts = dict.fromkeys(RequestOutcome, 0)
        self._admitted = 0
        self._rejected_draining = 0
        self._rejected_starting = 0
        self._broken_reason: str | None = None
        self._drain_started: float | None = None  # monotonic
        self._drain_started_wall: float | None = None
        self._drained_at: float | None = None  # monotonic, first time in-flight hit zero
        self._deadline: float | None = None  # monotonic
        self._cut_reason: str | None = None
        self._draining = anyio.Event()
        # Set and dropped on every change, so waiters can re-check their condition; made only
        # when someone waits (an anyio.Event costs ~20 us: twice per request, measured in
        # benchmarks/gate.py, it was a fifth of the drain gate's CPU per request).
        self._load_changed: anyio.Event | None = None  # in-flight or state
        self._drain_changed: anyio.Event | None = None  # state, deadline or cut
        self._subscribers: set[MemoryObjectSendStream[StateChanged]] = set()
        self.dropped_state_changes = 0
        self._request_seconds = Histogram(REQUEST_BUCKETS)  # admission to release
        self._drain_seconds = Histogram(DRAIN_BUCKETS)  # drain start to in-flight zero

    # -- read side -----------------------------------------------------------------------
    @property
    def state(self) -> DrainState:
        return self._state

    @property
    def in_flight(self) -> int:
        return self._in_flight

    @property
    def draining(self) -> DrainFlag:
        """Set once the drain began (and stays set)."""
        return DrainFlag(self._draining)

    @property
    def deadline(self) -> float | None:
        """``time.monotonic()`` value at which open streams are cut, or None."""
        return self._deadline

    @property
    def drain_timeout(self) -> float | None:
        return self._drain_timeout

    @property
    def propagation(self) -> PropagationWindow:
        return self._propagation

    @property
    def accepting(self) -> bool:
        """New work is admitted now (SERVING, or DRAINING inside the propagation window)."""
        if self._state is DrainState.SERVING:
            return True
        return self._state is DrainState.DRAINING and self._window_open(time.monotonic())

    @property
    def broken_reason(self) -> str | None:
        return self._broken_reason

    @property
    def is_drained(self) -> bool:
        """Draining (or stopped), the propagation window closed, nothing in flight."""
        if self._state not in (DrainState.DRAINING, DrainState.STOPPED):
            return False
        return self._in_flight == 0 and not self._window_open(time.monotonic())

    def request_durations(self) -> HistogramSnapshot:
        """Seconds from admission to release of every released request."""
        return self._request_seconds.snapshot()

    def drain_durations(self) -> HistogramSnapshot:
        """Seconds from the drain start until in-flight reached zero (one per drain)."""
        return self._drain_seconds.snapshot()

    def statistics(self) -> DrainStatistics:
        now = time.monotonic()
        accepting = self.accepting  # closes a window that is due
        duration = None
        if self._drain_started is not None:
            end = self._drained_at if self._drained_at is not None else now
            duration = max(0.0, end - self._drain_started)
        remaining = None if self._deadline is None else max(0.0, self._deadline - now)
        return DrainStatistics(
            state=self._state,
            in_flight=self._in_flight,
            admitted=self._admitted,
            completed=self._counts[RequestOutcome.COMPLETED],
            rejected_while_draining=self._rejected_draining,
            rejected_while_starting=self._rejected_starting,
            cut_at_deadline=self._counts[RequestOutcome.CUT_AT_DEADLINE],
            client_disconnected=self._counts[RequestOutcome.CLIENT_DISCONNECTED],
            failed=self._counts[RequestOutcome.FAILED],
            drain_started_at=self._drain_started_wall,
            drain_duration=duration,
            deadline_remaining=remaining,
            drained=self.is_drained,
            broken_reason=self._broken_reason,
            accepting=accepting,
            **self._window_statistics(now),
        )

    def _window_statistics(self, now: float) -> dict[str, Any]:
        window = self._window
        if window is None:
            return {}
        return {
            "admitted_while_draining": window.admitted,
            "propagation_observed": window.propagation_observed(now),
            "readiness_failed_after": window.failed_probe_after(),
            "window_closed_after": None if window.is_open else window.open_for(now),
            "window_close_reason": None if window.reason is None else window.reason.value,
            "traffic_left_after": window.traffic_left_after(),
            "balancer_interval": None if window.check is None else window.check.interval,
            "balancer_fall": None if window.check is None else window.check.fall,
        }

    # -- transitions ---------------------------------------------------------------------
    def mark_started(self) -> bool:
        """STARTING → SERVING (the model is loaded); False in any other state."""
        if self._state is not DrainState.STARTING:
            return False
        self._transition(DrainState.SERVING)
        return True

    def begin_drain(
        self,
        *,
        timeout: float | None = None,
        propagation: float | None = None,
        balancer: BalancerCheck | None = None,
    ) -> bool:
        """Enter DRAINING: readiness fails at once, admitted work continues, and new work is
        still admitted until the propagation window closes (then refused).

        Idempotent; returns True only for the call that started the drain. ``timeout``
        (default: the controller's ``drain_timeout``) sets the cut deadline; ``propagation``
        (seconds, default: the controller's window maximum) bounds the window for this drain.
        A later call may only bring an existing deadline or window end forward, never extend it.
        ``balancer``: the check of the balancer in front (the window may close once it has
        certainly taken this server out; of two, the slower one holds).
        """
        timeout = self._drain_timeout if timeout is None else timeout
        now = time.monotonic()
        deadline = None if timeout is None else now + max(0.0, timeout)
        if self._state in (DrainState.DRAINING, DrainState.STOPPED):
            if deadline is not None and (self._deadline is None or deadline < self._deadline):
                self._deadline = deadline
                if self._window is not None:
                    self._window.deadline = deadline
                self._pulse_drain()
            if self._window is not None:
                if propagation is not None:
                    self._window.shorten(propagation)
                if balancer is not None:
                    self._window.declare_check(balancer)
            self._window_moved(now)
            return False
        window = self._propagation
        if propagation is not None:
            window = attrs.evolve(window, max_seconds=max(0.0, propagation))
        self._window = WindowTracker(now, window, deadline)
        if balancer is not None:
            self._window.declare_check(balancer)
        if self._traffic_left is not None:
            self._window.note_traffic_left(self._traffic_left)
        if self._state is DrainState.STARTING:
            self._window.close(now, WindowClose.NEVER_SERVED)
        self._drain_started = now
        self._drain_started_wall = time.time()
        self._deadline = deadline
        self._draining.set()
        if self._in_flight == 0 and not self._window.is_open:
            self._mark_drained(now, now)
        self._transition(DrainState.DRAINING)
        logger.info(
            "drain started: in_flight=%d deadline_in=%s propagation_window=%s",
            self._in_flight,
            timeout,
            "closed" if not self._window.is_open else f"{window.max_seconds:g}s",
        )
        return True

    def note_traffic_left(self) -> None:
        """The deployer saw this server leave every ready endpoint set that routes to it
        (Kubernetes: ``TrafficLeft``): evidence the window may close on, once kube-proxy had
        its margin to apply it. Told before the drain began, it counts from when it was told."""
        now = time.monotonic()
        if self._traffic_left is None:
            self._traffic_left = now
            logger.info("told that traffic left this server's endpoints")
        if self._window is not None and self._window.is_open:
            self._window.note_traffic_left(self._traffic_left)
            self._window_moved(now)

    def cut(self, reason: str = "forced") -> None:
        """Cut every open stream now (a drain is started first if needed)."""
        self.begin_drain()
        self._close_window(WindowClose.CUT)
        if self._cut_reason is None:
            self._cut_reason = reason
            self._pulse_drain()

    def mark_stopped(self) -> None:
        """Enter STOPPED (the server is exiting) and end every state-change subscription."""
        if self._state is DrainState.STOPPED:
            return
        self._draining.set()
        self._close_window(WindowClose.STOPPED)
        self._transition(DrainState.STOPPED)
        for stream in self._subscribers:
            stream.close()
        self._subscribers.clear()

    def mark_broken(self, reason: str) -> None:
        """The process cannot recover by itself: liveness fails from now on."""
        self._broken_reason = reason

    # -- admission -----------------------------------------------------------------------
    def try_admit(self) -> Admission | None:
        """Admit one unit of work if accepting; otherwise count the rejection and return None.

        A refused caller answers 503 with ``Retry-After`` and closes the connection.
        """
        if self._state is not DrainState.SERVING:
            now = time.monotonic()
            if self._state is DrainState.DRAINING and self._window_open(now):
                assert self._window is not None
                self._window.note_request(now)
            elif self._state is DrainState.STARTING:
                self._rejected_starting += 1
                return None
            else:
                self._rejected_draining += 1
                return None
        self._admitted += 1
        self._in_flight += 1
        self._pulse_load()
        return Admission(self)

    def check_ready(self) -> bool:
        """Answer a readiness probe: True while SERVING and not broken.

        A "not ready" answer during a drain is recorded: with a declared balancer check, the
        window may close once that check has certainly taken the server out (one failed probe
        alone proves nothing: the balancer needs ``fall`` of them). Fronts call this for every
        readiness probe they answer (the middleware does for its ``/ready``).
        """
        ready = self._state is DrainState.SERVING and self._broken_reason is None
        if not ready and self._state is DrainState.DRAINING and self._window is not None:
            now = time.monotonic()
            if self._window.is_open and self._window.first_failed_probe is None:
                self._window.note_failed_probe(now)
                logger.info("readiness probe answered not ready (first of the drain)")
                self._window_moved(now)
        return ready

    def _release(self, outcome: RequestOutcome, seconds: float) -> None:
        self._in_flight -= 1
        self._counts[outcome] += 1
        self._request_seconds.observe(seconds)
        self._last_release = time.monotonic()
        self._after_window_change(self._last_release)
        self._pulse_load()

    # -- the propagation window ----------------------------------------------------------
    def _window_open(self, now: float) -> bool:
        window = self._window
        if window is None or not window.is_open:
            return False
        if window.refresh(now):
            self._on_window_closed()
            return False
        return True

    def _close_window(self, reason: WindowClose) -> None:
        window = self._window
        if window is not None and window.is_open:
            window.close(time.monotonic(), reason)
            self._on_window_closed()

    def _on_window_closed(self) -> None:
        window = self._window
        assert window is not None and window.closed_at is not None and window.reason is not None
        logger.info(
            "propagation window closed after %.3f s (%s): last new request after %.3f s, "
            "%d admitted while draining; refusing new work",
            window.closed_at - window.started,
            window.reason.value,
            window.propagation_observed(window.closed_at),
            window.admitted,
        )
        self._after_window_change(window.closed_at)
        self._pulse_load()
        self._pulse_drain()

    def _window_moved(self, now: float) -> None:
        """The window's end may have moved forward: close it if due, and wake every waiter
        (each sleeps until the end it computed, which may now be too late)."""
        self._after_window_change(now)
        self._pulse_load()

    def _after_window_change(self, now: float) -> None:
        """Record the drain's end once the window is closed and nothing is in flight."""
        if self._drain_started is None or self._drained_at is not None or self._in_flight:
            return
        if self._window_open(now) or self._drained_at is not None:  # (closing it marks it)
            return
        window = self._window
        # in-flight has been zero since the last release: drained when both had happened
        end = max(self._last_release or self._drain_started, self._drain_started)
        if window is not None and window.closed_at is not None:
            end = max(end, window.closed_at)
        self._mark_drained(self._drain_started, end)
        logger.info("drained: the window closed and in_flight reached zero")

    def _mark_drained(self, started: float, now: float) -> None:
        self._drained_at = now
        self._drain_seconds.observe(now - started)

    # -- waiting -------------------------------------------------------------------------
    async def wait_drained(self, timeout: float | None = None) -> bool:
        """Wait until draining (or stopped), the window closed and nothing in flight;
        False if ``timeout`` passed."""
        with anyio.move_on_after(math.inf if timeout is None else timeout):
            while not self.is_drained:
                await self._wait_change_or_window()
        return self.is_drained

    async def wait_window_closed(self) -> None:
        """Wait until new work is refused (the drain began and its window closed)."""
        while not (self._draining.is_set() and not self.accepting):
            await self._wait_change_or_window()

    async def _wait_change_or_window(self) -> None:
        if self._load_changed is None:
            self._load_changed = anyio.Event()
        changed = self._load_changed
        window = self._window
        wake = math.inf
        if window is not None and window.is_open:
            wake = window.due()[0] - time.monotonic()
        with anyio.move_on_after(max(0.0, wake)):
            await changed.wait()

    async def wait_cut(self) -> str:
        """Wait until open streams must be cut: the drain deadline passed or :meth:`cut` ran.

        Returns the reason (``"drain-deadline"`` or the one given to :meth:`cut`).
        """
        while self._cut_reason is None:
            if self._drain_changed is None:
                self._drain_changed = anyio.Event()
            changed = self._drain_changed
            remaining = math.inf if self._deadline is None else self._deadline - time.monotonic()
            if remaining <= 0:
                self._cut_reason = "drain-deadline"
                self._pulse_drain()
                break
            with anyio.move_on_after(remaining):
                await changed.wait()
        return self._cut_reason

    @asynccontextmanager
    async def open_state_changes(
        self, *, max_buffer: int = 16
    ) -> AsyncIterator[MemoryObjectReceiveStream[StateChanged]]:
        """Yield a bounded stream of :class:`StateChanged`, starting with the current state.

        Iteration ends when the controller stops. A subscriber whose buffer is full loses
        changes (counted in ``dropped_state_changes``); the controller never waits for one.
        """
        send, receive = anyio.create_memory_object_stream[StateChanged](max_buffer)
        send.send_nowait(self._change(None, self._state))
        if self._state is DrainState.STOPPED:
            send.close()
        else:
            self._subscribers.add(send)
        try:
            async with receive:
                yield receive
        finally:
            self._subscribers.discard(send)
            send.close()

    # -- internals -----------------------------------------------------------------------
    def _change(self, previous: DrainState | None, current: DrainState) -> StateChanged:
        return StateChanged(
            previous=previous,
            current=current,
            at=time.monotonic(),
            wall_time=time.time(),
            statistics=self.statistics(),
        )

    def _transition(self, new: DrainState) -> None:
        previous, self._state = self._state, new
        change = self._change(previous, new)
        for stream in list(self._subscribers):
            try:
                stream.send_nowait(change)
            except anyio.WouldBlock:
                self.dropped_state_changes += 1
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                self._subscribers.discard(stream)
        self._pulse_load()
        self._pulse_drain()

    def _pulse_load(self) -> None:
        event, self._load_changed = self._load_changed, None
        if event is not None:
            event.set()

    def _pulse_drain(self) -> None:
        event, self._drain_changed = self._drain_changed, None
        if event is not None:
            event.set()
