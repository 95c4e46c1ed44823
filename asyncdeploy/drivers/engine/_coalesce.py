"""One engine call for many concurrent callers that ask the same kind of question.

Forty concurrent deletes through one deployer used to list the engine's containers forty
times (on Podman, whose API serves a few requests at a time, those lists held back the first
drains' signals). :class:`Rounds` answers every caller that asks while a call is in flight with
the next call, which starts after they asked (an answer never predates its question: a
workload created just before its delete is always found) and carries all their keys at once.
A caller alone gets a call of its own at once.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

import anyio
import attrs

__all__ = ["Rounds"]

K = TypeVar("K")
V = TypeVar("V")


@attrs.define(eq=False)
class _Round(Generic[K, V]):
    keys: set[K] = attrs.field(factory=set)
    started: bool = False
    done: anyio.Event = attrs.field(factory=anyio.Event)
    answered: bool = False
    value: V | None = None
    error: Exception | None = None

    def result(self) -> V:
        if self.error is not None:
            raise self.error
        return self.value  # type: ignore[return-value]


class Rounds(Generic[K, V]):
    """``await rounds.ask(key)``: the answer of ``call(keys)`` for a round holding ``key``."""

    def __init__(self, call: Callable[[frozenset[K]], Awaitable[V]]) -> None:
        self._call = call
        self._running: _Round[K, V] | None = None
        self._next: _Round[K, V] | None = None
        self.calls = 0  # how many calls were made (the benchmark counts them)

    async def ask(self, key: K) -> V:
        while True:
            running = self._running
            if running is None:  # lead a round: the one queued, or one of its own
                this = self._next or _Round()
                self._next = None
                this.keys.add(key)
                this.started, self._running = True, this
                self.calls += 1
                try:
                    this.value = await self._call(frozenset(this.keys))
                    this.answered = True
                except Exception as exc:  # noqa: BLE001 - raised to every caller of the round
                    this.error, this.answered = exc, True
                finally:
                    self._running = None
                    this.done.set()
                return this.result()
            if self._next is None:
                self._next = _Round()
            this = self._next
            this.keys.add(key)
            await running.done.wait()
            if not this.started:
                continue  # nobody leads the next round yet: this caller does
            await this.done.wait()
            if this.answered:
                return this.result()
            # its leader was cancelled before an answer: ask again
