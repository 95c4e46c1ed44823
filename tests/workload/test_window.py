"""The propagation window: a draining server serves new work until traffic has left."""

from __future__ import annotations

import time

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

from asyncdeploy.workload import (
    BalancerCheck,
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


def test_one_failed_probe_and_silence_are_no_evidence() -> None:
    """Issue 23: a balancer needs ``fall`` failed checks, and sparse traffic is silent anyway.
    Without a declared check (or the deployer's word) the window runs to its maximum."""
    tracker = WindowTracker(100.0, PropagationWindow(max_seconds=10, quiet_seconds=2), None)
    tracker.note_failed_probe(100.4)
    tracker.note_request(100.5)
    assert not tracker.refresh(109.9)
    assert tracker.refresh(110.0) and tracker.reason is WindowClose.MAX


HAPROXY_DEFAULTS = BalancerCheck(interval=2.0, fall=3)  # inter 2s, fall 3


def test_a_declared_check_closes_it_once_the_balancer_has_certainly_stopped() -> None:
    """HAProxy at its defaults: out by 3 x 2 s (+1 s) after the drain start at the latest;
    the window closes then, or a quiet period after the last request if that is later."""
    window = PropagationWindow(max_seconds=10, quiet_seconds=2, balancer=HAPROXY_DEFAULTS)
    tracker = WindowTracker(100.0, window, None)
    tracker.note_failed_probe(101.5)  # its first failed check: it still sends
    tracker.note_request(105.6)  # its last request before the third failed check
    assert not tracker.refresh(107.5)
    assert tracker.refresh(107.6)
    assert tracker.closed_at == pytest.approx(107.6)
    assert tracker.reason is WindowClose.BALANCER_CHECK
    assert tracker.propagation_observed(108) == pytest.approx(5.6)
    assert tracker.failed_probe_after() == pytest.approx(1.5)
    quiet = WindowTracker(100.0, window, None)
    quiet.note_failed_probe(100.1)
    assert not quiet.refresh(106.9)
    assert quiet.refresh(107.0) and quiet.closed_at == pytest.approx(107.0)


def test_a_declared_check_without_any_failed_probe_is_not_evidence() -> None:
    """The declared balancer never probed (a wrong path, a TCP check): run to the maximum."""
    window = PropagationWindow(max_seconds=10, balancer=BalancerCheck(interval=0.5, fall=1))
    tracker = WindowTracker(0.0, window, None)
    assert not tracker.refresh(9.9)
    assert tracker.refresh(10.0) and tracker.reason is WindowClose.MAX


def test_of_two_declared_checks_the_slower_holds() -> None:
    tracker = WindowTracker(0.0, PropagationWindow(balancer=BalancerCheck(interval=3)), None)
    tracker.declare_check(BalancerCheck(interval=0.5, fall=1))
    assert tracker.check == BalancerCheck(interval=3, fall=3)


def test_the_deployers_word_closes_it_after_kube_proxys_margin() -> None:
    """``traffic-left``: closed at the word + the endpoints margin, or quiet after the last
    request; told before the drain began, counted from when it was told."""
    window = PropagationWindow(max_seconds=10, quiet_seconds=2, endpoints_margin=2)
    tracker = WindowTracker(100.0, window, None)
    tracker.note_traffic_left(101.0)
    tracker.note_request(101.5)
    assert not tracker.refresh(103.4)
    assert tracker.refresh(103.5) and tracker.reason is WindowClose.TRAFFIC_LEFT
    early = WindowTracker(100.0, window, None)
    early.note_traffic_left(99.0)
    assert early.refresh(102.0) and early.closed_at == pytest.approx(102.0)  # the quiet period
    assert early.traffic_left_after() == pytest.approx(-1.0)


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
    check=st.none() | st.builds(BalancerCheck, interval=st.floats(0.1, 5), fall=st.integers(1, 5)),
    probes=st.lists(st.floats(0, 40), max_size=5),
    left=st.none() | st.floats(0, 40),
    requests=st.lists(st.floats(0, 40), max_size=20),
    deadline=st.none() | st.floats(0, 40),
)
def test_the_window_never_outlives_its_bounds_nor_closes_before_the_evidence(
    maximum: float,
    quiet: float,
    check: BalancerCheck | None,
    probes: list[float],
    left: float | None,
    requests: list[float],
    deadline: float | None,
) -> None:
    """Whatever arrives, it closes by the maximum and the deadline; before them only once a
    declared check has certainly taken the server out (a probe failed, fall x interval + margin
    passed) or the deployer's word + margin passed, and never within the quiet period after a
    request; admitted requests all arrived before it closed."""
    window = PropagationWindow(max_seconds=maximum, quiet_seconds=quiet, balancer=check)
    tracker = WindowTracker(0.0, window, deadline)
    events = sorted(
        [(t, "request") for t in requests]
        + [(t, "probe") for t in probes]
        + ([(left, "left")] if left is not None else [])
    )
    for at, kind in events:
        if tracker.refresh(at):
            break
        if kind == "request":
            tracker.note_request(at)
        elif kind == "probe":
            tracker.note_failed_probe(at)
        else:
            tracker.note_traffic_left(at)
    tracker.refresh(100.0)
    assert tracker.closed_at is not None
    bound = maximum if deadline is None else min(maximum, deadline)
    assert tracker.closed_at <= bound + 1e-9
    if tracker.closed_at < bound - 1e-9:
        proofs = []
        if check is not None and tracker.first_failed_probe is not None:
            proofs.append(max(tracker.first_failed_probe, check.takes_out_within))
        if tracker.traffic_left is not None:
            proofs.append(tracker.traffic_left + window.endpoints_margin)
        assert proofs and tracker.closed_at >= min(proofs) - 1e-9
        if tracker.last_request is not None:
            assert tracker.closed_at >= tracker.last_request + quiet - 1e-9
    if tracker.last_request is not None:
        assert tracker.last_request <= tracker.closed_at


# -- the controller ------------------------------------------------------------------------------
async def test_a_draining_server_serves_new_work_until_the_balancer_has_stopped() -> None:
    """Readiness fails at once; new work is admitted until the declared check has certainly
    taken the server out (0.1 s x 1 + 1 s) and traffic stopped."""
    check = BalancerCheck(interval=0.1, fall=1)
    controller = _serving(PropagationWindow(max_seconds=30, quiet_seconds=0.2, balancer=check))
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
    assert stats.window_close_reason == "balancer-check"
    assert stats.readiness_failed_after is not None and stats.readiness_failed_after < 1
    assert stats.propagation_observed is not None and stats.propagation_observed < 1
    # (1.1 s after a probe that came at the drain's start: as floats, 1.0999999999985)
    assert stats.window_closed_after is not None and 1.1 - 1e-6 <= stats.window_closed_after < 5
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
    check = BalancerCheck(interval=0.05, fall=1)
    controller = _serving(PropagationWindow(max_seconds=30, quiet_seconds=0.05, balancer=check))
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
    assert 'asyncdeploy_propagation_window_closed{reason="balancer-check"} 1' in text
    observed = [
        line
        for line in text.splitlines()
        if line.startswith("asyncdeploy_propagation_observed_seconds ")
    ]
    assert len(observed) == 1 and 0 <= float(observed[0].split()[1]) < 1
