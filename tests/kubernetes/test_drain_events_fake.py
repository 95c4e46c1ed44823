"""The drain's reading of the kubelet's Events, against the fake API server and kubelet: what a
real cluster shows rarely or never on demand (Events refused, an Events watch that expires, an
Event recorded before the drain). The ordinary sequences are checked on a real kubelet by
``k8s_kubelet.py`` and replayed from its recordings by ``test_kubelet_recordings.py``.
"""

from __future__ import annotations

import anyio
import pytest
from fake_apiserver import NAMESPACE, FakeApiServer
from fake_kubelet import ContainerScript, Node
from k8s_recordings import recording
from test_driver_fake import EVENTS, drained, plan, running

from asyncdeploy import PreStopFinished, PreStopStarted, SignalSent
from asyncdeploy.drivers.kubernetes import KubernetesDriver
from asyncdeploy.drivers.kubernetes._kubelet import event_time
from tests.polling import until

pytestmark = pytest.mark.anyio
HOOK = ["sh", "-c", "sleep 1"]


def kinds(events: list[object]) -> list[str]:
    return [type(e).__name__ for e in events]


async def test_a_hook_is_started_at_the_killing_event_and_ended_at_the_exit(
    driver: KubernetesDriver, fake: FakeApiServer
) -> None:
    fake.scripts["server"] = ContainerScript(prestop=0.6, drain=0.2)
    await running(driver, plan(pre_stop=HOOK))
    events, [summary] = await drained(driver, ["demo"])
    assert kinds(events)[:5] == [
        "DrainStarted",
        "PreStopStarted",
        "PreStopFinished",
        "SignalSent",
        "ContainerExited",
    ]
    [started] = [e for e in events if isinstance(e, PreStopStarted)]
    [signal] = [e for e in events if isinstance(e, SignalSent)]
    assert signal.elapsed - started.elapsed > 0.5  # the hook ran between them
    assert summary.ok


async def test_a_failed_hook_is_read_from_its_event(
    driver: KubernetesDriver, fake: FakeApiServer
) -> None:
    fake.scripts["server"] = ContainerScript(prestop=0.1, prestop_fails=True, drain=0.5)
    await running(driver, plan(pre_stop=HOOK))
    events, _ = await drained(driver, ["demo"])
    [finished] = [e for e in events if isinstance(e, PreStopFinished)]
    assert (finished.exit_code, finished.timed_out) == (None, False)
    assert kinds(events)[1:5] == [
        "PreStopStarted",
        "PreStopFinished",
        "SignalSent",
        "ContainerExited",
    ]


@pytest.mark.parametrize("watch", [False, True])
async def test_events_that_cannot_be_read_leave_the_drain_whole(
    driver: KubernetesDriver, fake: FakeApiServer, watch: bool
) -> None:
    """403 on the Events list (or on their watch): the drain goes on; each step is emitted when
    the container's end is seen, in the same order."""
    fake.scripts["server"] = ContainerScript(prestop=0.2, drain=0.2)
    await running(driver, plan(pre_stop=HOOK))
    fake.inject("GET", EVENTS, 403, watch=watch, times=5)
    events, [summary] = await drained(driver, ["demo"])
    assert summary.ok
    assert kinds(events)[:5] == [
        "DrainStarted",
        "PreStopStarted",
        "PreStopFinished",
        "SignalSent",
        "ContainerExited",
    ]


async def test_an_event_recorded_before_the_drain_is_not_about_it(
    driver: KubernetesDriver, fake: FakeApiServer
) -> None:
    """A FailedPreStopHook Event of an earlier stop is in every fresh list of the Pod's Events:
    when the watches expire mid-drain, the resync must not read it as this hook's end."""
    fake.scripts["server"] = ContainerScript(prestop=1.5, drain=0.2)
    await running(driver, plan(pre_stop=HOOK))
    key = (NAMESPACE, "demo")
    node = Node(key, fake.pods[key]["metadata"]["uid"])
    fake.record_event(node, "server", "FailedPreStopHook", "PreStopHook failed")
    events: list[object] = []

    async def expire_once_the_hook_runs() -> None:
        await until(lambda: "PreStopStarted" in kinds(events))
        fake.expire_watches()

    async with anyio.create_task_group() as tg:
        tg.start_soon(expire_once_the_hook_runs)
        found = await driver.find(["demo"])
        await driver.drain(found, grace_period_seconds=None, emit=events.append)
    [finished] = [e for e in events if isinstance(e, PreStopFinished)]
    assert (finished.exit_code, finished.timed_out) == (0, False)
    assert finished.elapsed > 1.4  # at the container's end, not at the resync
    assert events[-1].summary.ok  # type: ignore[attr-defined]


async def test_a_repeated_event_whose_count_was_bumped_is_read(
    driver: KubernetesDriver, fake: FakeApiServer
) -> None:
    """Issue 16 item 13: the kubelet stopped this container before (an earlier restart): its
    "Stopping container server" Event exists, and this drain's Killing is that Event with its
    count bumped, under the same name. It is read as news: the hook starts at it (not, late,
    at the container's exit)."""
    fake.scripts["server"] = ContainerScript(prestop=1.5, drain=0.2)
    await running(driver, plan(pre_stop=HOOK))
    key = (NAMESPACE, "demo")
    node = Node(key, fake.pods[key]["metadata"]["uid"])
    fake.record_event(node, "server", "Killing", "Stopping container server")
    events: list[object] = []
    found = await driver.find(["demo"])
    await driver.drain(found, grace_period_seconds=None, emit=events.append)
    [(_, kind, bumped)] = fake.kubelet_events
    assert (kind, bumped["count"]) == ("MODIFIED", 2)  # one Event, recorded twice
    [started] = [e for e in events if isinstance(e, PreStopStarted)]
    assert started.elapsed < 1.0  # at the Killing Event, before the 1.5 s hook ended
    assert events[-1].summary.ok  # type: ignore[attr-defined]


async def test_the_fakes_events_have_the_recorded_shape(
    driver: KubernetesDriver, fake: FakeApiServer
) -> None:
    """Held to ``recordings/08d``: the same fields (managedFields aside), the same name form."""
    recorded = recording("08d")["event_watch"][0]["object"]
    await running(driver, plan())
    await drained(driver, ["demo"])
    [(_, _, made)] = fake.kubelet_events
    assert sorted(made) == sorted(recorded)
    assert sorted(made["metadata"]) == sorted(set(recorded["metadata"]) - {"managedFields"})
    assert sorted(made["involvedObject"]) == sorted(recorded["involvedObject"])
    for key in ("reason", "type", "count", "eventTime", "reportingComponent"):
        assert made[key] == recorded[key], key
    assert (made["message"], recorded["message"]) == (
        "Stopping container server",
        "Stopping container c",
    )
    suffix = made["metadata"]["name"].rsplit(".", 1)[1]
    assert event_time(made) == int(suffix, 16) / 1e9  # the recorder's name form
