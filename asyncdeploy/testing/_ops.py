"""A fake ``ContainerOps`` (the engine calls a drain makes): containers that drain, hooks that hang, a pause that takes the others
with it, and faults on demand, so the engine drain's ordering and error paths run without an
engine. It follows what the real engines were seen to do (tests/engines): a stop signal starts a
drain that ends in exit 0, SIGKILL is exit 137, killing the pause kills every container that
joined it, a second pause is refused, the pause container cannot be removed before the others
(Podman), a call while the engine is away raises ``EngineUnavailable``. Each drain's exit stream
(a real ``ExitWatch``) reports every death as it happens; it is cut when the engine goes away
(its connection is lost too), by ``cut_exit_streams``, and never opens when ``exit_stream`` is
False; it opens ``stream_delay`` seconds after the drain asked (a slow ``/events``); the deaths of
the containers in ``unreported`` reach it too late to matter (Podman reads its events file every
250 ms). A call while the engine is ``down`` never reaches it (``CallNotSent``, as a refused
connection); a call in ``lose_answer`` lands and its answer is lost (``EngineUnavailable``, as a
connection cut after the request left). The claim record is a file in the pause container: it
can be written and read while the pause is paused or stopped, and goes with its removal. A
container with ``restarts`` left that exits non-zero is started again (``on-failure``).
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext
from typing import ClassVar

import anyio
import attrs

from asyncdeploy._errors import (
    EngineAPIError,
    EngineError,
    EngineUnavailable,
    WorkloadConflict,
    WorkloadNotFound,
)
from asyncdeploy.drivers.engine._claim import ClaimRecord
from asyncdeploy.drivers.engine._exits import ExitWatch
from asyncdeploy.drivers.engine._ops import (
    CallNotSent,
    ClaimAnswer,
    ContainerLook,
    ContainerRef,
    WorkloadSnapshot,
)

__all__ = ["ENGINE", "Box", "FakeOps", "refused"]

ENGINE = "fake"


@attrs.define(kw_only=True)
class Box:
    """One fake container."""

    ref: ContainerRef
    state: str = "running"  # running, paused, exited or gone
    exit_code: int | None = None
    drain: float = 0.0  # from its stop signal to its exit 0
    ignores_term: bool = False
    hook: float = 0.0  # how long its pre_stop hook runs
    hook_code: int = 0
    pause: str | None = None  # the pause container whose namespaces it joined
    exit_at: float | None = None
    crash_in_hook: bool = False  # its process exits 1 while its pre_stop hook runs
    restarts: int = 0  # on-failure restarts left
    # Its own exit (0) was under way when the deadline's SIGKILL came: the engine accepts the
    # kill, and reports the exit 0 the container made (Docker under load, issue 25 item 3).
    exiting_at_kill: bool = False
    changed: anyio.Event = attrs.field(factory=anyio.Event)
    on_die: Callable[[str, int], None] | None = None
    claim: ClaimRecord | None = None  # the claim file (pause containers)

    @property
    def running(self) -> bool:
        return self.state in ("running", "paused")

    def settle(self) -> None:
        if self.running and self.exit_at is not None and anyio.current_time() >= self.exit_at:
            self.die(0)

    def die(self, code: int) -> None:
        if self.running:
            self.state, self.exit_code = "exited", code
            self.changed.set()
            self.changed = anyio.Event()
            if self.on_die is not None:
                self.on_die(self.ref.id, code)
            if code != 0 and code != 137 and self.restarts > 0:  # on-failure: a new life
                self.restarts -= 1
                self.state, self.exit_code, self.exit_at = "running", None, None


class FakeOps:
    """The engine calls of a drain on a set of fake containers; ``log`` records every call."""

    name: ClassVar[str] = ENGINE
    kill_triggers_restart: ClassVar[bool] = False
    claim_is_record: bool = False  # True: Docker's claim (the record's volume), else a pause

    def __init__(self) -> None:
        self.boxes: dict[str, Box] = {}
        self.log: list[tuple[str, str, str]] = []  # (call, container, detail)
        self.faults: dict[tuple[str, str], list[BaseException]] = {}
        self.delays: dict[tuple[str, str], float] = {}
        self.hang: set[tuple[str, str]] = set()
        self._down = False
        self.volumes_removed: list[str] = []
        self.exit_stream = True  # False: the stream never opens (the drain waits per container)
        self.watches: list[ExitWatch] = []
        self.unreported: set[str] = set()  # names whose death the stream reports too late
        self.stream_delay = 0.0
        self.lose_answer: set[tuple[str, str]] = set()
        self._rescheduled = anyio.Event()

    @property
    def down(self) -> bool:
        """True while the engine is away: every call, and every wait in flight, is lost."""
        return self._down

    @down.setter
    def down(self, value: bool) -> None:
        self._down = value
        if value:
            self.cut_exit_streams()
            for box in self.boxes.values():
                box.changed.set()
                box.changed = anyio.Event()

    # --- building the workload ---------------------------------------------------------------

    def add(self, name: str, role: str = "run", **kw: object) -> Box:
        ref_fields = {
            k: kw.pop(k)
            for k in ("pre_stop", "pre_stop_http", "stop_signal", "restart_policy")
            if k in kw
        }
        state = str(kw.pop("state", "running"))
        ref = ContainerRef(
            id=f"id-{name}",
            name=name,
            role=role,  # type: ignore[arg-type]
            running=state in ("running", "paused"),
            paused=state == "paused",
            exit_code=kw.get("exit_code"),  # type: ignore[arg-type]
            **ref_fields,  # type: ignore[arg-type]
        )
        pauses = [b.ref.name for b in self.boxes.values() if b.ref.role == "pause"]
        joined = pauses[-1] if pauses and role != "pause" else None
        box = Box(ref=ref, state=state, pause=joined, on_die=self._died, **kw)  # type: ignore[arg-type]
        self.boxes[name] = box
        return box

    def snapshot(
        self, workload: str = "w", grace: int = 30, only: Sequence[str] | None = None
    ) -> WorkloadSnapshot:
        return WorkloadSnapshot(
            name=workload,
            grace_period_seconds=grace,
            containers=tuple(
                b.ref for b in self.boxes.values() if only is None or b.ref.name in only
            ),
        )

    def fail(self, call: str, name: str, *errors: BaseException) -> None:
        """The next calls of ``call`` on ``name`` raise ``errors``, one each."""
        self.faults.setdefault((call, name), []).extend(errors)

    def calls(self, call: str, name: str | None = None) -> list[tuple[str, str, str]]:
        return [c for c in self.log if c[0] == call and name in (None, c[1])]

    def cut_exit_streams(self) -> None:
        for watch in self.watches:
            watch.lose()

    def _died(self, ident: str, code: int) -> None:
        if ident.removeprefix("id-") in self.unreported:
            return
        for watch in self.watches:
            if watch.opened and not watch.lost:
                watch.record(ident, code)

    def _drains_until(self, box: Box, at: float) -> None:
        box.exit_at = at
        self._rescheduled.set()

    async def _engine_clock(self) -> None:
        """Containers die when their drain ends, whether or not anyone asks (as an engine's do)."""
        while True:
            for box in self.boxes.values():
                box.settle()
            due = [b.exit_at for b in self.boxes.values() if b.running and b.exit_at is not None]
            with anyio.move_on_at(min(due, default=math.inf)):
                await self._rescheduled.wait()
            self._rescheduled = anyio.Event()

    # --- the protocol ------------------------------------------------------------------------

    @asynccontextmanager
    async def exits(self) -> AsyncIterator[ExitWatch]:
        self.log.append(("exits", "", "open"))
        watch = ExitWatch()
        self.watches.append(watch)

        def settle() -> None:
            if not self.exit_stream or self.down:
                watch.lose()
            else:
                watch.open()

        async def opening() -> None:
            await anyio.sleep(self.stream_delay)
            settle()

        if not self.stream_delay:
            settle()  # an engine that answers at once

        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._engine_clock)
                tg.start_soon(opening)
                try:
                    yield watch
                finally:
                    tg.cancel_scope.cancel()
        finally:
            watch.lose()
            self.watches.remove(watch)

    async def _enter(self, call: str, ref: ContainerRef, detail: str = "") -> Box:
        self.log.append((call, ref.name, detail))
        if (delay := self.delays.get((call, ref.name))) is not None:
            await anyio.sleep(delay)
        if (call, ref.name) in self.hang:
            await anyio.sleep_forever()
        if self.down:
            raise CallNotSent(f"{call} {ref.name}: connection refused", engine=ENGINE)
        if queued := self.faults.get((call, ref.name)):
            raise queued.pop(0)
        box = self.boxes[ref.name]
        box.settle()
        if box.state == "gone":
            raise WorkloadNotFound(
                f"{call} {ref.name}: no such container", engine=ENGINE, status=404
            )
        return box

    async def signal(self, ref: ContainerRef, signal: str) -> bool:
        box = await self._enter("signal", ref, signal)
        if not box.running:
            return False
        if signal == "SIGKILL":
            box.die(0 if box.exiting_at_kill else 137)
            if ref.role == "pause":  # the others lose their namespaces with it
                for other in self.boxes.values():
                    if other.pause == ref.name:
                        other.die(137)
        elif not box.ignores_term and box.exit_at is None:
            self._drains_until(box, anyio.current_time() + box.drain)
        self._answer("signal", ref)
        return True

    def _answer(self, call: str, ref: ContainerRef) -> None:
        """The call landed; its answer is lost on the way back when asked for (once)."""
        if (call, ref.name) in self.lose_answer:
            self.lose_answer.discard((call, ref.name))
            raise EngineUnavailable(f"{call} {ref.name}: server disconnected", engine=ENGINE)

    async def _until_stopped(self, box: Box) -> int | None:
        while True:
            box.settle()
            if box.state == "gone":
                raise WorkloadNotFound(
                    f"wait for {box.ref.name}: removed", engine=ENGINE, status=404
                )
            if not box.running:
                return box.exit_code
            with anyio.move_on_at(box.exit_at if box.exit_at is not None else math.inf):
                await box.changed.wait()
            if self.down:
                raise EngineUnavailable(
                    f"wait for {box.ref.name}: server disconnected", engine=ENGINE
                )

    async def wait_exit(self, ref: ContainerRef) -> int | None:
        return await self._until_stopped(await self._enter("wait_exit", ref))

    async def wait_killed(self, ref: ContainerRef) -> int | None:
        return await self._until_stopped(await self._enter("wait_killed", ref))

    async def stop(self, ref: ContainerRef, timeout: float) -> int | None:
        box = await self._enter("stop", ref, f"{timeout:.1f}")
        if box.running and not box.ignores_term and box.exit_at is None:
            self._drains_until(box, anyio.current_time() + box.drain)
        self._answer("stop", ref)
        with anyio.move_on_after(timeout):
            return await self._until_stopped(box)
        box.die(137)
        return 137

    async def remove(self, ref: ContainerRef) -> None:
        box = await self._enter("remove", ref)
        if ref.role == "pause" and any(
            b.state != "gone" and b.pause == ref.name for b in self.boxes.values()
        ):
            raise WorkloadConflict(
                f"remove {ref.name}: container has dependent containers",
                engine=ENGINE,
                status=500,
            )
        box.die(137)
        box.state = "gone"

    async def run_hook(self, ref: ContainerRef, command: Sequence[str]) -> int:
        box = await self._enter("run_hook", ref, " ".join(command))
        if box.crash_in_hook:
            await anyio.sleep(box.hook / 2)
            box.die(1)
            await anyio.sleep(box.hook / 2)
        else:
            await anyio.sleep(box.hook)
        return box.hook_code

    async def run_http_hook(self, pause: ContainerRef, port: int, path: str) -> int:
        box = await self._enter("run_http_hook", pause, f"{port} {path}")
        await anyio.sleep(box.hook)
        return box.hook_code

    def http_hooks_ahead(
        self, pause: ContainerRef, hooks: Sequence[tuple[int, str]]
    ) -> AbstractAsyncContextManager[None]:
        return nullcontext()  # a fake hook costs nothing to send

    async def remove_volumes(self, workload: str) -> None:
        self.log.append(("remove_volumes", workload, ""))
        if self.down:
            raise EngineUnavailable("list volumes: connection reset", engine=ENGINE)
        if queued := self.faults.get(("remove_volumes", workload)):
            raise queued.pop(0)
        self.volumes_removed.append(workload)

    async def claim(self, pause: ContainerRef, record: ClaimRecord) -> ClaimAnswer:
        box = await self._enter("claim", pause)
        if self.claim_is_record:  # Docker's way: the record's volume, created once
            if box.claim is not None:
                return ClaimAnswer.HELD
            box.claim = record
            return ClaimAnswer.CLAIMED
        if box.state != "running":
            return ClaimAnswer.REFUSED
        box.state = "paused"
        return ClaimAnswer.CLAIMED

    async def write_claim(self, pause: ContainerRef, record: ClaimRecord) -> None:
        box = await self._enter("write_claim", pause, record.token)
        box.claim = record

    async def read_claim(self, pause: ContainerRef) -> ClaimRecord | None:
        try:
            box = await self._enter("read_claim", pause)
        except WorkloadNotFound:
            return None
        return box.claim

    async def drop_claim(self, pause: ContainerRef, record: ClaimRecord) -> None:
        box = self.boxes[pause.name]
        self.log.append(("drop_claim", pause.name, ""))
        if box.claim == record:
            box.claim = None

    async def signalled_since_pause(
        self, pause: ContainerRef, refs: Sequence[ContainerRef]
    ) -> frozenset[str]:
        """The engine's record of the stop signals sent (this fake's log of them)."""
        self.log.append(("signalled_since_pause", pause.name, ""))
        names = {r.name for r in refs}
        return frozenset(
            c[1]
            for c in self.log
            if c[0] in ("signal", "stop") and c[1] in names and c[2] != "SIGKILL"
        )

    async def look(self, ref: ContainerRef) -> ContainerLook | None:
        try:
            box = await self._enter("look", ref)
        except WorkloadNotFound:
            return None
        return ContainerLook(
            running=box.running, paused=box.state == "paused", exit_code=box.exit_code
        )


def refused(call: str, name: str) -> EngineError:
    """The error an engine answers when it refuses ``call`` on container ``name`` (a 500)."""
    return EngineAPIError(f"{call} {name}: refused", engine=ENGINE, status=500)
