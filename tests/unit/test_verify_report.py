"""The verify report's verdict: any truncated, lost, failed or duplicated request fails it."""

from __future__ import annotations

import pytest

from asyncdeploy.events import ContainerOutcome, DrainFinished, DrainSummary
from asyncdeploy.verify.report import VerifyReport
from asyncdeploy.verify.traffic import RequestRecord

SUMMARY = DrainSummary(
    workload="w",
    grace_period_seconds=5,
    seconds=2.0,
    containers=(
        ContainerOutcome(name="s", role="run", outcome="exited", exit_code=0, seconds=2.0),
    ),
)
FINISHED = DrainFinished(workload="w", elapsed=2.0, summary=SUMMARY)


def report(*outcomes: str) -> VerifyReport:
    records = tuple(
        RequestRecord(id=str(i), kind="stream", started=float(i), ended=float(i) + 1, outcome=o)  # type: ignore[arg-type]
        for i, o in enumerate(outcomes)
    )
    return VerifyReport(
        driver="docker", mode="delete", records=records, events=(FINISHED,), drain_started_at=0.5
    )


def test_completed_retried_and_aborted_pass() -> None:
    """A request refused once and then served elsewhere completed; an abandoned stream is ours."""
    got = report("completed", "completed", "client-aborted")
    got.records[1].refusals = 1
    assert got.passed
    assert got.counts()["stream"]["completed"] == 2
    assert "served by another instance (router retry): 1" in got.text()
    assert got.in_flight_at_drain == 1


@pytest.mark.parametrize(
    "bad", ["refused", "unavailable", "truncated", "lost", "failed", "duplicated"]
)
def test_any_gated_outcome_fails(bad: str) -> None:
    got = report("completed", bad)
    assert not got.passed
    assert "FAIL" in got.text()
    assert got.to_dict()["passed"] is False


def test_no_drain_is_no_pass() -> None:
    got = VerifyReport(driver="docker", mode="delete", records=(), events=(), drain_started_at=None)
    assert not got.passed


def test_a_drain_without_traffic_is_no_pass() -> None:
    """A run in which no request completed (none sent: e.g. the router never saw the user's
    server ready) proves nothing; main reported PASS for it."""
    got = VerifyReport(
        driver="docker", mode="delete", records=(), events=(FINISHED,), drain_started_at=0.5
    )
    assert not got.passed
    assert "no request completed" in got.text()
