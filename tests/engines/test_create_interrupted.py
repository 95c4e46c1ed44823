"""A create that is cancelled, signalled, fails to start, or races another command (issue 8
items 5, 7 and the start failure of item 9): it leaves nothing of its own behind, says why in
one line, and never replaces a workload another create is still building."""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml

from asyncdeploy import Container, CreateError, Deployer, WorkloadConflict, WorkloadNotFound
from tests.engines.cli_process import start_cli
from tests.engines.conftest import BUSYBOX
from tests.engines.helpers import plan
from tests.engines.helpers import plan_file as written_plan
from tests.polling import until

pytestmark = pytest.mark.anyio

RUNS = ("a", "b", "c", "d", "e")


def plan_file(tmp_path: Path, workload: str, *, init_sleep: int = 0, **extra: Any) -> Path:
    """A plan with an init container sleeping ``init_sleep`` s and five run containers."""
    containers: list[dict[str, Any]] = [
        {"name": n, "image": BUSYBOX, "command": ["graceful", n, "0"], "env": {"MARKER_FILE": "/m"}}
        for n in RUNS
    ]
    if init_sleep:
        containers.insert(
            0,
            {
                "name": "setup",
                "role": "init",
                "image": BUSYBOX,
                "command": ["sleep", str(init_sleep)],
            },
        )
    extra.setdefault("termination_grace_period_seconds", 1)
    return written_plan(tmp_path, workload, containers, **extra)


async def assert_gone(deployer: Deployer, name: str) -> None:
    with pytest.raises(WorkloadNotFound):
        await deployer.get(name)


async def has_container(deployer: Deployer, workload: str, container: str) -> bool:
    try:
        status = await deployer.get(workload)
    except WorkloadNotFound:
        return False
    return container in {c.name for c in status.containers}


async def test_a_cancelled_create_leaves_nothing(
    deployer: Deployer, name: Callable[[str], str], tmp_path: Path
) -> None:
    """Cancelled at many points, create calls in flight included: nothing stays behind."""
    cancelled = 0
    for delay in (0.0, 0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.45, 0.7, 1.0):
        workload = name("cancel")
        containers = [Container(name=n, image=BUSYBOX, command=["sleep", "60"]) for n in RUNS]
        with anyio.move_on_after(delay) as scope:
            await deployer.create(plan(workload, containers, termination_grace_period_seconds=0))
        if scope.cancelled_caught:
            cancelled += 1
            await assert_gone(deployer, workload)
        else:
            await deployer.delete(workload, grace_period_seconds=0)
    assert cancelled >= 5


@pytest.mark.parametrize(
    ("signum", "point"),
    [(signal.SIGTERM, "pause"), (signal.SIGINT, "setup"), (signal.SIGTERM, "a")],
)
async def test_a_signal_during_create_removes_everything(
    deployer: Deployer,
    name: Callable[[str], str],
    tmp_path: Path,
    signum: signal.Signals,
    point: str,
) -> None:
    workload = name("sigcreate")
    path = plan_file(tmp_path, workload, init_sleep=2)
    cli = await start_cli(deployer.driver_name, "create", "-f", str(path))
    await until(lambda: has_container(deployer, workload, point), timeout=30, interval=0.02)
    cli.send(signum)
    code, stderr = await cli.finish()

    assert code == 128 + signum, stderr
    assert f"interrupted by {signum.name}: everything it had created was removed" in stderr
    assert "Traceback" not in stderr
    await assert_gone(deployer, workload)


async def test_a_command_that_does_not_exist_is_a_create_error(
    deployer: Deployer, name: Callable[[str], str], tmp_path: Path
) -> None:
    workload = name("nocmd")
    path = plan_file(tmp_path, workload)
    doc = yaml.safe_load(path.read_text())
    doc["containers"][2]["command"] = ["/no/such/command"]
    path.write_text(yaml.safe_dump(doc))
    cli = await start_cli(deployer.driver_name, "create", "-f", str(path))
    code, stderr = await cli.finish()

    assert code == 1, stderr
    assert "Traceback" not in stderr and "ExceptionGroup" not in stderr
    assert stderr.startswith("Error: container c of ")
    assert "did not start" in stderr
    await assert_gone(deployer, workload)

    with pytest.raises(CreateError, match=r"container c of .* did not start"):
        await deployer.create(
            plan(
                workload,
                [Container(name="c", image=BUSYBOX, command=["/no/such/command"])],
            )
        )
    await assert_gone(deployer, workload)


async def test_two_creates_of_one_plan_at_once(
    deployer: Deployer, name: Callable[[str], str]
) -> None:
    """One creates; the other converges ("unchanged") or gets a WorkloadConflict. Never
    "replaced", never a half-built workload: the second starts together with the first, once
    the first's pause exists, and while the first's init container runs."""
    for second_after in (None, "pause", "setup"):
        workload = name("twice")
        containers = [Container(name="setup", role="init", image=BUSYBOX, command=["sleep", "1"])]
        containers += [Container(name=n, image=BUSYBOX, command=["sleep", "60"]) for n in RUNS]
        the_plan = plan(workload, containers, termination_grace_period_seconds=0)
        results: list[str] = []

        async def create() -> None:
            try:
                results.append((await deployer.create(the_plan)).action)  # noqa: B023
            except WorkloadConflict as exc:
                results.append(f"conflict: {exc}")  # noqa: B023

        async with anyio.create_task_group() as tg:
            tg.start_soon(create)
            if second_after is not None:
                await until(
                    lambda: has_container(deployer, workload, second_after),  # noqa: B023
                    timeout=30,
                    interval=0.02,
                )
            tg.start_soon(create)
        outcome = sorted(r.partition(":")[0] for r in results)
        assert outcome in (["conflict", "created"], ["created", "unchanged"]), results
        assert all(workload in r for r in results if r.startswith("conflict")), results
        status = await deployer.get(workload)
        assert sorted(c.name for c in status.containers) == sorted(["pause", "setup", *RUNS])
        assert {c.state for c in status.containers if c.role == "run"} == {"running"}
        await deployer.delete(workload, grace_period_seconds=0)


async def test_two_cli_creates_at_once(
    deployer: Deployer, name: Callable[[str], str], tmp_path: Path
) -> None:
    workload = name("twicecli")
    path = plan_file(tmp_path, workload, init_sleep=1)
    first = await start_cli(deployer.driver_name, "create", "-f", str(path), "-o", "json")
    await until(lambda: has_container(deployer, workload, "pause"), timeout=30, interval=0.02)
    second = await start_cli(deployer.driver_name, "create", "-f", str(path), "-o", "json")
    (code1, err1), (code2, err2) = await first.finish(), await second.finish()

    assert sorted([code1, code2]) in ([0, 0], [0, 1]), (err1, err2)
    assert "Traceback" not in err1 + err2
    lines = first.lines + second.lines
    actions = sorted(line["action"] for line in lines if "action" in line)
    assert actions in (["created"], ["created", "unchanged"]), actions
    loser = err1 if code1 else err2 if code2 else ""
    assert not loser or (loser.startswith("Error:") and workload in loser)
    errors = [line["error"] for line in lines if "error" in line]  # -o json: an error object
    assert len(errors) == (1 if loser else 0) and all(e["exit_code"] == 1 for e in errors)
    assert [line for line in lines if "action" not in line and "error" not in line] == []
    status = await deployer.get(workload)
    assert sorted(c.name for c in status.containers) == sorted(["pause", "setup", *RUNS])
    assert {c.state for c in status.containers if c.role == "run"} == {"running"}


async def test_delete_racing_a_create(
    deployer: Deployer, name: Callable[[str], str], tmp_path: Path
) -> None:
    """A delete while the create waits for its init container: the delete drains what exists,
    the create fails with a one-line error and removes what it made; nothing stays."""
    workload = name("race")
    path = plan_file(tmp_path, workload, init_sleep=5)
    create = await start_cli(deployer.driver_name, "create", "-f", str(path))
    await until(lambda: has_container(deployer, workload, "setup"), timeout=30, interval=0.02)
    delete = await start_cli(deployer.driver_name, "delete", workload, "-o", "json")
    (create_code, create_err), (delete_code, delete_err) = (
        await create.finish(),
        await delete.finish(),
    )

    assert delete_code == 0, delete_err
    assert delete.lines[-1]["event"] == "DrainFinished"
    assert create_code == 1, create_err
    assert create_err.startswith("Error:") and "Traceback" not in create_err
    await assert_gone(deployer, workload)


async def test_delete_racing_the_start_of_a_create(
    deployer: Deployer, name: Callable[[str], str], tmp_path: Path
) -> None:
    """A delete as soon as the pause container exists, while the run containers are created
    and started: either command may win, neither prints a traceback, and nothing stays."""
    workload = name("racestart")
    path = plan_file(tmp_path, workload)
    create = await start_cli(deployer.driver_name, "create", "-f", str(path))
    await until(lambda: has_container(deployer, workload, "pause"), timeout=30, interval=0.005)
    delete = await start_cli(
        deployer.driver_name, "delete", workload, "-o", "json", "--grace-period-seconds", "0"
    )
    (create_code, create_err), (delete_code, delete_err) = (
        await create.finish(),
        await delete.finish(),
    )

    assert "Traceback" not in create_err + delete_err
    assert delete_code == 0, delete_err
    assert create_code in (0, 1), create_err
    assert create_code == 0 or create_err.startswith("Error:")
    await assert_gone(deployer, workload)
