"""The engine calls of a drain (the ``ContainerOps`` of :mod:`._drain`) on the Engine API.

:class:`~._api.EngineAPIDriver` inherits them; Podman overrides the signal and the waits.
"""

from __future__ import annotations

import math
import tarfile
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from typing import ClassVar

import aiodocker
import aiohttp
import anyio

from asyncdeploy.drivers.engine import _spec as spec
from asyncdeploy.drivers.engine._claim import CLAIM_FILE, ClaimRecord, pack, unpack
from asyncdeploy.drivers.engine._exits import ExitWatch, watch_exits
from asyncdeploy.drivers.engine._ops import CallNotSent, ContainerLook, ContainerRef
from asyncdeploy.errors import EngineUnavailable, WorkloadConflict, WorkloadNotFound
from asyncdeploy.labels import LABEL_VOLUME_PLAN, LABEL_WORKLOAD
from asyncdeploy.results import ExecResult

__all__ = ["EngineContainerOps"]

REMOVAL_POLL_SECONDS = 0.05
# Failures that mean the request never left: no connection could be made.
_NEVER_SENT = (aiohttp.ClientConnectorError, ConnectionRefusedError, FileNotFoundError)


class EngineContainerOps:
    """Exits, signal, wait, stop, remove, hook, claim and look, each translated by ``_errors``."""

    name: ClassVar[str]
    kill_triggers_restart: ClassVar[bool] = False  # Docker: a kill is a stop for restart policies
    _client: aiodocker.Docker
    url: str

    def _errors(self, what: str) -> AbstractContextManager[None]:
        raise NotImplementedError  # the driver's one translation of engine errors

    async def _exec(self, ident: str, command: Sequence[str], what: str) -> ExecResult:
        raise NotImplementedError

    def exits(self) -> AbstractAsyncContextManager[ExitWatch]:
        return watch_exits(self.url, api_version=self._client.api_version)

    async def signal(self, ref: ContainerRef, signal: str) -> bool:
        try:
            with self._errors(f"signal {ref.name}"):
                await self._kill(ref.id, signal)
        except WorkloadConflict:
            return False  # not running (Docker 409, Podman 500)
        except EngineUnavailable as exc:
            raise _unsent_or_lost(exc) from exc.__cause__
        return True

    async def _kill(self, ident: str, signal: str) -> None:
        await self._client.containers.container(ident).kill(signal=signal)

    async def wait_exit(self, ref: ContainerRef) -> int | None:
        with self._errors(f"wait for {ref.name}"):
            result = await self._client.containers.container(ref.id).wait()
        code = result.get("StatusCode")
        return None if code is None else int(code)

    async def stop(self, ref: ContainerRef, timeout: float) -> int | None:
        """The engine's stop, its kill delay rounded *up* to whole seconds and never 0 while
        time is left (``t=0`` is SIGKILL without the stop signal): the drain's own deadline
        SIGKILLs at the exact time; the engine's at most a second later."""
        try:
            with self._errors(f"stop {ref.name}"):
                handle = self._client.containers.container(ref.id)
                await handle.stop(t=max(1, math.ceil(timeout)) if timeout > 0 else 0)
        except EngineUnavailable as exc:
            raise _unsent_or_lost(exc) from exc.__cause__
        # Podman's waits block until a cut-off hook's exec session is cleaned up (20 s):
        # the same wait as after a kill, which polls its state there.
        return await self.wait_killed(ref)

    async def wait_killed(self, ref: ContainerRef) -> int | None:
        """Wait for a container just sent SIGKILL (Docker's wait returns as it dies)."""
        return await self.wait_exit(ref)

    async def remove(self, ref: ContainerRef) -> None:
        """Force-remove a stopped container (the drain has signalled it: Podman's force-delete
        of a running one would stop it gracefully first). A removal already in progress (Docker
        answers 409: another delete, or someone by hand) is waited for instead."""
        try:
            with self._errors(f"remove {ref.name}"):
                await self._client.containers.container(ref.id).delete(force=True, v=True)
        except WorkloadConflict as exc:
            if "already in progress" not in exc.message:
                raise
            while True:  # polled: the engines have no "removed" event to wait on here
                if await self.look(ref) is None:
                    return
                await anyio.sleep(REMOVAL_POLL_SECONDS)

    async def claim(self, pause: ContainerRef) -> bool:
        try:
            with self._errors(f"pause {pause.name}"):
                await self._client.containers.container(pause.id).pause()
        except WorkloadConflict:
            return False  # already paused (another delete drains it), or not running
        return True

    async def write_claim(self, pause: ContainerRef, record: ClaimRecord) -> None:
        # Both engines extract an archive into a paused (and a stopped) container.
        with self._errors(f"record the claim in {pause.name}"):
            await self._client.containers.container(pause.id).put_archive("/", pack(record))  # type: ignore[no-untyped-call]

    async def read_claim(self, pause: ContainerRef) -> ClaimRecord | None:
        try:
            with self._errors(f"read the claim in {pause.name}"):
                handle = self._client.containers.container(pause.id)
                return unpack(await handle.get_archive("/" + CLAIM_FILE))
        except WorkloadNotFound:
            return None  # no record (or no pause: the look says which)
        except tarfile.TarError:
            return None  # an empty answer: Podman, while the pause container is being removed

    async def look(self, ref: ContainerRef) -> ContainerLook | None:
        try:
            with self._errors(f"inspect {ref.name}"):
                state = (await self._client.containers.container(ref.id).show()).get("State")
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
        return (await self._exec(ref.id, command, f"pre_stop of {ref.name}")).exit_code

    async def remove_volumes(self, plan_name: str) -> None:
        """Remove the volumes asyncdeploy created for this plan (never pre-existing ones, nor
        ones the plan keeps) that no container uses: a volume another instance of the plan
        still mounts (a replacement) is refused by the engine as in use, and stays."""
        found: dict[str, None] = {}
        # volumes made before the plan label carried the workload's name instead
        for label in (f"{LABEL_VOLUME_PLAN}={plan_name}", f"{LABEL_WORKLOAD}={plan_name}"):
            with self._errors(f"list volumes of {plan_name}"):
                listed = await self._client.volumes.list(  # type: ignore[no-untyped-call]
                    filters={"label": [label]}
                )
            found.update(dict.fromkeys(v["Name"] for v in listed.get("Volumes") or []))
        for name in found:
            try:
                with self._errors(f"remove volume {name}"):
                    segment = spec.path_segment(name)
                    volume_handle = aiodocker.volumes.DockerVolume(self._client, segment)  # type: ignore[no-untyped-call]
                    await volume_handle.delete()  # type: ignore[no-untyped-call]
            except (WorkloadNotFound, WorkloadConflict):
                pass  # gone already, or in use by another instance: removed with the last


def _unsent_or_lost(exc: EngineUnavailable) -> EngineUnavailable:
    """``CallNotSent`` when no connection could be made (safe to send again); else the error
    as it is: the answer was lost, and the call may have landed."""
    cause: BaseException | None = exc.__cause__
    while cause is not None:  # aiodocker wraps the connector's error in its own (900)
        if isinstance(cause, _NEVER_SENT):
            return CallNotSent(exc.message, engine=exc.engine)
        cause = cause.__cause__ or cause.__context__
    return exc
