"""The drain's engine calls: ``ContainerOps``, the calls a driver gives the drain, and the ones
that are more than one call: retried calls, a hook that its container's death ends, a stop
signal sent once, and the waits for an exit. The loop (:mod:`.loop`) carries the core's
operations with these; each ends in one answer.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Protocol, TypeVar

import anyio

from asyncdeploy._errors import ENGINE_FAILURES, EngineFailure, EngineUnavailable, WorkloadNotFound
from asyncdeploy.drivers.engine._claim import ClaimRecord
from asyncdeploy.drivers.engine._drain.protocol import (
    AwaitExit,
    DrainTimings,
    FollowLook,
    Hooked,
    Sent,
)
from asyncdeploy.drivers.engine._exits import ExitStreamLost, ExitWatch, first_exit
from asyncdeploy.drivers.engine._ops import CallNotSent, ClaimAnswer, ContainerLook, ContainerRef

__all__ = ["Calls", "ContainerOps"]

T = TypeVar("T")


class ContainerOps(Protocol):
    """The engine calls a drain needs; each raises ``EngineError`` subclasses only
    (``EngineUnavailable`` when the connection to the engine is lost: the drain retries)."""

    @property
    def kill_triggers_restart(self) -> bool:
        """True where a signalled container that exits is restarted under its restart policy
        (Podman): such containers are stopped with :meth:`stop` instead."""
        ...

    def exits(self) -> AbstractAsyncContextManager[ExitWatch]:
        """The engine's exit events for one drain: yields at once, the stream opening beside
        the first signals (``ExitWatch.settled``); lost when it cannot be opened."""
        ...

    async def signal(self, ref: ContainerRef, signal: str) -> bool:
        """Send ``signal``; False when the container was not running. Raises ``CallNotSent``
        when it surely did not reach the engine, ``EngineUnavailable`` when it may have."""
        ...

    async def wait_exit(self, ref: ContainerRef) -> int | None:
        """Wait until the container is not running; return its exit code."""
        ...

    async def wait_killed(self, ref: ContainerRef) -> int | None:
        """The same, for a container just sent SIGKILL (it must not wait on anything else)."""
        ...

    async def stop(self, ref: ContainerRef, timeout: float) -> int | None:
        """Stop with the container's stop signal, as a stop that no restart policy undoes."""
        ...

    async def remove(self, ref: ContainerRef) -> None:
        """Force-remove; a removal already in progress elsewhere is waited for, not an error."""
        ...

    async def run_hook(self, ref: ContainerRef, command: Sequence[str]) -> int:
        """Exec ``command`` in the container; return its exit code."""
        ...

    async def run_http_hook(self, pause: ContainerRef, port: int, path: str) -> int:
        """GET ``path`` on the workload's ``port`` (its pause container's address): 0 for 2xx."""
        ...

    async def remove_volumes(self, plan_name: str) -> None:
        """Remove the volumes asyncdeploy created for this plan that no container uses any
        more (an instance of the same plan may still run: its volume stays)."""
        ...

    @property
    def claim_is_record(self) -> bool:
        """True where the claim is made by writing the record (Docker: a volume named after the
        pause container; the pause container is then never paused)."""
        ...

    async def claim(self, pause: ContainerRef, record: ClaimRecord) -> ClaimAnswer:
        """Claim the drain, atomically on the engine (see :class:`ClaimAnswer`). Docker: the
        record's volume, created (one cheap call: a pause forks the runtime). Podman: a pause
        (forty concurrent volume creates held its database 17 s); a second one is refused."""
        ...

    async def write_claim(self, pause: ContainerRef, record: ClaimRecord) -> None:
        """Write (or replace) the claim record of this pause container (see :mod:`._claim`)."""
        ...

    async def read_claim(self, pause: ContainerRef) -> ClaimRecord | None:
        """The claim record of the pause container; None when there is none."""
        ...

    async def drop_claim(self, pause: ContainerRef, record: ClaimRecord) -> None:
        """Remove the claim record, when it is still ``record`` (its drain has ended)."""
        ...

    async def signalled_since_pause(
        self, pause: ContainerRef, refs: Sequence[ContainerRef]
    ) -> frozenset[str]:
        """The names of ``refs`` the engine recorded a signal to (a kill or a stop) since the
        pause container was last paused: what a dead owner had sent (best effort: the engine's
        event log may not reach that far back)."""
        ...

    async def look(self, ref: ContainerRef) -> ContainerLook | None:
        """The container's state now; None when it is gone."""
        ...


class Caller(Protocol):
    """What a retried call asks of its workload's machine (the give-up rule's state)."""

    lost: bool

    def unreachable(self, now: float) -> None: ...

    def reached(self) -> None: ...

    def gives_up(self, now: float) -> bool: ...

    def call_bound(self, now: float) -> float: ...


class Calls:
    def __init__(self, ops: ContainerOps, exits: ExitWatch, timings: DrainTimings) -> None:
        self.ops, self.exits, self.timings = ops, exits, timings

    async def call(self, m: Caller, call: Callable[[], Awaitable[T]], *, once: bool = False) -> T:
        """``call()``, tried again with backoff while the engine is unreachable, until the
        machine gives up on it. ``once``: a call that must not land twice (a stop signal) is
        tried again only when it surely never reached the engine; a lost answer is raised.
        Each try is bounded (:meth:`~.core.WorkloadDrain.call_bound`): an engine that
        takes the call and never answers is an engine that is unreachable."""
        pauses = self.timings.engine_call.pauses()
        while True:
            started = anyio.current_time()
            bound = self.timings.give_up_after if m.lost else m.call_bound(started)
            try:
                with anyio.fail_after(bound):
                    result = await call()
            except TimeoutError:
                m.unreachable(started)
                raise EngineUnavailable(
                    f"no answer in {bound:.0f} s", engine=getattr(self.ops, "name", "")
                ) from None
            except EngineUnavailable as exc:
                if once and not isinstance(exc, CallNotSent):
                    raise
                now = anyio.current_time()
                m.unreachable(now)
                if m.gives_up(now):
                    raise
                await anyio.sleep(next(pauses))
            else:
                m.reached()
                return result

    # --- a container's way out ---------------------------------------------------------------

    async def hook(self, ref: ContainerRef, pause: ContainerRef | None) -> Hooked:
        try:
            if ref.pre_stop_http is not None and pause is not None:
                # sent from here to the workload's address: nothing runs inside the image
                return Hooked(await self.ops.run_http_hook(pause, *ref.pre_stop_http), False)
            if ref.pre_stop:
                return await self._hook_while_alive(ref, ref.pre_stop)
            return Hooked(None, True)  # an HTTP hook with no address to send it to
        except EngineUnavailable:
            return Hooked(None, True)  # its exec session was lost with the connection
        except ENGINE_FAILURES as exc:
            return Hooked(None, True, exc)

    async def _hook_while_alive(self, ref: ContainerRef, command: tuple[str, ...]) -> Hooked:
        """A container that dies during its hook ends it (failed, no code): Docker leaves the
        exec's stream open when the container is restarted meanwhile, and the hook would hold
        the signal until the deadline."""
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
        return Hooked(result[0], False) if result else Hooked(None, True)

    async def stop_signal(self, m: Caller, ref: ContainerRef) -> Sent:
        """Send the stop signal once (a lost answer is not sent again: it may have landed)."""
        since = self.exits.mark()  # an exit before now (a crash in the hook) is not this one
        before_stream = not self.exits.opened
        try:
            delivered = await self.call(m, lambda: self.ops.signal(ref, ref.stop_signal), once=True)
        except CallNotSent:
            raise
        except EngineUnavailable:
            delivered = True  # the answer was lost, not the signal: never sent twice
        while not delivered and await self._restarting(m, ref):
            await anyio.sleep(self.timings.restart.first)  # Docker refuses a kill while it restarts
            delivered = await self.call(m, lambda: self.ops.signal(ref, ref.stop_signal))
        return Sent(delivered, since, before_stream)

    async def stop(self, m: Caller, ref: ContainerRef, timeout: float) -> int | None:
        try:
            return await self.call(m, lambda: self.ops.stop(ref, timeout), once=True)
        except CallNotSent:
            raise
        except EngineUnavailable:  # its answer was lost: it stops all the same
            return await self.call(m, lambda: self.ops.wait_exit(ref))

    async def exit_of(self, m: Caller, wait: AwaitExit) -> int | None:
        ref = wait.ref
        since = self.exits.mark() if wait.since < 0 else wait.since
        if wait.wait_only:
            return await self.call(m, lambda: self.ops.wait_exit(ref))
        if wait.restartable:
            return await self._exit_of_restartable(m, ref, since)
        if wait.before_stream:
            # Signalled before the stream opened: an exit in between is not in the stream;
            # one look once it is open finds it.
            await self.exits.settled()
            if not self.exits.lost and not self.exits.reported(ref.id, since):
                look = await self.call(m, lambda: self.ops.look(ref))
                if look is None:
                    raise WorkloadNotFound(f"{ref.name} is gone", engine="", status=404)
                if not look.running:
                    return look.exit_code
        try:
            return await self.exits.wait_exit(ref.id, since)
        except ExitStreamLost:
            pass
        return await self.call(m, lambda: self.ops.wait_exit(ref))

    async def _restarting(self, m: Caller, ref: ContainerRef) -> bool:
        """Whether a container with a restart policy runs again (or is about to): it crashed
        during its hook and the engine restarted it (Docker reports it running meanwhile)."""
        if ref.restart_policy == "no" or self.ops.kill_triggers_restart:
            return False  # (where a kill restarts, the drain stops it with the engine's stop)
        look = await self.call(m, lambda: self.ops.look(ref))
        return look is not None and look.running

    async def _exit_of_restartable(self, m: Caller, ref: ContainerRef, since: int) -> int | None:
        """The end of a container with a restart policy, signalled. Its end may be an earlier
        life's (it crashed during its hook: the stream's die came before the signal), and a
        kill during Docker's restart back-off ends it with no new die: the stream's first
        death after the signal, or the first look that sees it stopped, whichever comes
        first; a death the stream reports while it runs again was an earlier life's."""
        while True:
            code = await first_exit(self.exits, ref.id, lambda: self._stopped(m, ref), since)
            since = self.exits.mark()
            if not await self._restarting(m, ref):
                return code

    async def _stopped(self, m: Caller, ref: ContainerRef) -> int | None:
        pauses = self.timings.restart.pauses()
        while True:
            look = await self.call(m, lambda: self.ops.look(ref))
            if look is None:
                raise WorkloadNotFound(f"{ref.name} is gone", engine="", status=404)
            if not look.running:
                return look.exit_code
            await anyio.sleep(next(pauses))

    async def killed(self, m: Caller, ref: ContainerRef, since: int) -> int | None:
        """The exit code of a container just sent SIGKILL (see :func:`first_exit`)."""
        return await first_exit(
            self.exits, ref.id, lambda: self.call(m, lambda: self.ops.wait_killed(ref)), since
        )

    # --- a follower's view -------------------------------------------------------------------

    async def follow(self, m: Caller, look: FollowLook) -> dict[str, ContainerLook | None]:
        """What became of the containers: from the exit stream once it reports a change (or
        at ``until``); a look at each when asked for, or when there is no stream to tell."""
        if not look.fresh:
            with anyio.move_on_at(look.until):
                await self.exits.settled()  # still opening: the stream will tell
            if self.exits.opened and not self.exits.lost:
                await self.exits.wait_change([r.id for r in look.refs], look.until)
                return self._reported(look)
            await anyio.sleep_until(look.until)
        return {r.id: await self.call(m, lambda r=r: self.ops.look(r)) for r in look.refs}  # type: ignore[misc]

    def _reported(self, look: FollowLook) -> dict[str, ContainerLook | None]:
        seen: dict[str, ContainerLook | None] = {}
        for ref in look.refs:
            if self.exits.is_gone(ref.id):
                seen[ref.id] = None
            else:
                died, code = self.exits.last_exit(ref.id)
                if died:
                    seen[ref.id] = ContainerLook(running=False, exit_code=code)
        return seen
