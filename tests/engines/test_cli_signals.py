"""Real signals to a real CLI process during ``delete`` (issue 8 item 4).

The docker-compose convention: the first SIGINT/SIGTERM lets the drain run to its deadline, a
second one kills the survivors at once; the cleanup always completes and the JSON stream always
ends with ``DrainFinished``.
"""

from __future__ import annotations

import json
import shlex
import signal
import sys
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream

from asyncdeploy import Deployer, WorkloadNotFound
from tests.engines.cli_process import start_cli
from tests.engines.conftest import RUN_ID, RUN_LABEL
from tests.engines.helpers import graceful, plan, read_markers

pytestmark = pytest.mark.anyio

EXIT_SIGINT, EXIT_SIGTERM = 130, 143


async def assert_gone(deployer: Deployer, name: str) -> None:
    """Nothing carries the workload's label any more: no container, the pause included."""
    with pytest.raises(WorkloadNotFound):
        await deployer.get(name)


def outcomes(finished: dict[str, object]) -> dict[str, dict[str, object]]:
    return {c["name"]: c for c in finished["containers"]}  # type: ignore[attr-defined]


async def test_one_sigterm_lets_the_drain_run_to_its_deadline(
    deployer: Deployer, name: Callable[[str], str], markers: Path
) -> None:
    workload = name("sigterm")
    await deployer.create(
        plan(
            workload,
            [graceful("drainer", 3, markers), graceful("ignorer", 0, markers, ignore=True)],
            termination_grace_period_seconds=6,
        )
    )
    await deployer.wait_ready(workload, timeout=30)
    cli = await start_cli(deployer.driver_name, "delete", workload, "-o", "json")
    await cli.next_event("SignalSent")
    await anyio.sleep(1)
    cli.send(signal.SIGTERM)
    code, stderr = await cli.finish()

    assert code == 0, stderr  # one signal does not change how the drain ends
    assert "goes on until its deadline" in stderr and "Ctrl-C again" in stderr
    assert "Traceback" not in stderr
    last = cli.lines[-1]
    assert last["event"] == "DrainFinished"
    by_name = outcomes(last)
    assert by_name["drainer"]["outcome"] == "exited" and by_name["drainer"]["exit_code"] == 0
    assert by_name["ignorer"]["outcome"] == "killed"
    assert by_name["ignorer"]["seconds"] >= 5.5  # type: ignore[operator]  # at the deadline, not at the signal
    assert ("drainer", "drained-ok") in read_markers(markers)
    assert any(line["event"] == "PauseRemoved" for line in cli.lines)
    await assert_gone(deployer, workload)


async def test_two_sigints_kill_the_survivors_at_once_and_clean_up(
    deployer: Deployer, name: Callable[[str], str], markers: Path
) -> None:
    workload = name("sigint2")
    await deployer.create(
        plan(
            workload,
            [graceful("drainer", 25, markers), graceful("ignorer", 0, markers, ignore=True)],
            termination_grace_period_seconds=30,
        )
    )
    await deployer.wait_ready(workload, timeout=30)
    cli = await start_cli(deployer.driver_name, "delete", workload, "-o", "json")
    await cli.next_event("SignalSent")
    await anyio.sleep(0.5)
    cli.send(signal.SIGINT)
    await cli.said(b"again")  # the first was taken ("press Ctrl-C again to kill ...")
    cli.send(signal.SIGINT)
    code, stderr = await cli.finish()

    # killed at once, not at the 30 s deadline: the drain says why it killed
    kills = [line for line in cli.lines if line.get("event") == "ContainerForceKilled"]
    assert kills and {k["reason"] for k in kills} == {"cancelled"}, kills
    assert ("drainer", "drained-ok") not in read_markers(markers)
    assert code == EXIT_SIGINT, stderr
    assert "killing the remaining containers now" in stderr
    assert "cut short by SIGINT" in stderr
    assert "Traceback" not in stderr
    last = cli.lines[-1]
    assert last["event"] == "DrainFinished"
    assert {c["outcome"] for c in outcomes(last).values()} == {"killed"}
    assert any(line["event"] == "PauseRemoved" for line in cli.lines)
    await assert_gone(deployer, workload)


async def test_one_sigint_does_not_kill_a_draining_container(
    deployer: Deployer, name: Callable[[str], str], markers: Path
) -> None:
    workload = name("sigint1")
    await deployer.create(
        plan(workload, [graceful("drainer", 4, markers)], termination_grace_period_seconds=30)
    )
    await deployer.wait_ready(workload, timeout=30)
    cli = await start_cli(deployer.driver_name, "delete", workload, "-o", "json")
    await cli.next_event("SignalSent")
    await anyio.sleep(2)
    cli.send(signal.SIGINT)
    code, stderr = await cli.finish()

    assert code == 0, stderr
    assert "goes on until its deadline" in stderr
    assert not any(line["event"] == "ContainerForceKilled" for line in cli.lines)
    last = cli.lines[-1]
    assert last["event"] == "DrainFinished"
    drainer = outcomes(last)["drainer"]
    assert drainer["outcome"] == "exited" and drainer["exit_code"] == 0
    assert drainer["seconds"] >= 3.5  # type: ignore[operator]  # its whole 4 s drain
    assert ("drainer", "drained-ok") in read_markers(markers)
    await assert_gone(deployer, workload)


async def test_text_output_survives_a_second_signal(
    deployer: Deployer, name: Callable[[str], str], markers: Path
) -> None:
    """The same with the human output: the summary table is printed after the kill."""
    workload = name("sigtext")
    await deployer.create(
        plan(
            workload,
            [graceful("ignorer", 0, markers, ignore=True)],
            termination_grace_period_seconds=30,
        )
    )
    await deployer.wait_ready(workload, timeout=30)
    cli = await start_cli(deployer.driver_name, "delete", workload)
    assert cli.process.stdout is not None and cli.process.stderr is not None
    errors = BufferedByteReceiveStream(cli.process.stderr)
    with anyio.fail_after(30):  # the text renderer's line for the stop signal
        head = await errors.receive_until(b"SIGTERM sent", 1 << 20)
    cli.send(signal.SIGTERM)
    await anyio.sleep(0.1)
    cli.send(signal.SIGTERM)
    await anyio.sleep(0.05)
    cli.send(signal.SIGINT)  # a third: ignored while the cleanup runs
    with anyio.fail_after(60):
        stdout = b"".join([c async for c in cli.process.stdout]).decode()
        rest = b"".join([c async for c in errors])  # receive() hands the buffer over first
        stderr = (head + rest).decode()
        code = await cli.process.wait()
    assert code == EXIT_SIGTERM, stderr
    assert "still cleaning up" in stderr
    assert "Traceback" not in stderr
    assert "ignorer" in stdout and "killed" in stdout
    await assert_gone(deployer, workload)


async def test_delete_all_under_two_signals_finishes_every_workload(
    deployer: Deployer, name: Callable[[str], str], markers: Path
) -> None:
    workloads = [name("sigall"), name("sigall")]
    for workload in workloads:
        await deployer.create(
            plan(
                workload,
                [graceful("drainer", 25, markers)],
                extra_labels={"sig": "all"},
                termination_grace_period_seconds=30,
            )
        )
    cli = await start_cli(
        deployer.driver_name,
        "delete-all",
        "--selector",
        f"{RUN_LABEL}={RUN_ID},sig=all",
        "-o",
        "json",
    )
    await cli.next_event("SignalSent")
    await cli.next_event("SignalSent")
    cli.send(signal.SIGTERM)
    await cli.said(b"again")  # the first was taken
    cli.send(signal.SIGTERM)
    code, stderr = await cli.finish()

    assert code == EXIT_SIGTERM, stderr
    finished = [line for line in cli.lines if line["event"] == "DrainFinished"]
    assert sorted(f["workload"] for f in finished) == sorted(workloads)
    assert cli.lines[-1]["event"] == "DrainFinished"
    for workload in workloads:
        await assert_gone(deployer, workload)


async def test_a_closed_output_pipe_never_turns_the_drain_into_a_kill(
    deployer: Deployer, name: Callable[[str], str], markers: Path
) -> None:
    """``delete -o json | head -1`` (issue 16 item 1(c)): the reader goes after the first line;
    the drain goes on to its end, the output is dropped with one note on stderr, and the exit
    code is the drain's (0: it drained)."""
    workload = name("pipe")
    await deployer.create(
        plan(workload, [graceful("drainer", 3, markers)], termination_grace_period_seconds=15)
    )
    await deployer.wait_ready(workload, timeout=30)
    cli = [sys.executable, "-m", "asyncdeploy", "--driver", deployer.driver_name]
    command = shlex.join([*cli, "delete", workload, "-o", "json"])
    started = anyio.current_time()
    with anyio.fail_after(60):
        done = await anyio.run_process(
            ["bash", "-c", f'{command} | head -1; echo "exit=${{PIPESTATUS[0]}}" >&2'],
            check=False,
        )
    stdout, stderr = done.stdout.decode(), done.stderr.decode()

    assert json.loads(stdout)["event"] == "DrainStarted"  # the one line head printed
    assert "exit=0" in stderr, stderr
    assert "stdout was closed" in stderr
    assert "Traceback" not in stderr and "BrokenPipe" not in stderr
    assert anyio.current_time() - started >= 2.5  # the app's whole 3 s drain
    assert ("drainer", "drained-ok") in read_markers(markers)
    await assert_gone(deployer, workload)
