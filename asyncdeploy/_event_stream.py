"""The one shape of every event stream the deployer yields: a channel under a task group.

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

from asyncdeploy._log import log_event
from asyncdeploy.events import Event, PullEvent

__all__ = ["cancel_when_set", "event_stream", "lone_error"]

E = TypeVar("E", bound=Event)


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
        if not isinstance(event, PullEvent):
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


async def cancel_when_set(event: anyio.Event, scope: anyio.CancelScope) -> None:
    await event.wait()
    scope.cancel()  # the drain's shielded cleanup kills the survivors and removes everything


def lone_error(group: BaseExceptionGroup) -> BaseException:
    """The one real error of a task group (e.g. WorkloadNotFound before anything was touched),
    or the group itself when there are several."""
    errors = [e for e in group.exceptions if not isinstance(e, anyio.get_cancelled_exc_class())]
    if len(errors) == 1:
        if isinstance(errors[0], BaseExceptionGroup):
            return lone_error(errors[0])
        return errors[0]
    return group
