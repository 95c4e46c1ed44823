"""Concurrent looks share engine calls (``_coalesce.Rounds``), and never get a stale answer."""

from __future__ import annotations

import anyio
import pytest

from asyncdeploy.drivers.engine._coalesce import Rounds
from tests.polling import until

pytestmark = pytest.mark.anyio


class Engine:
    """A list call that takes 0.1 s and answers with what the engine holds when it begins."""

    def __init__(self) -> None:
        self.calls: list[frozenset[str]] = []
        self.holds: set[str] = set()

    async def list(self, keys: frozenset[str]) -> frozenset[str]:
        self.calls.append(keys)
        seen = frozenset(self.holds)
        await anyio.sleep(0.1)
        return seen


async def test_forty_concurrent_looks_cost_two_calls() -> None:
    engine = Engine()
    rounds = Rounds(engine.list)
    async with anyio.create_task_group() as tg:
        for i in range(40):
            tg.start_soon(rounds.ask, f"w{i}")
    assert [len(keys) for keys in engine.calls] == [1, 39]  # the first alone, then the rest
    assert rounds.calls == 2


async def test_an_answer_never_predates_its_question() -> None:
    """A workload made while a call is in flight is found by a look asked after it was made:
    that look waits for the next call instead of taking the one in flight."""
    engine = Engine()
    rounds = Rounds(engine.list)
    answers: dict[str, frozenset[str]] = {}

    async def ask(key: str) -> None:
        answers[key] = await rounds.ask(key)

    async with anyio.create_task_group() as tg:
        tg.start_soon(ask, "early")
        await anyio.sleep(0.05)
        engine.holds.add("made")
        tg.start_soon(ask, "late")
    assert "made" not in answers["early"] and "made" in answers["late"]


async def test_an_error_reaches_every_caller_of_its_round_and_a_cancelled_leader_hands_on() -> None:
    engine = Engine()

    async def failing(keys: frozenset[str]) -> frozenset[str]:
        await engine.list(keys)
        raise LookupError("refused")

    rounds = Rounds(failing)
    errors: list[BaseException] = []

    async def ask(key: str) -> None:
        try:
            await rounds.ask(key)
        except LookupError as exc:
            errors.append(exc)

    async with anyio.create_task_group() as tg:
        for key in ("a", "b", "c"):
            tg.start_soon(ask, key)
    assert len(errors) == 3


async def test_a_round_whose_leader_is_cancelled_is_asked_again_by_its_others() -> None:
    """The caller that runs a round is cancelled mid-call: the others of its round are not left
    without an answer; one of them asks again."""
    calls: list[frozenset[str]] = []
    gates: list[anyio.Event] = []

    async def held(keys: frozenset[str]) -> frozenset[str]:
        calls.append(keys)
        gates.append(anyio.Event())
        await gates[-1].wait()
        return keys

    rounds = Rounds(held)
    got: dict[str, frozenset[str]] = {}
    leader = anyio.CancelScope()

    async def ask(key: str) -> None:
        got[key] = await rounds.ask(key)

    async def cancelled_leader() -> None:
        with leader:
            await rounds.ask("leader")

    async def until_calls(n: int) -> None:
        await until(lambda: len(calls) >= n, timeout=5, interval=0.001)

    async with anyio.create_task_group() as tg:
        tg.start_soon(ask, "first")
        await until_calls(1)
        tg.start_soon(cancelled_leader)  # first in the queue for round 2: it will lead it
        await anyio.sleep(0.01)
        tg.start_soon(ask, "other")
        await anyio.sleep(0.01)
        gates[0].set()
        await until_calls(2)
        assert calls[1] == {"leader", "other"}
        leader.cancel()
        await until_calls(3)
        gates[2].set()
    assert set(got) == {"first", "other"} and calls[2] == {"other"}
