"""The one shape of every event stream the deployer yields: a channel under a task group (a
drain's, run by its handle: ``_operations.Drain``).

The work runs in a task group of its own and emits without ever waiting; the consumer reads a
memory-object stream; the group's lone error is unwrapped (trio's ``as_safe_channel`` shape).
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import TypeVar

import anyio
from anyio.abc import ObjectReceiveStream

from asyncdeploy._errors import WorkloadNotFound
from asyncdeploy._events import DrainEvent
from asyncdeploy._groups import lone_error
from asyncdeploy._log import log_event
from asyncdeploy.drivers.base import Looks

__all__ = [
    "event_stream",
    "workload_exists",
]

E = TypeVar("E")  # what the work emits (drain events are logged on the way)


@asynccontextmanager
async def event_stream(
    work: Callable[[Callable[[E], None]], Awaitable[None]], *, finish_on_error: bool
) -> AsyncIterator[ObjectReceiveStream[E]]:
    """Run ``work`` in a task group of its own; what it emits reaches the consumer through a
    stream fed with ``send_nowait``, unbounded so that a slow consumer never delays the work
    (the backlog is bounded by the work itself: a handful of events per container, at most
    five progress events a second per image pulled).

    When the consumer's block raises, ``finish_on_error`` lets the work run to its end
    without it (its events dropped) before the exception propagates: a drain is never cut
    short by its consumer. Otherwise, as for a cancellation, the work is cancelled."""
    send, receive = anyio.create_memory_object_stream[E](math.inf)

    def emit(event: E) -> None:
        if isinstance(event, DrainEvent):
            log_event(event)  # every drain step, through the one place events pass
        try:
            send.send_nowait(event)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass  # the consumer left; the work goes on without it

    async def run() -> None:
        with send:
            await work(emit)

    done = anyio.Event()

    async def run_then_say() -> None:
        try:
            await run()
        finally:
            done.set()

    try:
        with receive:
            async with anyio.create_task_group() as tg:
                tg.start_soon(run_then_say)
                try:
                    yield receive
                except Exception:
                    if finish_on_error:
                        receive.close()  # nobody reads on: the events are dropped
                        await done.wait()  # a cancellation here cancels the work, as above
                    raise
    except BaseExceptionGroup as group:
        raise lone_error(group) from None


async def workload_exists(driver: Looks, name: str) -> bool:
    try:
        await driver.get(name)
    except WorkloadNotFound:
        return False
    return True
