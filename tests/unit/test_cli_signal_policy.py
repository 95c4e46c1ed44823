"""The CLI's signal policy on its own (real signals to this process, no engine): a drain's
first signal changes nothing, its second sets kill_now; a create's first signal cancels it;
a signal after the outcome stood changes nothing."""

from __future__ import annotations

import os
import signal

import anyio
import pytest

from asyncdeploy.cli._common import CommandFailed
from asyncdeploy.cli._signals import Interrupts


def run(interrupts: Interrupts, work: object) -> object:
    return anyio.run(interrupts.guard, work)


def test_a_drain_goes_on_after_one_signal_and_is_killed_after_two(
    capsys: pytest.CaptureFixture[str],
) -> None:
    interrupts = Interrupts("drain", "delete of 'w'")
    seen: list[bool] = []

    async def drain() -> None:
        os.kill(os.getpid(), signal.SIGTERM)
        await anyio.sleep(0.3)
        seen.append(interrupts.kill_now.is_set())  # one signal: the drain goes on
        os.kill(os.getpid(), signal.SIGINT)
        with anyio.fail_after(5):
            await interrupts.kill_now.wait()
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
        interrupts.settled = True
        os.kill(os.getpid(), signal.SIGTERM)
        await anyio.sleep(0.2)
        return "created"

    assert run(interrupts, create) == "created"


def test_a_create_draining_what_it_replaces_follows_the_drains_rule(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """During the drain of the replaced workload the first signal cancels only the create's
    own scope (what prints goes on) and the second sets kill_now; the ending says so."""
    interrupts = Interrupts("cancel", "create from p.yaml")
    seen: list[str] = []

    async def create() -> None:
        with interrupts.cancelling() as scope:
            interrupts.drain_began()
            os.kill(os.getpid(), signal.SIGINT)
            await anyio.sleep(5)  # the create, cancelled by the signal
        if scope.cancelled_caught:
            seen.append("create cancelled")
        seen.append("printing goes on")  # the command's own scope was not cancelled
        os.kill(os.getpid(), signal.SIGINT)
        with anyio.fail_after(5):
            await interrupts.kill_now.wait()
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
