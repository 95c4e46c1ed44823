"""The verify report's verdict: any truncated, lost, failed or duplicated request fails it."""

from __future__ import annotations

import attrs
import pytest

from asyncdeploy._events import ContainerOutcome, DrainFinished, DrainSummary
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
        RequestRecord(
            id=str(i), kind="stream", started=float(i), ended=float(i) + 1, outcome=o, endpoint="w"
        )  # type: ignore[arg-type]
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


WRK_CLEAN = """Running 1h test @ http://127.0.0.1:40000/short
  1 threads and 4 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     1.95ms    1.49ms  11.69ms   84.84%
    Req/Sec     1.09k   420.37     1.69k    57.14%
  2287 requests in 2.11s, 1.13MB read
Requests/sec:   1086.03
Transfer/sec:    551.58KB
"""
WRK_DIRTY = WRK_CLEAN.replace(
    "Requests/sec",
    "  Socket errors: connect 0, read 3, write 0, timeout 1\n"
    "  Non-2xx or 3xx responses: 17\nRequests/sec",
)


def test_wrk_counts_are_read_and_gate_the_verdict() -> None:
    """wrk's own summary (recorded from Debian's wrk 4.1): its failures fail the run too."""
    from asyncdeploy.verify.wrk import parse_wrk_output

    clean = parse_wrk_output(WRK_CLEAN, 4)
    assert (clean.requests, clean.failures) == (2287, 0)
    dirty = parse_wrk_output(WRK_DIRTY, 4)
    assert (dirty.non_2xx, dirty.read_errors, dirty.timeouts, dirty.failures) == (17, 3, 1, 21)
    ok = report("completed")
    assert attrs.evolve(ok, wrk=clean).passed
    failed = attrs.evolve(ok, wrk=dirty)
    assert not failed.passed
    assert "non-2xx/3xx 17" in failed.text()


def test_nothing_in_flight_on_the_drained_workload_is_no_pass() -> None:
    """Issue 23: a replace that passed with "in flight when the drain began: 0" tested nothing
    of a drain. Requests in flight only on another workload do not count either."""
    busy = report("completed", "completed")
    assert busy.in_flight_on_disrupted == 1 and busy.passed
    idle = attrs.evolve(busy, drain_started_at=5.0)  # every request had ended
    assert idle.in_flight_on_disrupted == 0 and not idle.passed
    assert "nothing was in flight on the drained workload" in idle.text()
    elsewhere = report("completed", "completed")
    for record in elsewhere.records:
        record.endpoint, record.instance = "haproxy", "other"
    assert elsewhere.in_flight_at_drain == 1 and elsewhere.in_flight_on_disrupted == 0
    assert not elsewhere.passed
    served = report("completed")
    served.records[0].endpoint, served.records[0].instance = "haproxy", "w"  # by its name
    assert served.in_flight_on_disrupted == 1 and served.passed
    assert served.to_dict()["in_flight_on_disrupted"] == 1
