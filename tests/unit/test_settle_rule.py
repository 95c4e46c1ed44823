"""The settle rule of ``wait_ready`` for containers without a readiness check (issue 25 item 5):
when one counts as settled on Kubernetes (the API shows an exit only once the kubelet has seen
and written it), and the engines' start times it is measured from on Docker and Podman."""

from __future__ import annotations

import pytest

from asyncdeploy.drivers.engine._ready import engine_time
from asyncdeploy.drivers.kubernetes._ready import REPORT_CAP, REPORT_FLOOR, settled_at

T = 1_800_000_000.0  # a Unix time in whole seconds, as the kubelet's startedAt


def test_a_start_written_at_once_waits_its_second_the_settle_time_and_a_relist() -> None:
    """startedAt is whole seconds (the true start within the next one), then the window, then
    the kubelet's relist before an exit in it is on record."""
    at = settled_at(started=T, written=T, seen=T + 0.3, settle=2)
    assert at == T + 1 + 2 + REPORT_FLOOR


def test_a_start_written_late_lengthens_the_wait_by_as_much() -> None:
    """The kubelet's write of the start came 3 s after it (a loaded node): an exit in the
    window may take as long to reach the API."""
    assert settled_at(started=T, written=T + 3, seen=T + 3.2, settle=2) == T + 1 + 2 + 1 + 3


def test_the_wait_does_not_depend_on_when_the_wait_looked() -> None:
    """Looking late (a second workload waited for after the first) waits less, not more."""
    early = settled_at(started=T, written=T, seen=T + 0.1, settle=2)
    assert settled_at(started=T, written=T, seen=T + 3.0, settle=2) == early


def test_a_container_that_started_long_ago_is_settled_at_once() -> None:
    assert settled_at(started=T, written=T, seen=T + 3600, settle=2) < T + 3600
    assert settled_at(started=T, written=T + 3000, seen=T + 3600, settle=2) < T + 3600
    assert settled_at(started=T, written=T + 60, seen=T + 61, settle=2) == T + 3 + REPORT_CAP


def test_settle_zero_is_running_at_once_and_an_unknown_start_counts_from_the_sighting() -> None:
    assert settled_at(started=T, written=T, seen=T + 0.5, settle=0) == T + 0.5
    assert settled_at(started=None, written=None, seen=T, settle=2) == T + 2 + REPORT_FLOOR
    skewed = settled_at(started=T + 60, written=T + 60, seen=T, settle=2)  # another clock
    assert skewed == T + 2 + REPORT_FLOOR


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2027-01-15T08:00:00.123456789Z", T + 0.123456789),
        ("2027-01-15T08:00:00Z", T),
        ("2027-01-15T09:00:00.5+01:00", T + 0.5),
        ("0001-01-01T00:00:00Z", None),  # Docker: never started
        ("", None),
        (None, None),
        ("yesterday", None),
    ],
)
def test_engine_start_times(text: object, expected: float | None) -> None:
    got = engine_time(text)
    if expected is None:
        assert got is None
    else:
        assert got == pytest.approx(expected, abs=1e-6)
