"""The verifier on real engines: the demo server drains losslessly, the negative control does not,
and each injected fault is either caught by the verifier or survived by the deployer."""

from __future__ import annotations

import os

import attrs
import pytest

from asyncdeploy import Container, Deployer, PreStopFinished
from asyncdeploy.verify import DEMO_IMAGE, TrafficMix, VerifyOptions, demo_plan, run_verify
from tests.engines.conftest import BUSYBOX, PAUSE, RUN_ID, RUN_LABEL

pytestmark = pytest.mark.anyio

MIX = TrafficMix(
    short_per_second=4, long_per_second=1, stream_per_second=2, long_seconds=2, stream_tokens=20
)


def plan(name: str, **kw: object):  # type: ignore[no-untyped-def]
    image = os.environ.get("ASYNCDEPLOY_TEST_DEMO_IMAGE", DEMO_IMAGE)  # a branch's own build
    made = demo_plan(f"t{RUN_ID}-{name}", image=image, pause_image=PAUSE, **kw)  # type: ignore[arg-type]
    return attrs.evolve(made, labels={RUN_LABEL: RUN_ID})


async def test_demo_server_drains_without_losing_a_request(deployer: Deployer) -> None:
    """Requests in flight when the delete starts all complete; streams end with their done frame."""
    report = await run_verify(
        deployer, plan("v-ok", grace_period_seconds=20), VerifyOptions(mix=MIX)
    )
    assert report.passed, report.text()
    assert report.in_flight_at_drain > 0, "the delete must happen with requests in flight"
    streams = [r for r in report.records if r.kind == "stream" and r.outcome == "completed"]
    assert streams and all(r.done_frame for r in streams)
    assert report.counts()["stream"]["completed"] >= 3


async def test_negative_control_is_caught(deployer: Deployer) -> None:
    """A server that ignores SIGTERM and skips draining is killed at the deadline: truncations."""
    bad = plan("v-bad", grace_period_seconds=4, ignore_sigterm=True)
    report = await run_verify(deployer, bad, VerifyOptions(mix=MIX))
    assert not report.passed
    counts = report.counts()
    assert counts["stream"]["truncated"] >= 1, report.text()
    assert [s.count("killed") for s in report.summaries] == [1]


@pytest.mark.parametrize("mode", ["replace", "delete-all"])
async def test_other_disruptions_lose_nothing(deployer: Deployer, mode: str) -> None:
    """A rolling replacement and a delete-all of two instances are lossless too."""
    report = await run_verify(
        deployer,
        plan(f"v-{mode[:3]}", grace_period_seconds=20),
        VerifyOptions(mode=mode, mix=MIX),  # type: ignore[arg-type]
    )
    assert report.passed, report.text()
    assert len(report.summaries) == (2 if mode == "delete-all" else 1)
    if mode == "replace":
        served = {r.endpoint for r in report.records if r.outcome == "completed"}
        assert len(served) == 2, "traffic moved to the replacement"


async def test_client_disconnecting_mid_stream_is_released(deployer: Deployer) -> None:
    """Streams the client abandons are released by the server: the drain is not held up."""
    mix = attrs.evolve(MIX, client_abort_every=2, stream_tokens=40)
    report = await run_verify(
        deployer, plan("v-abort", grace_period_seconds=20), VerifyOptions(mix=mix)
    )
    assert report.passed, report.text()
    assert report.counts()["stream"]["client-aborted"] >= 1
    [finished] = [e for e in report.events if isinstance(e, PreStopFinished)]
    assert finished.exit_code == 0 and not finished.timed_out  # ended by itself, not cut


async def test_hanging_pre_stop_is_cut_at_the_deadline(deployer: Deployer) -> None:
    """A pre_stop hook that never ends cannot hold the delete past the deadline: it is cut
    (held, the delete would last the hook's 1000 s, past the test's own bound)."""
    hung = plan("v-hang", grace_period_seconds=5)
    server = attrs.evolve(hung.containers[0], pre_stop=["sleep", "1000"])
    hung = attrs.evolve(hung, containers=[server])
    report = await run_verify(deployer, hung, VerifyOptions(mix=MIX))
    [finished] = [e for e in report.events if isinstance(e, PreStopFinished)]
    assert finished.timed_out
    [summary] = report.summaries
    assert summary.seconds >= 5  # not before the deadline
    assert summary.ok, summary.errors


async def test_stuck_sidecar_is_killed_and_requests_still_complete(deployer: Deployer) -> None:
    """A sidecar that never exits is killed at the deadline; the server's requests complete."""
    stuck = Container(
        name="stuck", image=BUSYBOX, command=["sh", "-c", "trap '' TERM; while :; do sleep 1; done"]
    )
    report = await run_verify(
        deployer,
        plan("v-stuck", grace_period_seconds=8, extra_containers=[stuck]),
        VerifyOptions(mix=MIX),
    )
    assert report.passed, report.text()
    outcomes = {c.name: c.outcome for c in report.summaries[0].containers}
    assert outcomes == {"server": "exited", "stuck": "killed"}


async def test_container_exiting_on_its_own_mid_drain(deployer: Deployer) -> None:
    """A container that exits by itself while the server drains is no error. Its own pipeline
    signals it at once (it has no hook: Kubernetes would too), so it ignores TERM and leaves
    when the server stops being ready."""
    watcher = Container(
        name="watcher",
        image=BUSYBOX,
        command=[
            "sh",
            "-c",
            (
                "trap '' TERM; "
                "until wget -q -O /dev/null http://127.0.0.1:8080/ready; do sleep 0.2; done; "
                "while wget -q -O /dev/null http://127.0.0.1:8080/ready; do sleep 0.2; done; exit 0"
            ),
        ],
    )
    report = await run_verify(
        deployer,
        plan("v-self", grace_period_seconds=20, extra_containers=[watcher]),
        VerifyOptions(mix=MIX),
    )
    assert report.passed, report.text()
    outcomes = {c.name: (c.outcome, c.exit_code) for c in report.summaries[0].containers}
    assert outcomes == {"server": ("exited", 0), "watcher": ("exited", 0)}
