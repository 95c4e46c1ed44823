"""The CLI's signal policy: its table, row by row (what each signal does in each phase of a
command, and how the command ends), then on real signals to this process (no engine)."""

from __future__ import annotations

import ast
import os
import signal
from pathlib import Path

import anyio
import pytest

import asyncdeploy.cli
from asyncdeploy.cli._common import CommandFailed
from asyncdeploy.cli._signals import Act, Happened, Interrupts, Phase

SIG, BEGAN, ENDED = Happened.SIGNAL, Happened.DRAIN_BEGAN, Happened.DRAIN_ENDED
MADE, SETTLED, CHANGED = Happened.MADE, Happened.SETTLED, Happened.CHANGED
N, CANCEL, KILL = Act.NOTHING, Act.CANCEL, Act.KILL


class Handle:
    """An operation's handle as the policy sees it: what it was told."""

    def __init__(self) -> None:
        self.told: list[str] = []
        self.killed = anyio.Event()
        self.scope: anyio.CancelScope | None = None

    def stop(self, *, kill: bool = False) -> None:
        if kill:
            self.told.append("kill")
            self.killed.set()
            return
        self.told.append("cancel")
        if self.scope is not None:
            self.scope.cancel()


# (mode, what happens, the acts of its signals, the phase it ends in, the ending or None)
ROWS = [
    ("drain", [SIG], [N], Phase.FINISHING, None),
    ("drain", [SIG, SIG], [N, KILL], Phase.KILLING, "cut short by SIGINT: the remaining"),
    ("drain", [SIG, SIG, SIG], [N, KILL, N], Phase.KILLING, "cut short by SIGINT"),
    ("drain", [SIG, SIG, SETTLED, SIG], [N, KILL, N], Phase.DONE, "cut short by SIGINT"),
    ("drain", [SETTLED, SIG], [N], Phase.DONE, None),
    ("replace", [SIG], [CANCEL], Phase.ROLLING_BACK, "the new instance was removed"),
    ("replace", [SIG, SIG], [CANCEL, KILL], Phase.ROLLING_BACK_KILLED, "new instance was"),
    ("replace", [SIG, BEGAN, SIG], [CANCEL, KILL], Phase.ROLLING_BACK_KILLED, "new instance"),
    ("replace", [BEGAN, SIG], [N], Phase.FINISHING, None),
    ("replace", [BEGAN, SIG, SIG], [N, KILL], Phase.KILLING, "cut short by SIGINT"),
    ("cancel", [SIG], [CANCEL], Phase.STOPPING, "everything it had created was removed"),
    ("cancel", [SIG, SIG], [CANCEL, N], Phase.STOPPING, "everything it had created"),
    ("cancel", [BEGAN, SIG], [CANCEL], Phase.STOPPING_AFTER_DRAIN, "was drained and removed"),
    ("cancel", [SIG, BEGAN, SIG], [CANCEL, KILL], Phase.REPLACED_KILLED, "were killed and"),
    ("cancel", [BEGAN, SIG, SIG], [CANCEL, KILL], Phase.REPLACED_KILLED, "nothing new was"),
    ("cancel", [BEGAN, SIG, ENDED, SIG], [CANCEL, N], Phase.DRAINED_THEN_STOPPED, "drained and"),
    ("cancel", [BEGAN, ENDED, SIG], [CANCEL], Phase.STOPPING, "everything it had created"),
    ("cancel", [MADE, SIG], [CANCEL], Phase.WAIT_STOPPED, "it was created and is left as it is"),
    ("cancel", [MADE, SETTLED, SIG], [N], Phase.DONE, None),
    # a create of a changed plan is a replace: its policy, from before anything is touched
    ("cancel", [CHANGED, SIG], [CANCEL], Phase.ROLLING_BACK, "the new instance was removed"),
    ("cancel", [CHANGED, SIG, SIG], [CANCEL, KILL], Phase.ROLLING_BACK_KILLED, "new instance"),
    ("cancel", [CHANGED, BEGAN, SIG], [N], Phase.FINISHING, None),
    ("cancel", [CHANGED, BEGAN, SIG, SIG], [N, KILL], Phase.KILLING, "cut short by SIGINT"),
    ("cancel", [CHANGED, BEGAN, BEGAN, ENDED, MADE, SIG], [N], Phase.FINISHING, None),
    ("cancel", [SIG, CHANGED], [CANCEL], Phase.STOPPING, "everything it had created"),
]


@pytest.mark.parametrize(("mode", "steps", "acts", "phase", "ending"), ROWS)
def test_the_policy_table(
    mode: str, steps: list[Happened], acts: list[Act], phase: Phase, ending: str | None
) -> None:
    interrupts = Interrupts(mode, "the command")  # type: ignore[arg-type]
    handle = Handle()
    interrupts.attach(handle)
    seen = []
    for step in steps:
        if step is SIG:
            seen.append(interrupts.signalled(signal.SIGINT))
        else:
            interrupts.happened(step)
    assert (seen, interrupts.phase) == (acts, phase)
    assert handle.told == [act.value for act in acts if act is not N]
    said = interrupts.ending()
    if ending is None:
        assert said is None
    else:
        assert said is not None and ending in said[0] and said[1] == 130


def test_a_kill_asked_before_the_operation_reaches_it_when_attached() -> None:
    """A second signal during the connect or the look: the handle, once there, is killed at
    once (so its drain runs at grace 0)."""
    interrupts = Interrupts("drain", "delete of 'w'")
    interrupts.signalled(signal.SIGINT)
    interrupts.signalled(signal.SIGINT)
    handle = Handle()
    interrupts.attach(handle)
    assert handle.told == ["kill"]


def run(interrupts: Interrupts, work: object) -> object:
    return anyio.run(interrupts.guard, work)


def test_a_drain_goes_on_after_one_signal_and_is_killed_after_two(
    capsys: pytest.CaptureFixture[str],
) -> None:
    interrupts = Interrupts("drain", "delete of 'w'")
    handle = Handle()
    interrupts.attach(handle)
    seen: list[bool] = []

    async def drain() -> None:
        os.kill(os.getpid(), signal.SIGTERM)
        await anyio.sleep(0.3)
        seen.append(handle.killed.is_set())  # one signal: the drain goes on
        os.kill(os.getpid(), signal.SIGINT)
        with anyio.fail_after(5):
            await handle.killed.wait()
        os.kill(os.getpid(), signal.SIGTERM)  # a third, during the cleanup
        await anyio.sleep(0.2)

    with pytest.raises(CommandFailed) as caught:
        run(interrupts, drain)
    assert seen == [False]
    assert caught.value.exit_code == 130  # 128 + the second signal, SIGINT
    assert "cut short by SIGINT" in caught.value.message
    err = capsys.readouterr().err
    assert "goes on until its deadline" in err and "Ctrl-C again" in err
    assert "still cleaning up" in err


def test_a_drain_with_one_signal_ends_as_it_would_have() -> None:
    interrupts = Interrupts("drain", "delete of 'w'")

    async def drain() -> str:
        os.kill(os.getpid(), signal.SIGINT)
        await anyio.sleep(0.2)
        return "drained"

    assert run(interrupts, drain) == "drained"


def test_a_create_is_cancelled_by_its_first_signal() -> None:
    interrupts = Interrupts("cancel", "create from p.yaml")
    cleaned: list[str] = []

    async def create() -> None:
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            await anyio.sleep(30)
        finally:
            with anyio.CancelScope(shield=True):
                os.kill(os.getpid(), signal.SIGINT)  # ignored while the roll-back runs
                await anyio.sleep(0.2)
                cleaned.append("rolled back")

    with pytest.raises(CommandFailed) as caught:
        run(interrupts, create)
    assert cleaned == ["rolled back"]
    assert caught.value.exit_code == 143
    assert "interrupted by SIGTERM" in caught.value.message


def test_a_signal_after_the_outcome_stood_changes_nothing() -> None:
    interrupts = Interrupts("cancel", "create from p.yaml")

    async def create() -> str:
        interrupts.settled()
        os.kill(os.getpid(), signal.SIGTERM)
        await anyio.sleep(0.2)
        return "created"

    assert run(interrupts, create) == "created"


def test_a_create_draining_what_it_replaces_follows_the_drains_rule(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """During the drain of the replaced workload the first signal cancels only the create
    (its handle: what prints goes on) and the second kills; the ending says so."""
    interrupts = Interrupts("cancel", "create from p.yaml")
    handle = Handle()
    interrupts.attach(handle)
    seen: list[str] = []

    async def create() -> None:
        with anyio.CancelScope() as scope:
            handle.scope = scope
            interrupts.drain_began()
            os.kill(os.getpid(), signal.SIGINT)
            await anyio.sleep(5)  # the create, cancelled by the signal
        if scope.cancelled_caught:
            seen.append("create cancelled")
        seen.append("printing goes on")  # the command's own scope was not cancelled
        os.kill(os.getpid(), signal.SIGINT)
        with anyio.fail_after(5):
            await handle.killed.wait()
        interrupts.drain_ended()

    with pytest.raises(CommandFailed) as caught:
        run(interrupts, create)
    assert seen == ["create cancelled", "printing goes on"]
    assert caught.value.exit_code == 130
    assert "remaining containers were killed and removed; nothing new was created" in (
        caught.value.message
    )
    err = capsys.readouterr().err
    assert "goes on until its deadline, then the create stops" in err
    assert "killing the replaced workload's remaining containers now" in err


def test_the_cli_reaches_an_operation_through_typed_handles_only() -> None:
    """No operation handle typed ``Any`` in the CLI, and no verb found by ``getattr``: what a
    signal or a printer may do to a handle is its protocol (``Stoppable``, ``DrainHandle``),
    held to the handles by mypy."""
    handles = {"drain", "handle", "operation", "creation", "replacement", "events"}
    cli = Path(asyncdeploy.cli.__file__).parent
    untyped, looked_up = [], []
    for path in sorted(cli.glob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.arg)
                and node.arg in handles
                and (node.annotation is None or "Any" in ast.unparse(node.annotation))
            ):
                untyped.append(f"{path.name}:{node.lineno} {node.arg}")
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "getattr"
                and path.name == "_signals.py"
            ):
                looked_up.append(f"{path.name}:{node.lineno}")
    assert (untyped, looked_up) == ([], [])
