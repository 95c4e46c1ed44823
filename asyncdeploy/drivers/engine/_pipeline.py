"""One container's way out of a drain: its hook, its stop signal (once), its exit.

A mixin of the workload drain (:mod:`._drain`), which owns the state and the engine calls it
uses (``_call``, ``_failed``, the claim record); split off to keep each module one concern.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio
import attrs

from asyncdeploy.drivers._books import DrainBooks, TrackedContainer
from asyncdeploy.drivers.engine._claim import BEAT_INTERVAL, ClaimRecord
from asyncdeploy.drivers.engine._drain_state import DrainState
from asyncdeploy.drivers.engine._exits import ExitStreamLost, ExitWatch, first_exit
from asyncdeploy.drivers.engine._ops import CallNotSent, ContainerOps, ContainerRef
from asyncdeploy.errors import (
    ENGINE_FAILURES,
    EngineFailure,
    EngineUnavailable,
    WorkloadNotFound,
)
from asyncdeploy.events import (
    ContainerEnd,
    ContainerExited,
    PreStopFinished,
    PreStopStarted,
    SignalSent,
)

__all__ = ["RESTART_POLL", "Pipelines", "TrackedRef"]

RESTART_POLL = 0.1  # a container restarting under its policy: until it takes a signal

T = TypeVar("T")


@attrs.define(kw_only=True)
class TrackedRef(TrackedContainer):
    ref: ContainerRef


class Pipelines:
    """The per-container steps; the attributes and calls below are the drain's."""

    ops: ContainerOps
    books: DrainBooks
    exits: ExitWatch
    state: DrainState
    record: ClaimRecord | None

    async def _call(self, call: Callable[[], Awaitable[T]], *, once: bool = False) -> T:
        raise NotImplementedError

    def failed(self, what: str, exc: EngineFailure) -> None:
        raise NotImplementedError

    async def write_record(self, record: ClaimRecord | None = None) -> None:
        raise NotImplementedError

    def pause(self) -> ContainerRef | None:
        raise NotImplementedError

    async def _pipeline(self, t: TrackedRef) -> None:
        """One container's way out: its hook, then its signal, then its exit. A container a
        dead owner signalled already (a takeover) is only waited for."""
        if t.name in self.state.signalled:
            await self._stop_one(t, signal=False)
            return
        if t.ref.pre_stop or t.ref.pre_stop_http:
            await self._pre_stop(t)
        await self._stop_one(t)

    async def _pre_stop(self, t: TrackedRef) -> None:
        ref = t.ref
        self.books.emit(PreStopStarted(**self.books.at(t)))
        exit_code: int | None = None
        failed = False
        try:
            pause = self.pause()
            if ref.pre_stop_http is not None and pause is not None:
                # sent from here to the workload's address: nothing runs inside the image
                exit_code = await self.ops.run_http_hook(pause, *ref.pre_stop_http)
            elif ref.pre_stop:
                exit_code, failed = await self._hook_while_alive(ref, ref.pre_stop)
            else:
                failed = True  # an HTTP hook with no address to send it to: on to the signal
        except EngineUnavailable:
            failed = True  # its exec session was lost with the connection: go on to the signal
        except ENGINE_FAILURES as exc:
            self.books.error(f"pre_stop of {ref.name}: {exc}")
            failed = True
        finally:
            # Cut off by the deadline (or a cancellation): no exit code, and no error either.
            timed_out = exit_code is None and not failed
            self.books.emit(
                PreStopFinished(**self.books.at(t), exit_code=exit_code, timed_out=timed_out)
            )

    async def _hook_while_alive(
        self, ref: ContainerRef, command: tuple[str, ...]
    ) -> tuple[int | None, bool]:
        """(exit code, failed) of the hook; a container that dies during its hook ends it
        (failed, no code): Docker leaves the exec's stream open when the container is
        restarted meanwhile, and the hook would hold the signal until the deadline."""
        since = self.exits.mark()
        result: list[int] = []
        failure: list[EngineFailure] = []
        async with anyio.create_task_group() as tg:

            async def hook() -> None:
                try:
                    result.append(await self.ops.run_hook(ref, command))
                except ENGINE_FAILURES as exc:
                    failure.append(exc)  # raised below, not grouped
                tg.cancel_scope.cancel()

            async def died() -> None:
                try:
                    await self.exits.wait_exit(ref.id, since)
                except ExitStreamLost:
                    return  # no stream: the hook alone decides
                tg.cancel_scope.cancel()

            tg.start_soon(hook)
            tg.start_soon(died)
        if failure:
            raise failure[0]
        return (result[0], False) if result else (None, True)

    async def _stop_one(self, t: TrackedRef, *, signal: bool = True) -> None:
        """Send the container's stop signal, once (recorded in the claim first, so that a
        delete taking over from a dead one never sends it again), and wait for its exit."""
        ref = t.ref
        since = self.exits.mark()  # an exit before now (a crash in the hook) is not this one
        before_stream = not self.exits.opened
        try:
            if not signal:
                delivered = True
                exit_code = await self._exit_of(ref, since, before_stream=True)
            elif ref.restart_policy != "no" and self.ops.kill_triggers_restart:
                await self._mark_signalled(t)
                self._signalled(t)
                try:
                    exit_code = await self._call(
                        lambda: self.ops.stop(ref, self.books.deadline - self.books.clock()),
                        once=True,
                    )
                except EngineUnavailable:  # its answer was lost: it stops all the same
                    exit_code = await self._call(lambda: self.ops.wait_exit(ref))
                delivered = True
            else:
                await self._mark_signalled(t)
                try:
                    delivered = await self._call(
                        lambda: self.ops.signal(ref, ref.stop_signal), once=True
                    )
                except CallNotSent:
                    raise
                except EngineUnavailable:
                    delivered = True  # the answer was lost, not the signal: never sent twice
                while not delivered and await self._restarting(ref):
                    await anyio.sleep(RESTART_POLL)  # Docker refuses a kill while it restarts
                    delivered = await self._call(lambda: self.ops.signal(ref, ref.stop_signal))
                if delivered and ref.restart_policy != "no":
                    self._signalled(t)
                    exit_code = await self._exit_of_restartable(ref, since)
                elif delivered:
                    self._signalled(t)
                    exit_code = await self._exit_of(ref, since, before_stream=before_stream)
                else:
                    exit_code = await self._call(lambda: self.ops.wait_exit(ref))
        except WorkloadNotFound:
            t.outcome = "missing"  # removed by hand, or by another delete: not a failure
            return
        except ENGINE_FAILURES as exc:
            self.failed(f"stop {ref.name}", exc)
            return
        # Not running at the signal: ended by its hook (a drain step), else on its own before.
        ended_by_us = delivered or ref.pre_stop is not None or ref.pre_stop_http is not None
        self._exited(t, exit_code, "exited" if ended_by_us else "already-exited")

    async def _mark_signalled(self, t: TrackedRef) -> None:
        self.state.signalled.add(t.name)
        if self.record is not None:
            with anyio.move_on_after(BEAT_INTERVAL):  # a slow write must not hold the signal
                await self.write_record()

    async def _exit_of(self, ref: ContainerRef, since: int, *, before_stream: bool) -> int | None:
        """The exit code of a container just signalled: from the exit stream, else (the stream
        was cut, or never opened) from the engine's wait. Signalled before the stream opened:
        an exit in between is not in the stream; one look once it is open finds it."""
        if before_stream:
            await self.exits.settled()
            if not self.exits.lost and not self.exits.reported(ref.id, since):
                look = await self._call(lambda: self.ops.look(ref))
                if look is None:
                    raise WorkloadNotFound(f"{ref.name} is gone", engine="")
                if not look.running:
                    return look.exit_code
        try:
            return await self.exits.wait_exit(ref.id, since)
        except ExitStreamLost:
            pass
        return await self._call(lambda: self.ops.wait_exit(ref))

    async def _restarting(self, ref: ContainerRef) -> bool:
        """Whether a container with a restart policy runs again (or is about to): it crashed
        during its hook and the engine restarted it (Docker reports it running meanwhile)."""
        if ref.restart_policy == "no" or self.ops.kill_triggers_restart:
            return False  # (where a kill restarts, the drain stops it with the engine's stop)
        look = await self._call(lambda: self.ops.look(ref))
        return look is not None and look.running

    async def _exit_of_restartable(self, ref: ContainerRef, since: int) -> int | None:
        """The end of a container with a restart policy, signalled. Its end may be an earlier
        life's (it crashed during its hook: the stream's die came before the signal), and a
        kill during Docker's restart back-off ends it with no new die: the stream's first
        death after the signal, or the first look that sees it stopped, whichever comes
        first; a death the stream reports while it runs again was an earlier life's."""
        while True:
            code = await first_exit(self.exits, ref.id, lambda: self._stopped(ref), since)
            since = self.exits.mark()
            if not await self._restarting(ref):
                return code

    async def _stopped(self, ref: ContainerRef) -> int | None:
        pause = RESTART_POLL
        while True:
            look = await self._call(lambda: self.ops.look(ref))
            if look is None:
                raise WorkloadNotFound(f"{ref.name} is gone", engine="")
            if not look.running:
                return look.exit_code
            await anyio.sleep(pause)
            pause = min(pause * 2, 1.0)

    async def _exit_of_killed(self, ref: ContainerRef, since: int) -> int | None:
        """The exit code of a container just sent SIGKILL (see :func:`first_exit`)."""
        return await first_exit(
            self.exits, ref.id, lambda: self._call(lambda: self.ops.wait_killed(ref)), since
        )

    def _signalled(self, t: TrackedRef) -> None:
        self.books.emit(SignalSent(**self.books.at(t), signal=t.ref.stop_signal))

    def _exited(self, t: TrackedRef, exit_code: int | None, outcome: ContainerEnd) -> None:
        t.outcome, t.exit_code, t.seconds = outcome, exit_code, self.books.elapsed()
        self.books.emit(
            ContainerExited(**self.books.at(t), exit_code=exit_code, graceful=outcome != "killed")
        )
