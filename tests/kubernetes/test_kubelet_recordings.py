"""What a real kubelet recorded (``recordings/08*``, ``09*``), replayed through the driver's pure
parts: the drain's reading of the Pod and its Events, and the start-up failure reasons.

The recordings come from ``record_kubelet.py`` on the cluster ``ci/start-kube.sh`` starts; the
same behaviour is checked live by ``k8s_kubelet.py`` in ``test_real_cluster.py``.
"""

from __future__ import annotations

import copy
from typing import Any, cast

import attrs
import pytest
from k8s_recordings import recording

from asyncdeploy._events import (
    ContainerForceKilled,
    DrainEvent,
    DrainFinished,
    PreStopFinished,
    SignalSent,
)
from asyncdeploy.drivers.kubernetes._kubelet import event_time, read_event, startup_failure
from asyncdeploy.drivers.kubernetes._pod_states import PodDrainReader


@attrs.define
class Clock:
    now: float = 0.0

    def __call__(self) -> float:
        return self.now


def replay(stem: str) -> list[DrainEvent]:
    """Both recorded watches, merged by time, into a PodDrainReader started at the delete."""
    data = recording(stem)
    before = copy.deepcopy(data["pod_watch"][0]["object"])
    for key in ("deletionTimestamp", "deletionGracePeriodSeconds"):
        before["metadata"].pop(key, None)
    before["metadata"].setdefault("labels", {})["asyncdeploy.io/workload"] = "w"
    clock, events = Clock(), cast(list[DrainEvent], [])
    drain = PodDrainReader.of(
        before,
        grace=data["delete_grace_period_seconds"],
        started=0.0,
        margin=15,
        emit=events.append,
        clock=clock,
    )
    drain.begin()
    merged = [("pod", p) for p in data["pod_watch"]] + [("event", e) for e in data["event_watch"]]
    for source, line in sorted(merged, key=lambda item: item[1]["offset_s"]):
        clock.now = line["offset_s"]
        if source == "event":
            if (event := read_event(line["object"])) is not None:
                drain.kubelet(event)
        elif line["type"] == "DELETED":
            drain.removed(line["object"])
        else:
            drain.observe(line["object"])
    assert drain.done
    return events


def steps(events: list[DrainEvent]) -> list[tuple[str, float]]:
    return [(type(e).__name__, round(e.elapsed, 1)) for e in events]


def test_a_successful_prestop_hook_is_not_recorded_so_its_end_is_seen_with_the_exit() -> None:
    """08a: Killing at 0.4 s starts the hook; no Event for its end; exit 0 at 2.1 s."""
    assert steps(replay("08a"))[:5] == [
        ("DrainStarted", 0.0),
        ("PreStopStarted", 0.4),
        ("PreStopFinished", 2.1),
        ("SignalSent", 2.1),
        ("ContainerExited", 2.1),
    ]


def test_a_failed_prestop_hook_is_recorded_and_the_signal_follows() -> None:
    """08b: Killing, FailedPreStopHook 50 ms later, the container drains 1 s after SIGTERM."""
    events = replay("08b")
    assert steps(events)[:5] == [
        ("DrainStarted", 0.0),
        ("PreStopStarted", 0.0),
        ("PreStopFinished", 0.1),
        ("SignalSent", 0.1),
        ("ContainerExited", 1.3),
    ]
    [finished] = [e for e in events if isinstance(e, PreStopFinished)]
    assert (finished.exit_code, finished.timed_out) == (None, False)


def test_a_prestop_hook_past_the_grace_period_is_cut_off() -> None:
    """08c: grace 3, the hook sleeps 60: FailedPreStopHook at 3.3 s reads as timed out."""
    events = replay("08c")
    [finished] = [e for e in events if isinstance(e, PreStopFinished)]
    assert (finished.exit_code, finished.timed_out, round(finished.elapsed, 1)) == (None, True, 3.3)
    [signal] = [e for e in events if isinstance(e, SignalSent)]
    assert signal.elapsed == finished.elapsed


def test_without_a_hook_the_signal_is_the_killing_event() -> None:
    """08d: SIGTERM at the Killing Event (0.04 s), the 2 s drain ends at 2.2 s."""
    assert steps(replay("08d"))[:3] == [
        ("DrainStarted", 0.0),
        ("SignalSent", 0.0),
        ("ContainerExited", 2.2),
    ]


def test_sigterm_ignored_is_killed_at_the_deadline() -> None:
    """08e: grace 2, exit 137 at 2.2 s: ContainerForceKilled before the exit; no Event says so
    (kubelet v1.36 records no ExceededGracePeriod on containerd)."""
    events = replay("08e")
    names = [type(e).__name__ for e in events]
    assert names[:4] == ["DrainStarted", "SignalSent", "ContainerForceKilled", "ContainerExited"]
    assert [e.reason for e in events if isinstance(e, ContainerForceKilled)] == ["deadline"]
    reasons = [e["object"]["reason"] for e in recording("08e")["event_watch"]]
    assert reasons == ["Killing"]


def test_grace_zero_is_a_kill_even_when_the_killing_event_comes_after_the_pod_went() -> None:
    """08f: DELETED and Killing in the same millisecond, Killing second."""
    events = replay("08f")
    finished = events[-1]
    assert isinstance(finished, DrainFinished)
    assert [(c.outcome, c.exit_code) for c in finished.summary.containers] == [("killed", None)]
    assert [e.reason for e in events if isinstance(e, ContainerForceKilled)] == ["grace period 0"]


def test_an_event_name_carries_its_time_in_nanoseconds() -> None:
    """client-go names Events ``<object>.<hex UnixNano>``: sub-second times for latency."""
    event = recording("08d")["event_watch"][0]["object"]
    suffix = event["metadata"]["name"].rsplit(".", 1)[1]
    assert event_time(event) == int(suffix, 16) / 1e9
    assert event["eventTime"] is None and event["firstTimestamp"].endswith("Z")
    assert abs(event_time(event) - event_time({"firstTimestamp": event["firstTimestamp"]})) < 1


@pytest.mark.parametrize(
    ("stem", "what", "reason_in_message"),
    [
        ("09a", "ErrImagePull", "no-such-tag"),
        ("09b", "ErrImageNeverPull", "absent"),
        ("09c", "CreateContainerConfigError", "no-such-config-map"),
        ("09d", "container exited", ""),
        ("09e", "unschedulable", "Insufficient cpu"),
    ],
)
def test_why_a_pod_will_not_start_is_read_from_its_first_telling_state(
    stem: str, what: str, reason_in_message: str
) -> None:
    failures: list[tuple[float, Any]] = []
    for line in recording(stem)["pod_watch"]:
        if (failure := startup_failure(line["object"])) is not None:
            failures.append((line["offset_s"], failure))
    offset, first = failures[0]
    assert first.what == what
    assert first.container == "c"
    assert reason_in_message in first.message
    assert offset < 5  # seconds after the create, not a timeout later


def test_the_crash_loop_back_off_state_is_read_too() -> None:
    """09d's last state (exit 2), as the kubelet writes it once it backs off: waiting
    CrashLoopBackOff, the exit in lastState (the 12 s recording ends before the back-off)."""
    pod = copy.deepcopy(recording("09d")["pod_watch"][-1]["object"])
    [entry] = pod["status"]["containerStatuses"]
    entry["lastState"] = {"terminated": entry["state"]["terminated"]}
    entry["state"] = {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 10s"}}
    failure = startup_failure(pod)
    assert failure is not None
    assert (failure.what, failure.container, failure.exit_code) == ("CrashLoopBackOff", "c", 2)


def test_only_container_events_with_drain_reasons_are_read() -> None:
    reasons = {
        e["object"]["reason"]: read_event(e["object"]) is not None
        for stem in ("09a", "09d", "08b")
        for e in recording(stem)["event_watch"]
    }
    assert reasons == {
        "Scheduled": False,
        "MissingClusterDNS": False,
        "Pulling": False,
        "Failed": False,
        "BackOff": False,
        "Pulled": False,
        "Created": False,
        "Started": False,
        "Killing": True,
        "FailedPreStopHook": True,
    }


def test_unschedulable_names_the_containers_asking_for_what_is_short() -> None:
    """09e with an extended resource instead of cpu (as a node without enough GPUs answers):
    only the container that asks for it is named."""
    pod = copy.deepcopy(recording("09e")["pod_watch"][-1]["object"])
    [asking] = pod["spec"]["containers"]
    asking["resources"] = {"limits": {"nvidia.com/gpu": "4"}, "requests": {"nvidia.com/gpu": "4"}}
    pod["spec"]["containers"].append({"name": "sidecar", "image": asking["image"]})
    [condition] = [c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled"]
    condition["message"] = condition["message"].replace(
        "Insufficient cpu", "Insufficient nvidia.com/gpu"
    )
    failure = startup_failure(pod)
    assert failure is not None
    assert (failure.what, failure.container) == ("unschedulable", "c")
    assert "Insufficient nvidia.com/gpu." in failure.message
