"""What a takeover reads of the dead owner (issue 32 item 1): the signals the engine recorded
for these very containers (by id: an earlier workload of the same name was signalled too), and
an owner dead although its parent has not reaped it yet."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

from hypothesis import given
from hypothesis import strategies as st

from asyncdeploy._owner import Owner
from asyncdeploy.drivers.engine._history import signalled_after_pause
from asyncdeploy.labels import LABEL_CONTAINER, LABEL_WORKLOAD


def event(actor: str, container: str, action: str, at: float, **attributes: str) -> str:
    """One line of the engines' ``GET /events`` answer (Docker's shape; Podman's is alike)."""
    labels = {LABEL_CONTAINER: container, LABEL_WORKLOAD: "web", **attributes}
    return json.dumps(
        {
            "Type": "container",
            "Action": action,
            "Actor": {"ID": actor, "Attributes": labels},
            "timeNano": ns(at),
        }
    )


def ns(at: float) -> int:
    return int(at * 1e9)


def test_an_earlier_workload_of_the_same_name_was_not_signalled_by_this_drain() -> None:
    """The report's trigger: ``web`` made, drained (its ``app`` got SIGTERM), made again, its
    deleter killed during the hook. Docker claims without pausing, so no pause bounds the
    window: the old ``app``'s SIGTERM was read as the new one's."""
    lines = [
        event("old-app", "app", "kill", 100.0, signal="15"),
        event("old-app", "app", "die", 101.0),
        event("new-app", "app", "start", 200.0),
    ]
    assert signalled_after_pause(lines, "new-pause", {"new-app": "app"}) == frozenset()


def test_the_dead_owners_signal_of_this_container_counts_but_not_a_sigkill() -> None:
    lines = [
        event("new-pause", "pause", "pause", 200.0),
        event("new-app", "app", "kill", 201.0, signal="15"),
        event("new-side", "side", "kill", 201.0, signal="9"),
        event("new-proxy", "proxy", "died", 202.0),  # Podman's word
    ]
    ids = {"new-app": "app", "new-side": "side", "new-proxy": "proxy"}
    assert signalled_after_pause(lines, "new-pause", ids) == {"app"}


def test_a_signal_before_the_last_pause_of_this_pause_container_is_not_the_owners() -> None:
    lines = [
        event("new-pause", "pause", "pause", 200.0),
        event("new-app", "app", "stop", 201.0),
        event("new-pause", "pause", "unpause", 202.0),
        event("new-pause", "pause", "pause", 210.0),
    ]
    assert signalled_after_pause(lines, "new-pause", {"new-app": "app"}) == frozenset()


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["old-app", "new-app", "old-pause", "new-pause", "other"]),
            st.sampled_from(["kill", "stop", "pause", "die", "start"]),
            st.floats(min_value=0, max_value=1000),
            st.sampled_from(["15", "9", "SIGTERM", ""]),
        ),
        max_size=12,
    )
)
def test_only_this_workloads_containers_are_ever_named(
    raw: list[tuple[str, str, float, str]],
) -> None:
    """Whatever the history holds, a name is answered only for a signal the engine saw sent
    to that very container (its id), other than SIGKILL, after the pause's last pause."""
    lines = [event(actor, "app", action, at, signal=sig) for actor, action, at, sig in raw]
    found = signalled_after_pause(lines, "new-pause", {"new-app": "app"})
    # compared as the engine reports them, in whole nanoseconds (0.0 and 7.7e-145 are one time)
    pauses = [ns(at) for actor, action, at, _ in raw if actor == "new-pause" and action == "pause"]
    since = max(pauses, default=0)
    expected = any(
        actor == "new-app"
        and ns(at) >= since
        and (action == "stop" or (action == "kill" and sig != "9"))
        for actor, action, at, sig in raw
    )
    assert found == ({"app"} if expected else frozenset())


def test_a_killed_owner_its_parent_has_not_reaped_is_dead() -> None:
    """A zombie (a job of a shell, a supervisor's child, not waited for yet) runs nothing and
    holds no drain: its pid and start time are still in /proc, and it is dead all the same."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        owner = Owner.this_process()
        owner = Owner(
            host=owner.host,
            boot_id=owner.boot_id,
            pid=child.pid,
            pid_started=_started(child.pid),
            pid_namespace=owner.pid_namespace,
        )
        assert owner.alive() is True
        child.send_signal(signal.SIGKILL)
        deadline = time.monotonic() + 10
        while _state(child.pid) != "Z" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _state(child.pid) == "Z"  # not reaped: still in /proc
        assert owner.alive() is False
    finally:
        child.kill()
        child.wait()


def _fields(pid: int) -> list[str]:
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rpartition(")")[2].split()


def _state(pid: int) -> str:
    return _fields(pid)[0]


def _started(pid: int) -> str:
    return _fields(pid)[19]
