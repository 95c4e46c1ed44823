"""The engine calls of a drain (the ``ContainerOps`` of :mod:`._drain`) on the Engine API.

Made over an :class:`~._session.EngineSession`; Podman's kill and wait come from its session.
The driver hands these to the drain, and the create's roll-back uses them too.
"""

from __future__ import annotations

import json
import math
import tarfile
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import aiohttp
import anyio

from asyncdeploy._backoff import KILLED_POLL
from asyncdeploy._errors import (
    ENGINE_FAILURES,
    EngineAPIError,
    EngineUnavailable,
    WorkloadConflict,
    WorkloadNotFound,
)
from asyncdeploy.drivers.engine._claim import (
    CLAIM_FILE,
    ClaimRecord,
    claim_labels,
    claim_volume,
    pack,
    unpack,
)
from asyncdeploy.drivers.engine._coalesce import Rounds
from asyncdeploy.drivers.engine._exits import ExitHub, ExitWatch
from asyncdeploy.drivers.engine._history import events_query, signalled_after_pause
from asyncdeploy.drivers.engine._inside import (
    ENGINE_BOUND,
    HookAhead,
    Inside,
    NotAhead,
    passes,
    probe_argv,
)
from asyncdeploy.drivers.engine._netcheck import http_get, workload_address
from asyncdeploy.drivers.engine._ops import CallNotSent, ClaimAnswer, ContainerLook, ContainerRef
from asyncdeploy.drivers.engine._session import EngineSession
from asyncdeploy.labels import (
    LABEL_CLAIM,
    LABEL_CLAIM_RECORD,
    LABEL_VOLUME_PLAN,
    LABEL_WORKLOAD,
)

__all__ = ["EngineContainerOps"]

REMOVAL_POLL_SECONDS = 0.05
# Failures that mean the request never left: no connection could be made.
_NEVER_SENT = (aiohttp.ClientConnectorError, ConnectionRefusedError, FileNotFoundError)
FREEZE_TRIES = 3
HISTORY_WINDOW = 3600.0  # how far back a takeover reads the engine's events for signals sent


class EngineContainerOps:
    """Exits, signal, wait, stop, remove, hook, claim and look, each translated by the
    session's ``errors``."""

    def __init__(self, session: EngineSession) -> None:
        self.session = session
        # one event stream for every drain of this deployer
        self.hub = ExitHub(
            session.address,
            api_version=session.client.api_version,
            labelled=session.labelled_events,
        )
        # every follower's look at the claim records meanwhile: one volume list
        self.claims = Rounds(self._list_claims)
        # checks and HTTP hooks sent inside a workload's network namespace
        self.inside = Inside(session)
        # HTTP hooks' probes started ahead, by (pause container id, port, path)
        self._ahead: dict[tuple[str, int, str], HookAhead] = {}

    @property
    def name(self) -> str:
        return self.session.engine

    @property
    def kill_triggers_restart(self) -> bool:
        return self.session.kill_triggers_restart

    def exits(self) -> AbstractAsyncContextManager[ExitWatch]:
        return self.hub.subscribe()

    async def signal(self, ref: ContainerRef, signal: str) -> bool:
        try:
            with self.session.errors(f"signal {ref.name}"):
                await self.session.kill(ref.id, signal)
        except WorkloadConflict:
            return False  # not running (Docker 409, Podman 500)
        except EngineUnavailable as exc:
            raise _unsent_or_lost(exc) from exc.__cause__
        return True

    async def wait_exit(self, ref: ContainerRef) -> int | None:
        with self.session.errors(f"wait for {ref.name}"):
            return await self.session.wait(ref.id)

    async def stop(self, ref: ContainerRef, timeout: float) -> int | None:
        """The engine's stop, its kill delay rounded *up* to whole seconds and never 0 while
        time is left (``t=0`` is SIGKILL without the stop signal): the drain's own deadline
        SIGKILLs at the exact time; the engine's at most a second later."""
        try:
            with self.session.errors(f"stop {ref.name}"):
                await self.session.stop(ref.id, max(1, math.ceil(timeout)) if timeout > 0 else 0)
        except EngineUnavailable as exc:
            raise _unsent_or_lost(exc) from exc.__cause__
        # Podman's waits block until a cut-off hook's exec session is cleaned up (20 s):
        # the same wait as after a kill, which polls its state there.
        return await self.wait_killed(ref)

    async def wait_killed(self, ref: ContainerRef) -> int | None:
        """Wait for a container just sent SIGKILL: Docker's wait returns as it dies. Podman's
        state is polled: after a SIGKILL that cut a pre_stop hook off, every wait (compatible
        or libpod) blocks until the hook's exec session is cleaned up, 20 s later."""
        if not self.session.polls_killed:
            return await self.wait_exit(ref)
        pauses = KILLED_POLL.pauses()
        while True:
            look = await self.look(ref)
            if look is None:
                raise WorkloadNotFound(f"{ref.name} is gone", engine=self.session.engine)
            if not look.running:
                return look.exit_code
            await anyio.sleep(next(pauses))

    async def remove(self, ref: ContainerRef) -> None:
        """Force-remove a stopped container (the drain has signalled it: Podman's force-delete
        of a running one would stop it gracefully first). A removal already in progress (Docker
        answers 409: another delete, or someone by hand) is waited for instead."""
        try:
            with self.session.errors(f"remove {ref.name}"):
                await self.session.delete(ref.id)
        except WorkloadConflict as exc:
            if "already in progress" not in exc.message:
                raise
            while True:  # polled: the engines have no "removed" event to wait on here
                if await self.look(ref) is None:
                    return
                await anyio.sleep(REMOVAL_POLL_SECONDS)

    @property
    def claim_is_record(self) -> bool:
        return self.session.claims_in_volumes

    async def claim(self, pause: ContainerRef, record: ClaimRecord) -> ClaimAnswer:
        if self.session.claims_in_volumes:
            # Docker creates a volume once under a lock per name, and answers a second create
            # of the name with the first one's volume: whose labels it holds says who claimed.
            name = claim_volume(pause.id)
            try:
                made = await self._create_volume(name, claim_labels(pause.id, record))
            except WorkloadConflict:
                return ClaimAnswer.HELD
            held = (made.get("Labels") or {}).get(LABEL_CLAIM_RECORD)
            return ClaimAnswer.CLAIMED if held == record.to_json() else ClaimAnswer.HELD
        return ClaimAnswer.CLAIMED if await self._pause(pause) else ClaimAnswer.REFUSED

    async def _pause(self, pause: ContainerRef) -> bool:
        """Pause it; False when refused (paused already, or not running)."""
        for attempt in range(FREEZE_TRIES):
            try:
                with self.session.errors(f"pause {pause.name}"):
                    await self.session.pause(pause.id)
            except WorkloadConflict:
                return False  # already paused (another delete drains it), or not running
            except EngineAPIError as exc:
                # runc's "unable to freeze" (a loaded host): the freezer timed out, try again
                if "freeze" not in exc.message or attempt + 1 == FREEZE_TRIES:
                    raise
                await anyio.sleep(0.05)
                continue
            return True
        return False

    async def write_claim(self, pause: ContainerRef, record: ClaimRecord) -> None:
        """Docker: one volume create; a record left by another owner is replaced (Docker
        returns an existing volume as if created). Podman: a file in the pause container."""
        if not self.session.claims_in_volumes:
            # Both engines extract an archive into a paused (and a stopped) container.
            with self.session.errors(f"record the claim in {pause.name}"):
                await self.session.put_archive(pause.id, "/", pack(record))
            return
        name = claim_volume(pause.id)
        for _ in range(2):
            try:
                created = await self._create_volume(name, claim_labels(pause.id, record))
            except WorkloadConflict:
                created = {}
            if (created.get("Labels") or {}).get(LABEL_CLAIM_RECORD) == record.to_json():
                return
            await self._drop_volume(name)

    async def _create_volume(self, name: str, labels: dict[str, str]) -> dict[str, Any]:
        body = json.dumps({"Name": name, "Labels": labels})
        with self.session.errors(f"record the claim in {name}"):
            answer = await self.session.query_json("volumes/create", "POST", data=body)
        return dict(answer or {})

    async def _drop_volume(self, name: str) -> None:
        try:
            await self.remove_volume(name)
        except WorkloadNotFound:
            pass

    async def read_claim(self, pause: ContainerRef) -> ClaimRecord | None:
        if self.session.claims_in_volumes:
            return (await self.claims.ask(pause.id)).get(pause.id)
        try:
            with self.session.errors(f"read the claim in {pause.name}"):
                return unpack(await self.session.get_archive(pause.id, "/" + CLAIM_FILE))
        except WorkloadNotFound:
            return None  # no record (or no pause: the look says which)
        except tarfile.TarError:
            return None  # an empty answer: Podman, while the pause container is being removed

    async def claim_records(self) -> dict[str, ClaimRecord] | None:
        """Every claim record, by pause container id, where they are volumes (one list); None
        elsewhere, or when the list failed (each is then read on its own)."""
        if not self.session.claims_in_volumes:
            return None
        try:
            return await self.claims.ask("")
        except ENGINE_FAILURES:
            return None

    async def _list_claims(self, _: frozenset[str]) -> dict[str, ClaimRecord]:
        with self.session.errors("list the drain claims"):
            listed = await self.session.volumes(LABEL_CLAIM)
        found = {}
        for volume in listed:
            labels = volume.get("Labels") or {}
            record = ClaimRecord.from_json(labels.get(LABEL_CLAIM_RECORD) or "")
            if record is not None and labels.get(LABEL_CLAIM):
                found[str(labels[LABEL_CLAIM])] = record
        return found

    async def drop_claim(self, pause: ContainerRef, record: ClaimRecord) -> None:
        """Once its pause container is gone, the record has nothing left to tell (a takeover's
        record of the same pause included): removed without a look first."""
        if not self.session.claims_in_volumes:
            return  # the file went with its pause container
        await self._drop_volume(claim_volume(pause.id))

    async def signalled_since_pause(
        self, pause: ContainerRef, refs: Sequence[ContainerRef]
    ) -> frozenset[str]:
        workload = pause.workload
        now = time.time()
        params = events_query(workload, now - HISTORY_WINDOW, now, engine=self.session.engine)
        with self.session.errors(f"events of {workload}"):
            async with self.session.query("events", params=params) as response:
                text = await response.text()
        return signalled_after_pause(text.splitlines(), pause.id, {r.id: r.name for r in refs})

    async def look(self, ref: ContainerRef) -> ContainerLook | None:
        try:
            with self.session.errors(f"inspect {ref.name}"):
                state = (await self.session.show(ref.id)).get("State")
        except WorkloadNotFound:
            return None
        state = state or {}
        code = state.get("ExitCode")
        return ContainerLook(
            running=bool(state.get("Running")),
            paused=bool(state.get("Paused")),
            exit_code=None if code is None else int(code),
        )

    async def run_hook(self, ref: ContainerRef, command: Sequence[str]) -> int:
        # Attached, not detached: Podman 4.3 reports a detached exec as running for ever.
        return (await self.session.exec(ref.id, command, f"pre_stop of {ref.name}")).exit_code

    async def address(self, pause_id: str) -> str | None:
        """Where the workload's network namespace is reached from here (see ``_netcheck``)."""
        try:
            with self.session.errors("inspect the pause container"):
                inspect = await self.session.show(pause_id)
        except WorkloadNotFound:
            return None
        return workload_address(inspect)

    @asynccontextmanager
    async def http_hooks_ahead(
        self, pause: ContainerRef, hooks: Sequence[tuple[int, str]]
    ) -> AsyncIterator[None]:
        """For the block, each of these HTTP hooks' probe started ahead (:class:`HookAhead`),
        for :meth:`run_http_hook` to send through; abandoned at the block's end (bounded)."""
        made = {
            (pause.id, port, path): HookAhead(
                self.inside, pause.workload, f"pre_stop_http of {pause.workload}"
            )
            for port, path in hooks
        }
        async with anyio.create_task_group() as tg:
            for ahead in made.values():
                tg.start_soon(ahead.run)
            self._ahead.update(made)
            try:
                yield
            finally:
                for key, ahead in made.items():
                    self._ahead.pop(key, None)
                    ahead.abandon()
                tg.cancel_scope.deadline = anyio.current_time() + ENGINE_BOUND

    async def run_http_hook(self, pause: ContainerRef, port: int, path: str) -> int:
        """``GET path`` on the workload's ``port``: 0 for a 2xx answer, else 1. Sent inside the
        workload's network namespace (``_inside``: its own loopback) — through the probe
        started ahead where there is one —, else from here to its address when nothing can
        run inside. Bounded by the caller (the drain's deadline), as an exec hook is."""
        ahead = self._ahead.pop((pause.id, port, path), None)
        if ahead is not None:
            try:
                return 0 if passes(await ahead.ask(port, path), high=300) else 1
            except NotAhead:
                pass  # nothing was sent: sent below, as without it
        with self.session.errors(f"list the containers of {pause.workload}"):
            members = await self.inside.members(pause.workload)
        if await self.inside.available(members):
            argv = probe_argv("http", port, float("inf"), path)
            answer = await self.inside.probe(members, argv, f"pre_stop_http of {pause.workload}")
            return 0 if passes(answer, high=300) else 1
        host = await self.address(pause.id)
        if host is None:
            return 1
        status = await http_get(host, port, path, timeout=float("inf"))
        return 0 if status is not None and 200 <= status < 300 else 1

    async def remove_volumes(self, plan_name: str) -> None:
        """Remove the volumes asyncdeploy created for this plan (never pre-existing ones, nor
        ones the plan keeps) that no container uses: a volume another instance of the plan
        still mounts (a replacement) is refused by the engine as in use, and stays."""
        found: dict[str, None] = {}
        # volumes made before the plan label carried the workload's name instead
        for label in (f"{LABEL_VOLUME_PLAN}={plan_name}", f"{LABEL_WORKLOAD}={plan_name}"):
            with self.session.errors(f"list volumes of {plan_name}"):
                listed = await self.session.volumes(label)
            found.update(dict.fromkeys(v["Name"] for v in listed))
        for name in found:
            try:
                await self.remove_volume(name)
            except (WorkloadNotFound, WorkloadConflict):
                pass  # gone already, or in use by another instance: removed with the last

    async def remove_volume(self, name: str) -> None:
        """Remove one volume (the drain's and the create's roll-back's one way to)."""
        with self.session.errors(f"remove volume {name}"):
            await self.session.remove_volume(name)


def _unsent_or_lost(exc: EngineUnavailable) -> EngineUnavailable:
    """``CallNotSent`` when no connection could be made (safe to send again); else the error
    as it is: the answer was lost, and the call may have landed."""
    cause: BaseException | None = exc.__cause__
    while cause is not None:  # aiodocker wraps the connector's error in its own (900)
        if isinstance(cause, _NEVER_SENT):
            return CallNotSent(exc.message, engine=exc.engine)
        cause = cause.__cause__ or cause.__context__
    return exc
