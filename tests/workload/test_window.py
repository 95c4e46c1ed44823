"""The propagation window: a draining server serves new work until traffic has left."""

from __future__ import annotations

import time

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

from asyncdeploy.workload import (
    DrainController,
    DrainState,
    PropagationWindow,
    WindowClose,
    render_metrics,
)
from asyncdeploy.workload.window import WindowTracker

pytestmark = pytest.mark.anyio


def _serving(window: PropagationWindow, **kwargs: float) -> DrainController:
    controller = DrainController(propagation=window, **kwargs)
    controller.mark_started()
    return controller


# -- the tracker, with explicit times ----------------------------------------------------------
def test_without_a_failed_probe_the_window_runs_to_its_maximum() -> None:
    """No readiness probe saw the drain: silence alone never closes the window."""
    tracker = WindowTracker(100.0, PropagationWindow(max_seconds=10, quiet_seconds=2), None)
    assert not tracker.refresh(109.9)
    assert tracker.refresh(110.0)
    assert (tracker.closed_at, tracker.reason) == (110.0, WindowClose.MAX)


def test_a_failed_probe_and_a_quiet_period_close_it_early() -> None:
    """Closed quiet seconds after the last request, once a probe saw the drain."""
    tracker = WindowTracker(100.0, PropagationWindow(max_seconds=10, quiet_seconds=2), None)
    tracker.note_request(100.2)
    tracker.note_failed_probe(100.4)
    tracker.note_request(100.5)  # the balancer's last request before it acted on the probe
    assert not tracker.refresh(102.4)
    assert tracker.refresh(102.6)
    assert tracker.closed_at == pytest.approx(102.5)
    assert tracker.reason is WindowClose.TRAFFIC_LEFT
    assert tracker.propagation_observed(103) == pytest.approx(0.5)
    assert tracker.failed_probe_after() == pytest.approx(0.4)


def test_a_late_probe_closes_it_at_the_probe() -> None:
    """Traffic stopped long before a probe came: the window closes when the probe comes."""
    tracker = WindowTracker(100.0, PropagationWindow(max_seconds=10, quiet_seconds=2), None)
    tracker.note_failed_probe(105.0)
    assert tracker.refresh(105.0)
    assert tracker.closed_at == 105.0


def test_the_deadline_and_a_shorter_request_bound_the_window() -> None:
    """The drain deadline and a later, shorter maximum close it; a longer one never extends."""
    tracker = WindowTracker(0.0, PropagationWindow(max_seconds=10), deadline=4.0)
    tracker.shorten(20)
    assert tracker.due() == (4.0, WindowClose.DEADLINE)
    tracker.shorten(3)
    assert tracker.due() == (3.0, WindowClose.MAX)


def test_refuse_at_once_has_no_window() -> None:
    tracker = WindowTracker(5.0, PropagationWindow.refuse_at_once(), None)
    assert (tracker.is_open, tracker.reason) == (False, WindowClose.REFUSE_AT_ONCE)


@pytest.mark.parametrize("bad", [-1.0, float("inf"), float("nan")])
def test_bounds_are_checked(bad: float) -> None:
    with pytest.raises(ValueError, match="max_seconds"):
        PropagationWindow(max_seconds=bad)
    with pytest.raises(ValueError, match="quiet_seconds"):
        PropagationWindow(quiet_seconds=bad)


@given(
    maximum=st.floats(0, 30),
    quiet=st.floats(0, 5),
    probe=st.none() | st.floats(0, 40),
    requests=st.lists(st.floats(0, 40), max_size=20),
    deadline=st.none() | st.floats(0, 40),
)
def test_the_window_never_outlives_its_bounds(
    maximum: float,
    quiet: float,
    probe: float | None,
    requests: list[float],
    deadline: float | None,
) -> None:
    """Whatever arrives, it closes by the maximum and the deadline, and never closes early
    without a failed probe; admitted requests all arrived before it closed."""
    tracker = WindowTracker(
        0.0, PropagationWindow(max_seconds=maximum, quiet_seconds=quiet), deadline
    )
    events = sorted(
        [(t, "request") for t in requests] + ([(probe, "probe")] if probe is not None else [])
    )
    for at, kind in events:
        if tracker.refresh(at):
            break
        if kind == "request":
            tracker.note_request(at)
        else:
            tracker.note_failed_probe(at)
    tracker.refresh(100.0)
    assert tracker.closed_at is not None
    bound = maximum if deadline is None else min(maximum, deadline)
    assert tracker.closed_at <= bound + 1e-9
    if tracker.first_failed_probe is None or tracker.first_failed_probe > tracker.closed_at:
        assert tracker.closed_at == pytest.approx(bound)
    if tracker.last_request is not None:
        assert tracker.last_request <= tracker.closed_at


# -- the controller ------------------------------------------------------------------------------
async def test_a_draining_server_serves_new_work_until_traffic_left() -> None:
    """Readiness fails at once; new work is admitted until a probe saw it and traffic stopped."""
    controller = _serving(PropagationWindow(max_seconds=30, quiet_seconds=0.2))
    controller.begin_drain()
    assert controller.state is DrainState.DRAINING
    assert controller.check_ready() is False  # the balancer's probe: it sees the drain
    admitted = controller.try_admit()
    assert admitted is not None  # served, not refused
    assert controller.accepting
    assert not controller.is_drained  # nothing in flight is not enough while the window is open
    admitted.release()
    assert not controller.is_drained
    with anyio.fail_after(5):
        await controller.wait_window_closed()
    assert controller.try_admit() is None
    assert controller.is_drained
    stats = controller.statistics()
    assert stats.accepting is False
    assert stats.admitted_while_draining == 1
    assert stats.rejected_while_draining == 1
    assert stats.window_close_reason == "traffic-left"
    assert stats.readiness_failed_after is not None and stats.readiness_failed_after < 1
    assert stats.propagation_observed is not None and stats.propagation_observed < 1
    assert stats.window_closed_after is not None and 0.2 <= stats.window_closed_after < 5
    assert (
        stats.drain_duration is not None
        and stats.drain_duration >= stats.window_closed_after - 0.01
    )


async def test_without_a_probe_wait_drained_waits_for_the_maximum() -> None:
    """No balancer probed readiness: the window holds until its maximum, then drained."""
    controller = _serving(PropagationWindow(max_seconds=0.5, quiet_seconds=0.05))
    started = time.monotonic()
    controller.begin_drain()
    with anyio.fail_after(5):
        assert await controller.wait_drained()
    assert time.monotonic() - started >= 0.45
    stats = controller.statistics()
    assert stats.window_close_reason == "max"
    assert stats.readiness_failed_after is None


async def test_work_admitted_in_the_window_is_in_flight_to_the_end() -> None:
    """A request admitted inside the window keeps the drain open after the window closed."""
    controller = _serving(PropagationWindow(max_seconds=0.2, quiet_seconds=0.05))
    controller.begin_drain()
    admitted = controller.try_admit()
    assert admitted is not None
    with anyio.fail_after(5):
        await controller.wait_window_closed()
    assert not await controller.wait_drained(0.2)
    assert controller.in_flight == 1
    admitted.release()
    assert controller.is_drained


async def test_a_drain_before_serving_has_no_window() -> None:
    """Nobody was sent traffic before SERVING: the window is closed from the start."""
    controller = DrainController()
    controller.begin_drain()
    assert controller.is_drained
    assert controller.statistics().window_close_reason == "never-served"


async def test_a_drain_request_bounds_the_window_and_never_extends_it() -> None:
    """begin_drain(propagation=...) sets this drain's maximum; a later one only shortens it."""
    controller = _serving(PropagationWindow(max_seconds=30))
    controller.begin_drain(propagation=60)
    controller.begin_drain(propagation=0)
    assert controller.try_admit() is None
    assert controller.statistics().window_close_reason == "max"
    refusing = _serving(PropagationWindow(max_seconds=30))
    refusing.begin_drain(propagation=0)
    assert refusing.try_admit() is None


async def test_a_cut_and_a_stop_close_the_window() -> None:
    controller = _serving(PropagationWindow(max_seconds=30))
    controller.cut("forced")
    assert controller.try_admit() is None
    assert controller.statistics().window_close_reason == "cut"
    stopped = _serving(PropagationWindow(max_seconds=30))
    stopped.begin_drain()
    stopped.mark_stopped()
    assert stopped.try_admit() is None
    assert stopped.statistics().window_close_reason == "stopped"


async def test_the_metrics_report_the_window() -> None:
    """The text format says whether the window is open and the propagation observed."""
    controller = _serving(PropagationWindow(max_seconds=30, quiet_seconds=0.05))
    text = render_metrics(controller)
    assert "asyncdeploy_accepting 1" in text
    controller.begin_drain()
    controller.check_ready()
    admitted = controller.try_admit()
    assert admitted is not None
    admitted.release()
    assert "asyncdeploy_accepting 1" in render_metrics(controller)  # still inside the window
    with anyio.fail_after(5):
        await controller.wait_window_closed()
    text = render_metrics(controller)
    assert "asyncdeploy_accepting 0" in text
    assert "asyncdeploy_admitted_while_draining_total 1" in text
    assert 'asyncdeploy_propagation_window_closed{reason="traffic-left"} 1' in text
    observed = [
        line
        for line in text.splitlines()
        if line.startswith("asyncdeploy_propagation_observed_seconds ")
    ]
    assert len(observed) == 1 and 0 <= float(observed[0].split()[1]) < 1
