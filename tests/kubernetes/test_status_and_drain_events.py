"""Reading live Pods, and deriving drain events from recorded kubelet sequences (pure).

The drain events come from what a real kubelet reported (05a, 05b, 05g), fed to the same
:class:`PodDrainReader` the driver uses, on a clock that replays the recorded offsets.
"""

from __future__ import annotations

import copy
from typing import Any, cast

import pytest
from k8s_recordings import exchange, recording

from asyncdeploy._events import (
    ContainerExited,
    ContainerForceKilled,
    ContainerRemoved,
    DrainEvent,
    DrainFinished,
    DrainStarted,
    PauseRemoved,
    SignalSent,
)
from asyncdeploy.drivers.kubernetes import _status as pod_status
from asyncdeploy.drivers.kubernetes._pod_states import PodDrainReader


def running_rich_pod() -> dict[str, Any]:
    """01d: the rich Pod (two init, two run containers) Running and ready on a real node."""
    pod: dict[str, Any] = exchange("01d", "GET later")["response"]["body"]
    pod["metadata"]["labels"]["asyncdeploy.io/workload"] = "rec-rich-node"
    return pod


def test_a_running_pod_reads_as_running_with_roles_and_health() -> None:
    status = pod_status.workload_status(running_rich_pod())
    assert status.driver == "kubernetes"
    assert status.state == "running"
    assert [(c.name, c.role, c.state, c.exit_code, c.health) for c in status.containers] == [
        ("init-index", "init", "exited", 0, None),
        ("init-check", "init", "exited", 0, None),
        ("server", "run", "running", None, "healthy"),
        ("sidecar", "run", "running", None, "healthy"),
    ]
    assert status.grace_period_seconds == 45
    assert "asyncdeploy.io/workload" not in status.labels
    assert status.labels["app"] == "infer"
    assert pod_status.pod_ready(running_rich_pod())


def test_a_created_pod_without_status_reads_as_created() -> None:
    pod = exchange("01b", "create")["response"]["body"]
    status = pod_status.workload_status(pod)
    assert {c.state for c in status.containers} == {"created"}
    assert status.state == "created"
    assert not pod_status.pod_ready(pod)


@pytest.mark.parametrize(
    ("entry", "state"),
    [
        ({"state": {"running": {}}}, "running"),
        ({"state": {"terminated": {"exitCode": 1}}}, "exited"),
        ({"state": {"waiting": {"reason": "CrashLoopBackOff"}}}, "restarting"),
        ({"state": {"waiting": {"reason": "ContainerCreating"}}}, "created"),
        (None, "created"),
    ],
)
def test_container_states_use_the_engines_words(entry: Any, state: str) -> None:
    assert pod_status.container_state(entry) == state


def test_inspect_masks_secret_looking_env_values_and_drops_managed_fields() -> None:
    pod = running_rich_pod()
    pod["spec"]["containers"][0]["env"] += [
        {"name": "HF_TOKEN", "value": "hf_abc"},
        {"name": "DB_PASSWORD", "value": "pw"},
        {"name": "API_KEY", "value": "k"},
    ]
    masked = pod_status.masked_pod(pod)
    env = {e["name"]: e.get("value") for e in masked["spec"]["containers"][0]["env"]}
    assert env["HF_TOKEN"] == env["DB_PASSWORD"] == env["API_KEY"] == "****"
    assert env["MODEL"] == "m1"
    assert "managedFields" not in masked["metadata"]
    assert pod["spec"]["containers"][0]["env"][-1]["value"] == "k"  # the original is untouched


# --- drain events from recorded watches -------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def replay(stem: str, pod: dict[str, Any], delete_offset: float, grace: int) -> list[DrainEvent]:
    """Feed a recorded watch, from the DELETE on, to a PodDrainReader; return what it emitted."""
    clock, events = Clock(), cast(list[DrainEvent], [])
    pod = copy.deepcopy(pod)
    pod["metadata"].setdefault("labels", {})["asyncdeploy.io/workload"] = pod["metadata"]["name"]
    drain = PodDrainReader.of(
        pod, grace=grace, started=0.0, margin=15, emit=events.append, clock=clock
    )
    drain.begin()
    for event in recording(stem)["watches"][0]["response"]["events"]:
        if event["offset_s"] < delete_offset:
            continue
        clock.now = event["offset_s"] - delete_offset
        if event["type"] == "DELETED":
            drain.removed(event["object"])
        else:
            drain.observe(event["object"])
    assert drain.done
    return events


def _delete_offset(stem: str) -> float:
    for item in recording(stem)["exchanges"]:
        if item.get("request", {}).get("method") == "DELETE":
            return float(item["offset_s"])
    raise AssertionError(stem)


def test_a_container_that_exits_0_on_sigterm() -> None:
    """05a: SIGTERM seen with the deletionTimestamp, exit 0 two seconds later, then removal."""
    running = recording("05a")["watches"][0]["response"]["events"][3]["object"]
    events = replay("05a", running, _delete_offset("05a"), grace=10)
    assert [type(e) for e in events] == [
        DrainStarted,
        SignalSent,
        ContainerExited,
        ContainerRemoved,
        PauseRemoved,
        DrainFinished,
    ]
    assert events[1] == SignalSent(
        workload="watch-a", elapsed=events[1].elapsed, container="main", signal="SIGTERM"
    )
    exited = events[2]
    assert isinstance(exited, ContainerExited)
    assert (exited.exit_code, exited.graceful) == (0, True)
    assert 2.0 < exited.elapsed < 2.5
    assert events[4] == PauseRemoved(
        workload="watch-a", elapsed=events[4].elapsed, container="watch-a-sandbox"
    )
    summary = events[-1].summary  # type: ignore[union-attr]
    assert [(c.name, c.outcome, c.exit_code) for c in summary.containers] == [("main", "exited", 0)]
    assert summary.ok


def test_a_container_that_ignores_sigterm_is_force_killed_at_the_deadline() -> None:
    """05b: exit 137 (reason Error) 3.15 s after the DELETE with grace 3."""
    running = recording("05b")["watches"][0]["response"]["events"][3]["object"]
    events = replay("05b", running, _delete_offset("05b"), grace=3)
    assert [type(e) for e in events] == [
        DrainStarted,
        SignalSent,
        ContainerForceKilled,
        ContainerExited,
        ContainerRemoved,
        PauseRemoved,
        DrainFinished,
    ]
    killed = events[2]
    assert isinstance(killed, ContainerForceKilled) and killed.reason == "deadline"
    exited = events[3]
    assert isinstance(exited, ContainerExited)
    assert (exited.exit_code, exited.graceful) == (137, False)
    summary = events[-1].summary  # type: ignore[union-attr]
    assert [(c.outcome, c.exit_code) for c in summary.containers] == [("killed", 137)]


def test_the_rich_pod_init_containers_had_already_exited() -> None:
    """05g: two init containers done long before; two run containers die of SIGTERM (143)."""
    before = exchange("05g", "GET the Running rich Pod")["response"]["body"]
    events = replay("05g", before, _delete_offset("05g"), grace=10)
    started = events[0]
    assert isinstance(started, DrainStarted)
    assert started.containers == ("init-index", "init-check", "server", "sidecar")
    signalled = [e.container for e in events if isinstance(e, SignalSent)]
    assert signalled == ["server", "sidecar"]
    exits = [
        (e.container, e.exit_code, e.graceful) for e in events if isinstance(e, ContainerExited)
    ]
    assert exits == [("server", 143, True), ("sidecar", 143, True)]
    summary = events[-1].summary  # type: ignore[union-attr]
    assert [(c.name, c.role, c.outcome, c.exit_code) for c in summary.containers] == [
        ("init-index", "init", "already-exited", 0),
        ("init-check", "init", "already-exited", 0),
        ("server", "run", "exited", 143),
        ("sidecar", "run", "exited", 143),
    ]
    removed = [e.container for e in events if isinstance(e, ContainerRemoved)]
    assert removed == ["init-index", "init-check", "server", "sidecar"]


def test_a_pod_removed_at_once_has_its_running_containers_killed() -> None:
    """03e: grace 0 removes the object while the containers still show running: the kubelet
    kills them (its minimum grace, 2 s), and no status is left to show it."""
    running = recording("03e")["watches"][0]["response"]["events"][0]["object"]
    running = copy.deepcopy(running)
    for key in ("deletionTimestamp", "deletionGracePeriodSeconds"):
        running["metadata"].pop(key)
    events = replay("03e", running, 0.0, grace=0)
    summary = events[-1].summary  # type: ignore[union-attr]
    assert [(c.outcome, c.exit_code) for c in summary.containers] == [("killed", None)]
    assert summary.ok
    assert [e.reason for e in events if isinstance(e, ContainerForceKilled)] == ["grace period 0"]
    assert not any(isinstance(e, ContainerRemoved) for e in events)
    assert isinstance(events[-2], PauseRemoved)


def test_a_container_that_ended_before_the_delete_took_effect_was_not_signalled() -> None:
    """An exit seen before the deletionTimestamp is already-exited: no SignalSent for it."""
    running = copy.deepcopy(recording("05a")["watches"][0]["response"]["events"][3]["object"])
    running["metadata"]["labels"]["asyncdeploy.io/workload"] = "watch-a"
    ended = copy.deepcopy(running)
    ended["status"]["containerStatuses"][0]["state"] = {"terminated": {"exitCode": 1}}
    deleted = copy.deepcopy(ended)
    deleted["metadata"].update(
        deletionTimestamp="2026-11-29T14:36:21Z", deletionGracePeriodSeconds=0
    )
    clock, events = Clock(), cast(list[DrainEvent], [])
    drain = PodDrainReader.of(
        running, grace=10, started=0.0, margin=15, emit=events.append, clock=clock
    )
    drain.begin()
    drain.observe(ended)
    drain.removed(deleted)
    assert not any(isinstance(e, SignalSent) for e in events)
    exited = next(e for e in events if isinstance(e, ContainerExited))
    assert (exited.exit_code, exited.graceful) == (1, True)
    summary = events[-1].summary  # type: ignore[union-attr]
    assert [(c.outcome, c.exit_code) for c in summary.containers] == [("already-exited", 1)]


def _gated_pod(gate: dict[str, Any], engine: dict[str, Any]) -> dict[str, Any]:
    """A Pod as the gate's plan makes it: the gate a native sidecar, the engine behind it
    (the statuses as the real cluster shows them in test_real_cluster.py's gate test)."""
    return {
        "metadata": {
            "name": "gated",
            "uid": "u-1",
            "labels": {"asyncdeploy.io/workload": "gated"},
        },
        "spec": {
            "terminationGracePeriodSeconds": 20,
            "initContainers": [{"name": "engine-gate", "restartPolicy": "Always"}],
            "containers": [
                {"name": "engine", "lifecycle": {"preStop": {"httpGet": {"path": "/-/drain"}}}}
            ],
        },
        "status": {
            "initContainerStatuses": [{"name": "engine-gate", "state": gate}],
            "containerStatuses": [{"name": "engine", "state": engine}],
        },
    }


def test_a_native_sidecar_is_signalled_after_the_engine_has_exited() -> None:
    """The kubelet records ``Killing`` for every container at the start of a delete, the native
    sidecar's too, but signals the sidecar only once the run containers have exited. Before,
    the gate's SignalSent came at 0 s, before the engine's preStop even ended; and one Pod
    update showing both ends emitted the gate's exit first."""
    from asyncdeploy._events import PreStopFinished, PreStopStarted
    from asyncdeploy.drivers.kubernetes._kubelet import KubeletEvent

    running, done = {"running": {}}, {"terminated": {"exitCode": 0}}
    clock, events = Clock(), cast(list[DrainEvent], [])
    pod = _gated_pod(running, running)
    drain = PodDrainReader.of(
        pod, grace=None, started=0.0, margin=15, emit=events.append, clock=clock
    )
    drain.begin()
    clock.now = 0.1
    for container in ("engine-gate", "engine"):  # as the real kubelet records them
        drain.kubelet(KubeletEvent("k-" + container, 1, "u-1", "Killing", container, "", None))
    assert [type(e) for e in events[1:]] == [PreStopStarted]  # the gate is not signalled yet
    clock.now = 1.6
    drain.observe(_gated_pod(done, done))  # one update shows both ended (as on the cluster)
    order = [(type(e).__name__, getattr(e, "container", "")) for e in events[1:]]
    assert order == [
        ("PreStopStarted", "engine"),
        ("PreStopFinished", "engine"),
        ("SignalSent", "engine"),
        ("ContainerExited", "engine"),
        ("SignalSent", "engine-gate"),
        ("ContainerExited", "engine-gate"),
    ]
    assert all(e.elapsed == 1.6 for e in events[2:])
    assert next(e for e in events if isinstance(e, PreStopFinished)).exit_code == 0


def test_a_native_sidecar_is_signalled_when_the_last_engine_exit_is_seen() -> None:
    """The engine's exit seen first, the sidecar's later: the sidecar's SignalSent carries the
    moment the engine's exit was seen (its turn), not the moment of its own end."""
    from asyncdeploy.drivers.kubernetes._kubelet import KubeletEvent

    running, done = {"running": {}}, {"terminated": {"exitCode": 0}}
    clock, events = Clock(), cast(list[DrainEvent], [])
    drain = PodDrainReader.of(
        _gated_pod(running, running), grace=None, started=0.0, margin=15, emit=events.append,
        clock=clock,
    )  # fmt: skip
    drain.begin()
    drain.kubelet(KubeletEvent("k-gate", 1, "u-1", "Killing", "engine-gate", "", None))
    clock.now = 1.2
    drain.observe(_gated_pod(running, done))
    clock.now = 1.5
    drain.observe(_gated_pod(done, done))
    [gate_signal] = [e for e in events if isinstance(e, SignalSent) and e.container != "engine"]
    assert gate_signal.elapsed == 1.2 and gate_signal.role == "sidecar"
    exits = [(e.container, e.elapsed) for e in events if isinstance(e, ContainerExited)]
    assert exits == [("engine", 1.2), ("engine-gate", 1.5)]


def test_an_error_seen_twice_is_written_once_through_the_books() -> None:
    """Issue 18 item 4: the reader keeps its errors in its DrainBooks (a field, as the engine
    drain's), never in a list of its own: the same failure reported twice (the watch refused,
    then the stuck check at the give-up time) is one error line, and one DrainFinished."""
    pod = running_rich_pod()
    clock, events = Clock(), cast(list[DrainEvent], [])
    drain = PodDrainReader.of(pod, grace=5, started=0.0, margin=15, emit=events.append, clock=clock)
    drain.begin()
    message = "cannot follow pod rich: forbidden"
    drain.books.error(message)
    clock.now = 30.0
    drain.fail(message)
    drain.fail(drain.stuck())
    finished = [e for e in events if isinstance(e, DrainFinished)]
    assert len(finished) == 1
    assert finished[0].summary.errors == (message,)
    assert drain.books.errors == [message]
