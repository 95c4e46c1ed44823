"""The engine drain's give-up rule and its state, alone: no engine, no drain, no clock."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from asyncdeploy.drivers.engine._drain_state import DrainState, gives_up

AFTER = 5.0
DEADLINE = 100.0


@pytest.mark.parametrize(
    ("now", "since", "cleaning", "expected"),
    [
        (99.0, 0.0, False, False),  # before the deadline: a blink kills nothing, however long
        (99.0, 0.0, True, True),  # cancelled, cleaning up early: 99 s lost is past 5
        (99.0, 95.0, True, False),  # cancelled, lost 4 s ago
        (104.0, 0.0, False, False),  # past the deadline: counted from the deadline, 4 s
        (105.0, 0.0, False, True),  # 5 s past the deadline
        (107.0, 103.0, False, False),  # lost after the deadline: counted from the loss, 4 s
        (108.0, 103.0, True, True),
    ],
)
def test_the_engine_gets_its_time_from_the_later_of_the_deadline_and_the_loss(
    now: float, since: float, cleaning: bool, expected: bool
) -> None:
    assert (
        gives_up(now, deadline=DEADLINE, unreachable_since=since, cleaning=cleaning, after=AFTER)
        is expected
    )


@given(
    since=st.floats(0, 200),
    lost_for=st.floats(0, 200),
    cleaning=st.booleans(),
)
def test_giving_up_never_comes_sooner_than_after_seconds_lost(
    since: float, lost_for: float, cleaning: bool
) -> None:
    now = since + lost_for
    if gives_up(now, deadline=DEADLINE, unreachable_since=since, cleaning=cleaning, after=AFTER):
        assert lost_for >= AFTER
        assert cleaning or now >= DEADLINE + AFTER


def test_the_loss_is_counted_from_the_first_unreachable_call_until_one_reaches() -> None:
    state = DrainState()
    assert state.unreachable(10.0) == 10.0
    assert state.unreachable(12.0) == 10.0  # still the first loss
    state.reached()
    assert state.unreachable_since is None
    assert state.unreachable(20.0) == 20.0


@pytest.mark.parametrize(
    ("owner", "cut", "kills"),
    [(True, False, True), (False, False, False), (False, True, True), (True, True, True)],
)
def test_the_cleanup_kills_for_an_owner_and_for_a_cancelled_follower(
    owner: bool, cut: bool, kills: bool
) -> None:
    state = DrainState(owner=owner, cut=cut)
    assert state.begin_cleanup() is kills
    assert state.cleaning and state.owner is kills
