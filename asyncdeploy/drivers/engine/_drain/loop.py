"""The one loop that carries the drain core's commands over ``ContainerOps``.

Every command of every workload's machine (:mod:`.core`) runs as a task of the loop's
task group: an engine operation (answered with its result, or the ``EngineError`` it raised, as
a value), a timer, a cancellation of an earlier command, an event handed to the caller. Answers
come back through one channel, each under the key it was asked under; an answer to a command
cancelled or replaced meanwhile is dropped.

Each operation is a single engine call, a wait on the exit stream, or a timer; none is tried
again here: a call lost with the connection is answered as such, and the machine asks it again
(its give-up rule: a connection that blinks kills nothing). No call waits for ever: each is
bounded by the machine's :meth:`~.context.DrainContext.call_bound` (the deadline plus
``call_margin``; once the engine was given up on, ``give_up_after``), and one that is not
answered in time is answered ``CallUnanswered``: an engine that is not answering.

The caller's cancellation is the kill request: it reaches every machine as one observation
(:meth:`~.core.WorkloadDrain.kill`), converted here, once; the machines then kill what
still runs and remove everything, bounded by their cleanup timeout, shielded from the
cancellation, which propagates once they are done.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AsyncExitStack
from typing import TypeVar

import anyio
from anyio.abc import TaskGroup

from asyncdeploy._errors import ENGINE_FAILURES
from asyncdeploy._events import Emit
from asyncdeploy.drivers.engine._drain import calls as waits
from asyncdeploy.drivers.engine._drain.calls import ContainerOps
from asyncdeploy.drivers.engine._drain.core import WorkloadDrain
from asyncdeploy.drivers.engine._drain.protocol import (
    Answer,
    Cancel,
    Claim,
    ClaimSeen,
    Command,
    Do,
    Done,
    DrainTimings,
    DropClaim,
    EngineOp,
    Exited,
    Fired,
    FollowLook,
    FollowStream,
    Key,
    Kill,
    KillPause,
    Look,
    LookPause,
    OwnerAlive,
    OwnerState,
    ReadClaim,
    Remove,
    RemoveVolumes,
    RunHook,
    Sent,
    Signal,
    SignalledBefore,
    Stop,
    StreamExit,
    StreamSettled,
    Tell,
    WaitExit,
    WaitKilled,
    Wake,
    WriteClaim,
)
from asyncdeploy.drivers.engine._exits import ExitWatch

__all__ = ["DrainLoop"]

T = TypeVar("T")
_Slot = tuple[int, Key]  # (machine index, key)


class DrainLoop:
    """Runs machines to their end; ``emit`` gets their events."""

    def __init__(
        self, ops: ContainerOps, exits: ExitWatch, timings: DrainTimings, emit: Emit
    ) -> None:
        self.ops, self.exits, self.timings, self.emit = ops, exits, timings, emit
        self.calls = waits.Calls(ops, exits, timings)
        self._machines: list[WorkloadDrain] = []
        self._scopes: dict[_Slot, anyio.CancelScope] = {}
        self._serial = 0
        self._current: dict[_Slot, int] = {}
        self._send, self._receive = anyio.create_memory_object_stream[tuple[int, Key, int, Answer]](
            math.inf
        )

    async def run(self, machines: Sequence[WorkloadDrain]) -> None:
        self._machines = list(machines)
        async with anyio.create_task_group() as caller:
            caller.start_soon(self._kill_on_cancel)  # the caller's cancellation, observed
            with anyio.CancelScope(shield=True):
                async with AsyncExitStack() as ahead:
                    for machine in self._machines:  # (their task groups outlive the one below)
                        await self._hooks_ahead(ahead, machine)
                    async with anyio.create_task_group() as tasks:
                        for index, machine in enumerate(self._machines):
                            self._carry(tasks, index, machine.start())
                        await self._until_finished(tasks)
                        tasks.cancel_scope.cancel()
            caller.cancel_scope.cancel()
        await anyio.lowlevel.checkpoint()  # a caller's cancellation propagates from here

    async def _hooks_ahead(self, stack: AsyncExitStack, machine: WorkloadDrain) -> None:
        """The workload's HTTP hooks made ready from the drain's start, beside its claim (an
        I/O matter, not the core's: the hook is still asked for when the core says)."""
        hooks = [r.pre_stop_http for r in machine.snapshot.containers if r.running]
        wanted = [hook for hook in hooks if hook is not None]
        if wanted and machine.pause is not None and not machine.finished:
            await stack.enter_async_context(self.ops.http_hooks_ahead(machine.pause, wanted))

    async def _kill_on_cancel(self) -> None:
        try:
            await anyio.sleep_forever()
        finally:  # cancelled: by the caller (kill now), or by run() at its end
            self._send.send_nowait((-1, ("kill", ""), 0, Fired.FIRED))

    async def _until_finished(self, tasks: TaskGroup) -> None:
        if all(m.finished for m in self._machines):
            return  # nothing to wait for (no workload, or one that ended at its start)
        async for index, key, serial, answer in self._receive:
            if index < 0:
                for i, machine in enumerate(self._machines):
                    self._carry(tasks, i, machine.kill(anyio.current_time()))
            elif self._current.get((index, key)) == serial:
                del self._current[(index, key)]
                self._scopes.pop((index, key), None)
                machine = self._machines[index]
                self._carry(tasks, index, machine.observe(key, answer, anyio.current_time()))
            if all(m.finished for m in self._machines):
                return

    def _carry(self, tasks: TaskGroup, index: int, commands: list[Command]) -> None:
        for command in commands:
            if isinstance(command, Tell):
                self.emit(command.event)
            elif isinstance(command, Cancel):
                self._current.pop((index, command.key), None)
                scope = self._scopes.pop((index, command.key), None)
                if scope is not None:
                    scope.cancel()
            else:
                self._serial += 1
                slot = (index, command.key)
                old = self._scopes.pop(slot, None)
                if old is not None:
                    old.cancel()
                self._current[slot] = self._serial
                scope = self._scopes[slot] = anyio.CancelScope()
                tasks.start_soon(self._one, index, command, self._serial, scope)

    async def _one(
        self, index: int, command: Wake | Do, serial: int, scope: anyio.CancelScope
    ) -> None:
        answer: Answer = Fired.FIRED
        with scope:
            if isinstance(command, Wake):
                await anyio.sleep_until(command.at)
            else:
                try:
                    answer = await self._operate(
                        self._machines[index], command.operation, command.key
                    )
                except ENGINE_FAILURES as exc:
                    answer = exc
            self._send.send_nowait((index, command.key, serial, answer))

    async def _operate(self, m: WorkloadDrain, op: EngineOp, key: Key) -> Answer:
        ops, calls = self.ops, self.calls

        bound = m.bound_for(op)
        what = " ".join(part for part in key if part)  # its step and container, in an error

        def call(fn: Callable[[], Awaitable[T]]) -> Awaitable[T]:
            return calls.call(bound, fn, what)

        if isinstance(op, Claim):
            return await call(lambda: ops.claim(op.pause, op.record))
        if isinstance(op, LookPause):
            return await call(lambda: ops.look(op.pause))
        if isinstance(op, Look):
            return await call(lambda: ops.look(op.ref))
        if isinstance(op, ReadClaim):
            record = await call(lambda: ops.read_claim(op.pause))
            return ClaimSeen(record, None if record is None else record.owner.alive())
        if isinstance(op, OwnerAlive):
            return OwnerState(op.owner.alive())
        if isinstance(op, WriteClaim):
            await call(lambda: ops.write_claim(op.pause, op.record))
            return Done.DONE
        if isinstance(op, DropClaim):
            await call(lambda: ops.drop_claim(op.pause, op.record))
            return Done.DONE
        if isinstance(op, SignalledBefore):
            return await call(lambda: ops.signalled_since_pause(op.pause, op.refs))
        if isinstance(op, RunHook):
            return await calls.hook(op.ref, op.pause)
        if isinstance(op, Signal | Kill):
            # the exit stream's mark before it: an exit before now (a crash in the hook) is
            # not this signal's
            since, before_stream = self.exits.mark(), not self.exits.opened
            signal = "SIGKILL" if isinstance(op, Kill) else op.ref.stop_signal
            delivered = await call(lambda: ops.signal(op.ref, signal))
            return Sent(delivered, since, before_stream)
        if isinstance(op, Stop):
            return Exited(await call(lambda: ops.stop(op.ref, op.timeout)))
        if isinstance(op, WaitExit):
            return Exited(await call(lambda: ops.wait_exit(op.ref)))
        if isinstance(op, WaitKilled):
            return Exited(await call(lambda: ops.wait_killed(op.ref)))
        if isinstance(op, StreamExit):
            return await calls.stream_exit(op.ref, op.since)
        if isinstance(op, StreamSettled):
            return await calls.stream_settled(op.ref, op.since)
        if isinstance(op, KillPause):
            await call(lambda: ops.signal(op.pause, "SIGKILL"))
            return Done.DONE
        if isinstance(op, Remove):
            await call(lambda: ops.remove(op.ref))
            return Done.DONE
        if isinstance(op, RemoveVolumes):
            await call(lambda: ops.remove_volumes(op.owner))
            return Done.DONE
        if isinstance(op, FollowLook):
            return await calls.follow_look(bound, op, what)
        if isinstance(op, FollowStream):
            return await calls.follow_stream(op)

        raise AssertionError(f"no such operation: {op!r}")
