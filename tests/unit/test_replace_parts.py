"""The pure parts of replace and recovery: the strategy choice, the lock record, the marks of
what a dead deployer left, and the replace signal policy (real signals to this process)."""

from __future__ import annotations

import json
import os
import signal
import time

import anyio
import attrs
import pytest

from asyncdeploy import Container, PlanError, Port, WorkloadPlan
from asyncdeploy._owner import Owner
from asyncdeploy.cli._common import CommandFailed
from asyncdeploy.cli._signals import Interrupts
from asyncdeploy.drivers.engine._unfinished import unfinished
from asyncdeploy.labels import LABEL_ATTEMPT_OWNER, LABEL_ROLE
from asyncdeploy.replace._lock import LockRecord
from asyncdeploy.replace._strategy import choose as _choose


def web(host_port: int | None) -> WorkloadPlan:
    server = Container(
        name="server", image="busybox", ports=[Port(container_port=80, host_port=host_port)]
    )
    return WorkloadPlan(name="app", containers=[server])


def test_auto_recreates_only_for_a_host_port_the_old_instance_holds() -> None:
    assert _choose("auto", web(18000), ["app"], "docker", {"18000/tcp"})[0] == "recreate"
    assert _choose("auto", web(18001), ["app"], "docker", {"18000/tcp"})[0] == "surge"
    assert _choose("auto", web(None), ["app"], "podman", set())[0] == "surge"
    assert _choose("auto", web(18000), [], "docker", set())[0] == "surge"
    assert _choose("recreate", web(None), ["app"], "docker", set()) == ("recreate", "asked for")
    strategy, reason = _choose("auto", web(18000), ["app"], "kubernetes", set())
    assert strategy == "surge" and "recreate if it cannot be scheduled" in reason


def test_surge_refuses_a_host_port_it_would_need_twice_before_anything() -> None:
    with pytest.raises(PlanError, match="surge needs host port 18000/tcp twice"):
        _choose("surge", web(18000), ["app"], "docker", {"18000/tcp"})


def dead_owner() -> Owner:
    return attrs.evolve(Owner.this_process(), pid_started="1")  # this pid, another start


def test_a_lock_record_is_stale_when_its_owner_died_or_its_bound_passed() -> None:
    now = time.time()
    mine = LockRecord(owner=Owner.this_process(), started=now, expires=now + 60)
    assert not mine.stale(now)
    assert mine.stale(now + 61)
    assert attrs.evolve(mine, owner=dead_owner()).stale(now)
    elsewhere = attrs.evolve(mine, owner=attrs.evolve(mine.owner, host="another-host"))
    assert elsewhere.owner.alive() is None and not elsewhere.stale(now)
    assert LockRecord.from_json(mine.to_json()) == mine
    assert LockRecord.from_json("not json") is None
    assert LockRecord.from_json(json.dumps({"owner": {}})) is None


def entry(role: str, state: str, owner: Owner | None = None) -> dict[str, object]:
    labels = {LABEL_ROLE: role}
    if owner is not None:
        labels[LABEL_ATTEMPT_OWNER] = json.dumps(owner.to_data())
    return {"Labels": labels, "State": state}


def test_what_a_dead_deployer_left_is_marked_and_live_work_is_not() -> None:
    dead, live = dead_owner(), Owner.this_process()
    made = [entry("pause", "running", dead), entry("run", "running", dead)]
    assert unfinished(made) is None
    assert str(unfinished([entry("pause", "running", dead)])).startswith("half-made: a pause")
    assert unfinished([entry("pause", "running", live)]) is None, "a create at work"
    orphans = unfinished([entry("run", "exited", dead)])
    assert str(orphans).startswith("half-made: containers of a create whose pause")
    assert "(unknown owner)" in str(unfinished([entry("pause", "running")]))
    assert str(unfinished([entry("pause", "paused"), entry("run", "exited")])).startswith(
        "half-drained"
    )
    assert unfinished([entry("pause", "paused"), entry("run", "running")]) is None


def test_a_replace_is_stopped_by_a_signal_before_its_drain_and_not_after() -> None:
    before = Interrupts("replace", "replace from p.yaml")

    async def waiting() -> None:
        os.kill(os.getpid(), signal.SIGTERM)
        await anyio.sleep(5)

    with pytest.raises(CommandFailed) as caught:
        anyio.run(before.guard, waiting)
    assert caught.value.exit_code == 143 and "the new instance was removed" in caught.value.message

    during = Interrupts("replace", "replace from p.yaml")

    async def draining() -> str:
        during.now_draining()
        os.kill(os.getpid(), signal.SIGINT)
        await anyio.sleep(0.3)
        return "replaced"

    assert anyio.run(during.guard, draining) == "replaced"


def test_a_claim_whose_owner_died_marks_the_workload_half_drained() -> None:
    from asyncdeploy.drivers.engine._claim import ClaimRecord
    from asyncdeploy.drivers.engine._unfinished import dead_claim

    alive = ClaimRecord(owner=Owner.this_process(), token="t", started=time.time(), grace=30)
    assert dead_claim(alive) is None and dead_claim(None) is None
    dead = attrs.evolve(alive, owner=dead_owner())
    assert str(dead_claim(dead)).startswith("half-drained: its drain's owner (pid")


def test_an_owner_in_another_pid_namespace_cannot_be_judged_from_here() -> None:
    """Issue 24 item 7: its pid names another process here (both may be pid 1)."""
    here = Owner.this_process()
    assert here.pid_namespace.startswith("pid:[")
    elsewhere = attrs.evolve(here, pid_namespace="pid:[1]", pid_started="1")
    assert elsewhere.alive() is None
    older = attrs.evolve(here, pid_namespace="", pid_started="1")  # a record without it
    assert older.alive() is False and Owner.from_data(older.to_data()) == older
    assert Owner.from_data(here.to_data()) == here
