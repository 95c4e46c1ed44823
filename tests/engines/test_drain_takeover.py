"""A delete that takes over from a deleter SIGKILLed at any step drains, never kills (issue 32
item 1), on both engines, through a delete and through ``reconcile``.

Every state a killed deleter can leave: before its claim; claimed with no hook started; its
hook still running inside the container (the exec outlives the deleter); a hook finished with
no stop signal sent; the stop signal sent, with or without the claim record written after it;
and an owner its parent has not reaped yet (a zombie: a job of a shell, a supervisor). Each
workload reuses the name of one deleted minutes before, as a user re-running the same steps
does: the engine's events of that earlier workload (its SIGTERM, same workload and container
names) were read as this one's, and the takeover, believing the server signalled, sent neither
hook nor signal and SIGKILLed it at the deadline (what was reported on Docker).
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream

from asyncdeploy import Deployer, WorkloadNotFound
from tests.cli_runner import invoke_in_thread
from tests.engines.helpers import graceful, plan, read_markers, started
from tests.polling import until

pytestmark = pytest.mark.anyio

SELECTOR = "asyncdeploy-test-takeover"
# The hook runs long enough to be caught running; the app drains a little after TERM.
HOOK = [
    "sh",
    "-c",
    "echo app hook-start >> /out/markers; sleep 2; echo app hook-end >> /out/markers",
]
# Where the deleter is killed: its held points (tests/engines/deleter_process.py), "hook" (its
# hook runs in the container), "zombie" (SIGKILLed at "recorded", and not reaped meanwhile).
POINTS = ("claim", "claimed", "hook", "hooked", "signalled", "recorded", "zombie")
SIGNALLED = ("signalled", "recorded", "zombie")  # the points past the dead deleter's signal


async def _start_deleter(driver: str, workload: str, point: str) -> Process:
    held = {"hook": "", "zombie": "recorded"}.get(point, point)
    command = [sys.executable, "-m", "tests.engines.deleter_process", driver]
    command += [f"{SELECTOR}={workload}", *([held] if held else [])]
    if point == "zombie":
        # A background job of a shell that never waits for it (job control on: the job keeps
        # its stdin); killed, it stays a zombie until the shell ends. (asyncio reaps its own
        # children at once: run directly, a killed deleter would never be one.)
        command = ["bash", "-c", 'set -m; "$@" & exec sleep 3600', "bash", *command]
    return await anyio.open_process(command, cwd=Path.cwd(), start_new_session=True)


async def _line(
    output: BufferedByteReceiveStream, wanted: str, process: Process, timeout: float = 60
) -> None:
    with anyio.fail_after(timeout):
        try:
            while (await output.receive_until(b"\n", 1 << 20)).decode() != wanted:
                pass
        except (anyio.IncompleteRead, anyio.EndOfStream):
            # the deleter ended before it got there: say how, and what it wrote
            assert process.stderr is not None
            said = b""
            with anyio.move_on_after(5):  # (a zombie's shell holds it open)
                async for chunk in process.stderr:
                    said += chunk
            raise AssertionError(
                f"the deleter ended (exit {process.returncode}) before {wanted!r}:\n"
                + said.decode(errors="replace")
            ) from None


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]


def _child(pid: int) -> int:
    """The one child of process ``pid`` (the shell's job)."""
    [child] = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return int(child)


async def _kill_at(deployer: Deployer, workload: str, point: str, markers: Path) -> Process:
    """A deleter of ``workload`` SIGKILLed at ``point``; returned unreaped (the caller waits)."""
    process = await _start_deleter(deployer.driver_name, workload, point)
    assert process.stdout is not None and process.stdin is not None
    output = BufferedByteReceiveStream(process.stdout)
    await _line(output, "ready", process)
    await process.stdin.send(b"go\n")
    if point == "hook":
        await until(lambda: ("app", "hook-start") in read_markers(markers), timeout=30)
    else:
        await _line(output, f"at {'recorded' if point == 'zombie' else point}", process)
    if point != "zombie":
        process.send_signal(signal.SIGKILL)
        return process
    deleter = _child(process.pid)
    os.kill(deleter, signal.SIGKILL)
    await until(lambda: _state(deleter) == "Z", timeout=10, interval=0.05)
    return process


async def _reused_name(deployer: Deployer, workload: str, markers: Path) -> None:
    """``workload`` made, drained (its app gets SIGTERM: an event the engine keeps) and made
    again, its app started: what a user re-running the same steps has."""
    made = plan(
        workload,
        [graceful("app", 1, markers, pre_stop=HOOK)],
        {SELECTOR: workload},
        termination_grace_period_seconds=30,
    )
    await deployer.create(made)
    await started(markers, "app")
    first = await deployer.delete(workload)
    assert [(c.outcome, c.exit_code) for c in first.containers] == [("exited", 0)], first
    (markers / "markers").write_text("")  # the second workload's marks only
    await deployer.create(made)
    await deployer.wait_ready(workload, timeout=30)
    await started(markers, "app")


async def _reconcile(driver: str, workload: str) -> list[dict[str, Any]]:
    result = await invoke_in_thread(
        "--driver", driver, "reconcile", "-l", f"{SELECTOR}={workload}", "-o", "json"
    )
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    return [line for line in lines if "event" in line]  # (the first line: what it finishes)


async def _half_drained(driver: str, workload: str) -> bool:
    result = await invoke_in_thread(
        "--driver", driver, "list", "-l", f"{SELECTOR}={workload}", "-o", "json"
    )
    assert result.exit_code == 0, result.output
    [shown] = json.loads(result.stdout)
    return str(shown.get("unfinished") or "").startswith("half-drained")


@pytest.mark.parametrize("then", ["delete", "reconcile"])
@pytest.mark.parametrize("point", POINTS)
async def test_a_deleter_killed_at_any_step_is_taken_over_with_a_drain(
    deployer: Deployer, name: Callable[[str], str], markers: Path, point: str, then: str
) -> None:
    """The next delete (or ``reconcile``) drains what the killed deleter left: the app's hook
    has ended before its one SIGTERM, the app exits 0 after its own drain, nothing is
    SIGKILLed, and the workload is gone."""
    workload, driver = name(f"take-{point[:5]}"), deployer.driver_name
    await _reused_name(deployer, workload, markers)
    killed = await _kill_at(deployer, workload, point, markers)
    try:
        if point != "zombie":
            await killed.wait()  # reaped (a zombie owner stays unreaped until the end)
        if then == "delete":
            summary = await deployer.delete(workload)
            ended = [(c.outcome, c.exit_code) for c in summary.containers]
        elif point == "claim":  # killed before its claim, it left nothing unfinished: it serves
            assert await _reconcile(driver, workload) == []
            summary = await deployer.delete(workload)
            ended = [(c.outcome, c.exit_code) for c in summary.containers]
        else:
            await until(lambda: _half_drained(driver, workload), timeout=30, interval=0.5)
            events = await _reconcile(driver, workload)
            assert not any(e["event"] == "ContainerForceKilled" for e in events), events
            [finished] = [e for e in events if e["event"] == "DrainFinished"]
            ended = [(c["outcome"], c["exit_code"]) for c in finished["containers"]]
        # Signalled by the dead deleter, the app may have ended its own drain before this
        # one began (the list and the reconcile take seconds): exited 0 all the same.
        done = {("exited", 0), ("already-exited", 0)} if point in SIGNALLED else {("exited", 0)}
        assert len(ended) == 1 and ended[0] in done, ended
        if point == "zombie":  # it was one all along: its shell never waited for it
            assert _state(_child(killed.pid)) == "Z"
    finally:
        with anyio.CancelScope(shield=True):
            if point == "zombie":
                killed.kill()  # the shell (now sleep): its zombie goes to init, reaped
            await killed.wait()
            await killed.aclose()
    marks = read_markers(markers)
    counts = Counter(marks)
    assert counts[("app", "got-TERM")] == 1 and counts[("app", "drained-ok")] == 1, marks
    # a hook ran to its end before the signal (a deleter killed after the signal had run it)
    assert marks.index(("app", "hook-end")) < marks.index(("app", "got-TERM")), marks
    with pytest.raises(WorkloadNotFound):
        await deployer.get(workload)
