"""The drain's engine calls: ``ContainerOps``, the calls a driver gives the drain, each made
once and bounded, and the waits that are more than one call: a hook that its container's death
ends, the waits for an exit, a follower's view. The loop (:mod:`.loop`) carries the core's
operations with these; each ends in one answer, and none is tried again here: a call lost with
the connection is the core's to ask again (:mod:`.context`).
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Protocol, TypeVar

import anyio

from asyncdeploy._errors import ENGINE_FAILURES, EngineUnavailable
from asyncdeploy.drivers.engine._answer import answer_within
from asyncdeploy.drivers.engine._claim import ClaimRecord
from asyncdeploy.drivers.engine._drain.protocol import (
    DrainTimings,
    Exited,
    FollowLook,
    FollowStream,
    Hooked,
    NoStream,
    Seen,
    Settled,
)
from asyncdeploy.drivers.engine._exits import ExitStreamLost, ExitWatch
from asyncdeploy.drivers.engine._ops import (
    CallUnanswered,
    ClaimAnswer,
    ContainerLook,
    ContainerRef,
)

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

    def http_hooks_ahead(
        self, pause: ContainerRef, hooks: Sequence[tuple[int, str]]
    ) -> AbstractAsyncContextManager[None]:
        """For the block (a drain, from its start), ready what these HTTP hooks (port, path) of
        the workload will need, so that :meth:`run_http_hook` costs no more than its request
        when asked (the engine's: a probe program started in the workload; a fake: nothing)."""
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


Bound = Callable[[float], float]  # how long a call started at a time may go unanswered


class Calls:
    """Single engine calls, each bounded, and the waits of a container's end and of a
    follower's view. No call is tried again here, and nothing here changes a drain's
    machine: a call's failure is its answer, and the core (:meth:`~.context.DrainContext.
    answer`) decides whether it is asked again."""

    def __init__(self, ops: ContainerOps, exits: ExitWatch, timings: DrainTimings) -> None:
        self.ops, self.exits, self.timings = ops, exits, timings

    async def call(self, bound: Bound, call: Callable[[], Awaitable[T]], what: str) -> T:
        """``call()``, once, bounded by ``bound`` (the core's
        :meth:`~.context.DrainContext.call_bound`): an engine that takes the call and never
        answers raises ``CallUnanswered``, naming ``what`` was asked."""
        started = anyio.current_time()
        limit = bound(started)
        try:
            # the session's own answer bound gives way to this one, when longer
            with anyio.fail_after(limit), answer_within(limit):
                return await call()
        except TimeoutError:
            raise CallUnanswered(
                f"{what}: no answer in {limit:.0f} s", engine=getattr(self.ops, "name", "")
            ) from None

    # --- a container's way out ---------------------------------------------------------------

    async def hook(self, ref: ContainerRef, pause: ContainerRef | None) -> Hooked:
        """The hook, one call; its failure is its answer."""
        try:
            if ref.pre_stop_http is not None and pause is not None:
                # a GET inside the workload's network namespace (ops.run_http_hook says how)
                return Hooked(await self.ops.run_http_hook(pause, *ref.pre_stop_http), False)
            if ref.pre_stop:
                return Hooked(await self.ops.run_hook(ref, ref.pre_stop), False)
            return Hooked(None, True)  # an HTTP hook with no address to send it to
        except EngineUnavailable:
            return Hooked(None, True)  # its exec session was lost with the connection
        except ENGINE_FAILURES as exc:
            return Hooked(None, True, exc)

    # --- a container's end, as the exit stream tells it ------------------------------------

    async def stream_exit(self, ref: ContainerRef, since: int) -> Exited | NoStream:
        """The container's first death after mark ``since`` (-1: from now on)."""
        since = self.exits.mark() if since < 0 else since
        try:
            return Exited(await self.exits.wait_exit(ref.id, since))
        except ExitStreamLost:
            return NoStream.LOST

    async def stream_settled(self, ref: ContainerRef, since: int) -> Settled:
        """Once the stream is open (or lost): whether it reported the container's death after
        mark ``since`` (-1: the mark now, taken before the wait)."""
        since = self.exits.mark() if since < 0 else since
        await self.exits.settled()
        return Settled(since, self.exits.reported(ref.id, since), self.exits.lost)

    # --- a follower's view -------------------------------------------------------------------

    async def follow_stream(self, look: FollowStream) -> Seen | NoStream:
        """What the exit stream reports of the containers, once it reports a change (or at
        ``until``); it cannot tell when it was lost or never opened (by ``until``)."""
        with anyio.move_on_at(look.until):
            await self.exits.settled()  # still opening: the stream will tell
        if not self.exits.opened or self.exits.lost:
            return NoStream.LOST
        await self.exits.wait_change([r.id for r in look.refs], look.until)
        return Seen(self._reported(look.refs))

    async def follow_look(self, bound: Bound, look: FollowLook, what: str) -> Seen:
        """A look at each container."""
        looks: dict[str, ContainerLook | None] = {}
        for ref in look.refs:
            looks[ref.id] = await self.call(
                bound, functools.partial(self.ops.look, ref), f"{what} {ref.name}"
            )
        return Seen(looks)

    def _reported(self, refs: Sequence[ContainerRef]) -> dict[str, ContainerLook | None]:
        seen: dict[str, ContainerLook | None] = {}
        for ref in refs:
            if self.exits.is_gone(ref.id):
                seen[ref.id] = None
            else:
                died, code = self.exits.last_exit(ref.id)
                if died:
                    seen[ref.id] = ContainerLook(running=False, exit_code=code)
        return seen
