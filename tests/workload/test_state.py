"""The drain state machine on its own."""

from __future__ import annotations

import time

import anyio
import attrs
import pytest

from asyncdeploy.workload import (
    Admission,
    DrainController,
    DrainState,
    DrainStatistics,
    PropagationWindow,
    RequestOutcome,
)

pytestmark = pytest.mark.anyio


async def test_begin_drain_is_idempotent_and_keeps_admitted_work(
    controller: DrainController,
) -> None:
    """The first begin_drain flips everything at once; later calls change nothing."""
    admitted = controller.try_admit()
    assert admitted is not None

    assert controller.begin_drain() is True
    assert controller.begin_drain() is False
    assert controller.state is DrainState.DRAINING
    assert controller.draining.is_set()
    assert controller.try_admit() is None  # new work refused...
    assert controller.in_flight == 1  # ...admitted work untouched
    assert not controller.is_drained

    assert admitted.release(RequestOutcome.COMPLETED) is True
    assert admitted.release(RequestOutcome.FAILED) is False  # released once only
    stats = controller.statistics()
    assert (stats.in_flight, stats.admitted, stats.completed, stats.failed) == (0, 1, 1, 0)
    assert stats.rejected_while_draining == 1
    assert stats.drained
    assert stats.drain_duration is not None
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        stats.in_flight = 3  # type: ignore[misc]


async def test_rejections_are_counted_by_state() -> None:
    """Work refused before SERVING is not counted as refused while draining."""
    controller = DrainController(propagation=PropagationWindow.refuse_at_once())
    assert controller.try_admit() is None
    assert controller.mark_started() is True
    assert controller.mark_started() is False
    controller.begin_drain()
    assert controller.try_admit() is None
    stats = controller.statistics()
    assert (stats.rejected_while_starting, stats.rejected_while_draining) == (1, 1)


async def test_a_later_drain_can_only_bring_the_deadline_forward(
    controller: DrainController,
) -> None:
    """Like a grace period, the cut deadline only shrinks."""
    controller.begin_drain(timeout=10)
    first = controller.deadline
    assert first is not None
    controller.begin_drain(timeout=30)
    assert controller.deadline == first
    controller.begin_drain(timeout=1)
    assert controller.deadline is not None
    assert controller.deadline < first


async def test_wait_drained_honours_its_timeout(controller: DrainController) -> None:
    """wait_drained returns False at the timeout and True once in-flight is zero."""
    admitted = controller.try_admit()
    assert admitted is not None
    controller.begin_drain()
    assert await controller.wait_drained(0.05) is False
    async with anyio.create_task_group() as tg:
        tg.start_soon(_release_later, admitted, 0.05)
        with anyio.fail_after(2):
            assert await controller.wait_drained() is True
    assert controller.statistics().drained


async def _release_later(admitted: Admission, delay: float) -> None:
    await anyio.sleep(delay)
    admitted.release()


async def test_wait_cut_fires_at_the_deadline_or_on_cut(controller: DrainController) -> None:
    """The deadline passes on its own; cut() forces it."""
    started = time.monotonic()
    controller.begin_drain(timeout=0.1)
    with anyio.fail_after(2):
        assert await controller.wait_cut() == "drain-deadline"
    assert time.monotonic() - started >= 0.09

    other = DrainController()
    other.mark_started()
    other.cut("forced")
    with anyio.fail_after(1):
        assert await other.wait_cut() == "forced"
    assert other.state is DrainState.DRAINING


async def test_state_changes_are_streamed_until_stopped() -> None:
    """A subscriber sees the current state first, then every transition, then the end."""
    controller = DrainController()
    seen: list[tuple[DrainState | None, DrainState]] = []
    async with controller.open_state_changes() as changes:
        controller.mark_started()
        controller.begin_drain()
        controller.begin_drain()  # idempotent: no second DRAINING
        controller.mark_stopped()
        with anyio.fail_after(1):
            async for change in changes:
                seen.append((change.previous, change.current))
    assert seen == [
        (None, DrainState.STARTING),
        (DrainState.STARTING, DrainState.SERVING),
        (DrainState.SERVING, DrainState.DRAINING),
        (DrainState.DRAINING, DrainState.STOPPED),
    ]


async def test_statistics_round_trip_through_json_shape(controller: DrainController) -> None:
    """to_dict/from_mapping carry the status over the control socket unchanged."""
    controller.begin_drain(timeout=5)
    stats = controller.statistics()
    data = stats.to_dict()
    assert data["state"] == "draining"
    assert DrainStatistics.from_mapping({**data, "future_field": 1}) == stats
