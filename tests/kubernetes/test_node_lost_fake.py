"""A node that stops reporting in the middle of a drain, on the fake API server (issue 31 item 5).

The fake's lost node answers as ``recordings/10a-node-lost-mid-drain.json`` recorded of a real
kubelet stopped mid-drain: its Lease's ``renewTime`` stays at the last renewal, its Node stays
Ready (no node lifecycle controller), its Pod stays Terminating with its container running.
The real-cluster half is ``test_real_cluster_nodes.py``; here what it cannot show on demand: a
lease only just silent, Nodes and Leases that cannot be read, several Pods on a lost node and a
live one, the kill path.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import anyio
import pytest
from fake_apiserver import NAMESPACE, NODE, FakeApiServer
from hypothesis import given
from hypothesis import strategies as st
from k8s_recordings import recording

from asyncdeploy import (
    DrainEvent,
    DrainFinished,
    NodeUnreachable,
    PauseRemoved,
    TeardownPending,
)
from asyncdeploy.drivers.kubernetes import KubernetesDriver
from asyncdeploy.drivers.kubernetes._status import node_silence, timestamp

pytestmark = pytest.mark.anyio

LOST = "lost-node"


async def _pod_on(fake: FakeApiServer, name: str, node: str, grace: int = 10) -> None:
    """A Pod bound to ``node``, running (its kubelet ran it before it went silent)."""
    fake.create_pod(
        NAMESPACE,
        {
            "metadata": {"name": name, "labels": {"asyncdeploy.io/workload": name}},
            "spec": {
                "nodeName": node,
                "terminationGracePeriodSeconds": grace,
                "containers": [{"name": "c", "image": "x:1"}],
            },
        },
    )
    await anyio.sleep(0.5)


async def _drained(
    driver: KubernetesDriver, names: list[str], grace: int | None = None
) -> tuple[list[DrainEvent], list[Any]]:
    events: list[DrainEvent] = []
    summaries = await driver.drain(
        await driver.find(names), grace_period_seconds=grace, emit=events.append
    )
    return events, summaries


def _ready(node: dict[str, Any]) -> str:
    [ready] = [c for c in node["status"]["conditions"] if c["type"] == "Ready"]
    return str(ready["status"])


async def test_the_fake_lost_node_answers_as_the_recorded_one(fake: FakeApiServer) -> None:
    """10a: while the kubelet is stopped its Lease's renewTime (a MicroTime) stays at its last
    renewal and its Node stays Ready; the Pod keeps its deletionTimestamp and its container
    running. The fake's lost node: the same shapes and the same standstill."""
    recorded = recording("10a")["exchanges"]
    leases = [e["response"]["body"] for e in recorded if e["label"].startswith("lease, kubelet s")]
    nodes = [e["response"]["body"] for e in recorded if e["label"].startswith("node, kubelet s")]
    pods = [e["response"]["body"] for e in recorded if e["label"].startswith("pod, kubelet s")]
    assert len({lease["spec"]["renewTime"] for lease in leases}) == 1  # it never moved
    assert {_ready(node) for node in nodes} == {"True"}
    assert all(p["metadata"]["deletionTimestamp"] for p in pods)
    assert all("running" in p["status"]["containerStatuses"][0]["state"] for p in pods)

    fake.lose_node(LOST, silent_for=30)
    await _pod_on(fake, "held", LOST)
    answers = [fake._lease(LOST), fake._lease(LOST)]
    for answer, real in ((answers[0], leases[0]), (fake._node(LOST), nodes[0])):
        assert answer["kind"] == real["kind"] and answer["apiVersion"] == real["apiVersion"]
    assert set(answers[0]["spec"]) == set(leases[0]["spec"])
    assert answers[0]["spec"]["leaseDurationSeconds"] == leases[0]["spec"]["leaseDurationSeconds"]
    shape = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z"
    assert re.fullmatch(shape, leases[0]["spec"]["renewTime"])
    assert re.fullmatch(shape, answers[0]["spec"]["renewTime"])
    assert answers[0]["spec"]["renewTime"] == answers[1]["spec"]["renewTime"]  # standstill
    assert _ready(fake._node(LOST)) == "True"
    fake._delete_pod((NAMESPACE, "held"), None)
    await anyio.sleep(5)
    pod = fake.pods[(NAMESPACE, "held")]
    assert pod["metadata"]["deletionTimestamp"]
    assert "running" in pod["status"]["containerStatuses"][0]["state"]


async def test_a_pod_on_a_node_that_stopped_reporting_ends_as_node_unreachable(
    driver: KubernetesDriver, fake: FakeApiServer
) -> None:
    """At the give-up time (grace 10 + its 5 s teardown margin) the Pod is still there and its node's
    lease was last renewed 60 s ago: ``NodeUnreachable`` (the node, the Pod, how long silent,
    what to run), then ``DrainFinished`` whose summary names the node and says the truth in its
    error; the container's end was not seen (``missing``); no ``TeardownPending``."""
    fake.lose_node(LOST, silent_for=60)
    await _pod_on(fake, "held", LOST)
    started = anyio.current_time()
    events, [summary] = await _drained(driver, ["held"])
    assert anyio.current_time() - started == pytest.approx(15, abs=0.5)  # at its give-up
    [lost] = [e for e in events if isinstance(e, NodeUnreachable)]
    assert (lost.workload, lost.node, lost.pod) == ("held", LOST, "held")
    assert lost.silent_for is not None and lost.silent_for >= 60
    assert f"kubectl delete pod held -n {NAMESPACE} --force --grace-period=0" in lost.remedy
    assert f"the kubelet on {LOST}" in lost.remedy
    assert events[-2] is lost and isinstance(events[-1], DrainFinished)
    assert summary.unreachable_node == LOST and not summary.tearing_down and not summary.ok
    [error] = summary.errors
    assert error.startswith(f"pod held on node {LOST} was still there when the wait ended")
    assert "its kubelet has not renewed its lease for" in error and "c not seen to end" in error
    assert [c.outcome for c in summary.containers] == ["missing"]
    assert not [e for e in events if isinstance(e, TeardownPending | PauseRemoved)]
    pod = fake.pods[(NAMESPACE, "held")]
    assert pod["metadata"]["deletionTimestamp"]  # still Terminating, as recorded (10a)


async def test_a_lease_not_yet_two_renewals_late_is_not_judged(
    driver: KubernetesDriver, fake: FakeApiServer
) -> None:
    """Silent for 15 s of a 40 s lease (one renewal missed, as a busy kubelet may): the node is
    not said to be lost; the drain ends as any stuck one, saying what was seen."""
    fake.lose_node(LOST, silent_for=15)  # the wall clock barely moves under virtual time
    await _pod_on(fake, "late", LOST)
    events, [summary] = await _drained(driver, ["late"])
    assert not [e for e in events if isinstance(e, NodeUnreachable)]
    assert summary.unreachable_node is None
    assert summary.errors == (
        "pod late was still there 5 s after its 10 s grace period: c not seen to end",
    )


@pytest.mark.parametrize("refused", ["nodes", "leases"])
async def test_a_node_that_cannot_be_read_is_not_judged(
    driver: KubernetesDriver, fake: FakeApiServer, refused: str
) -> None:
    """No right to read Nodes or Leases (403): nothing is said of the node beyond what was
    seen; the drain still ends at its give-up time. (Either read alone is enough: a stale
    lease, or a Ready condition Unknown.)"""
    fake.lose_node(LOST, silent_for=60)
    await _pod_on(fake, "unread", LOST)
    if refused == "leases":
        fake.inject("GET", r"/apis/coordination.k8s.io/.*", 403, times=10)
        events, [summary] = await _drained(driver, ["unread"])
        assert summary.unreachable_node is None  # the Node is Ready (10a): no evidence
        assert not [e for e in events if isinstance(e, NodeUnreachable)]
        assert summary.errors == (
            "pod unread was still there 5 s after its 10 s grace period: c not seen to end",
        )
    else:
        fake.inject("GET", r"/api/v1/nodes/.*", 403, times=10)
        events, [summary] = await _drained(driver, ["unread"])
        assert summary.unreachable_node == LOST  # the stale lease says it alone
        assert [e.node for e in events if isinstance(e, NodeUnreachable)] == [LOST]


async def test_pods_on_a_lost_node_and_a_live_one_under_one_delete(
    driver: KubernetesDriver, fake: FakeApiServer
) -> None:
    """One drain, two Pods on the lost node and one on a live one: the live one drains as
    ever (its node is never judged); each of the other two ends as ``NodeUnreachable``."""
    fake.lose_node(LOST, silent_for=60)
    await _pod_on(fake, "a", LOST)
    await _pod_on(fake, "b", LOST)
    await _pod_on(fake, "live", NODE)
    events, summaries = await _drained(driver, ["a", "b", "live"])
    by_name = {s.workload: s for s in summaries}
    assert by_name["a"].unreachable_node == LOST and by_name["b"].unreachable_node == LOST
    assert by_name["live"].unreachable_node is None
    assert sorted(e.pod for e in events if isinstance(e, NodeUnreachable)) == ["a", "b"]


async def test_a_live_node_is_never_judged(driver: KubernetesDriver, fake: FakeApiServer) -> None:
    """A Pod held on a node that reports (its kubelet never acts on the delete here): stuck, as
    before; its node's Lease is fresh, so nothing is said of it."""
    fake.dead_nodes.add(NODE)  # its kubelet never acts on the delete, yet its lease is fresh
    await _pod_on(fake, "held", NODE)
    events, [summary] = await _drained(driver, ["held"])
    assert summary.unreachable_node is None
    assert not [e for e in events if isinstance(e, NodeUnreachable)]
    assert any(
        "GET /apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/" in c
        for c in fake.calls()
    )  # it was asked


async def test_a_drain_cut_short_on_a_lost_node_is_a_kill_not_a_lost_node(
    driver: KubernetesDriver, fake: FakeApiServer
) -> None:
    """The caller cancels (a second Ctrl-C) before the give-up time: the grace-0 delete removes
    the Pod object at once whatever its node says, so the drain ends as a kill, with no
    ``NodeUnreachable``, and the Pod is gone from the API."""
    fake.lose_node(LOST, silent_for=60)
    await _pod_on(fake, "cut", LOST)
    events: list[DrainEvent] = []
    found = await driver.find(["cut"])
    with anyio.move_on_after(3):
        await driver.drain(found, grace_period_seconds=None, emit=events.append)
    [finished] = [e for e in events if isinstance(e, DrainFinished)]
    assert finished.summary.unreachable_node is None
    assert [c.outcome for c in finished.summary.containers] == ["killed"]
    assert not [e for e in events if isinstance(e, NodeUnreachable)]
    assert (NAMESPACE, "cut") not in fake.pods


def test_the_recorded_lease_is_judged_silent_only_past_two_missed_renewals() -> None:
    """The rule on the recorded answers (10a), each read at the wall clock it was recorded. The
    kubelet last renewed its lease 5.6 s before the first read and was stopped 0.3 s after it:
    at 0, 5 and 10 s (16 s since the renewal, under half of its 40 s lease) the node is not
    judged; from 15 s (21 s since) on, it is, saying how long it was silent; once resumed
    (38 s), not any more. The Node's Ready condition stayed True throughout (no lifecycle
    controller): the Lease alone says it."""
    recorded = recording("10a")["exchanges"]
    verdicts = []
    node = next(e["response"]["body"] for e in recorded if e["label"].startswith("node, kub"))
    for entry in recorded:
        if entry["label"].startswith("lease"):
            read_at = timestamp(entry["wall_clock"])
            silence = node_silence("127.0.0.4", node, entry["response"]["body"], read_at)
            verdicts.append((round(entry["offset_s"]), silence))
    assert [o for o, s in verdicts if s is None] == [0, 5, 10, 38], verdicts
    assert [o for o, s in verdicts if s is not None] == [15, 20, 25, 30, 35], verdicts
    silent = [s for _, s in verdicts if s is not None]
    assert all(s.node == "127.0.0.4" and s.silent_for is not None for s in silent)
    assert [round(s.silent_for or 0) for s in silent] == sorted(
        round(s.silent_for or 0) for s in silent
    )
    unknown = {"status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}}
    assert node_silence("n", unknown, None, 0.0) is not None  # the controller's verdict alone
    assert node_silence("n", None, None, 0.0) is None  # nothing read: nothing said


@given(
    age=st.floats(min_value=0, max_value=600, allow_nan=False),
    duration=st.integers(min_value=1, max_value=300),
    digits=st.integers(min_value=0, max_value=6),
    ready=st.sampled_from(["True", "False", None]),
)
def test_a_lease_is_judged_silent_exactly_past_half_its_duration(
    age: float, duration: int, digits: int, ready: str | None
) -> None:
    """Whatever the lease's length and however many fractional digits its renewTime has (a
    MicroTime has 6; 0 must read too), a node is judged silent exactly when its lease is older
    than half its duration, and then says how old; a Ready condition other than ``Unknown``
    changes nothing."""
    now = 1_796_613_827.0
    renewed = datetime.fromtimestamp(now - age, UTC)
    text = (
        renewed.strftime("%Y-%m-%dT%H:%M:%S")
        + (f".{renewed.microsecond:06d}"[: digits + 1] if digits else "")
        + "Z"
    )
    read_age = now - datetime.fromisoformat(text).timestamp()  # what the digits kept of it
    lease = {"spec": {"renewTime": text, "leaseDurationSeconds": duration}}
    node = (
        None if ready is None else {"status": {"conditions": [{"type": "Ready", "status": ready}]}}
    )
    silence = node_silence("n", node, lease, now)
    if read_age > duration / 2:
        assert silence is not None and silence.silent_for == round(read_age, 1)
    else:
        assert silence is None
