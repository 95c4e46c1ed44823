"""The engine calls of a drain (the ``ContainerOps`` of :mod:`._drain`) on the Engine API.

:class:`~._api.EngineAPIDriver` inherits them; Podman overrides the signal and the waits.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from typing import ClassVar

import aiodocker
import anyio

from asyncdeploy.drivers.engine import _spec as spec
from asyncdeploy.drivers.engine._exits import ExitWatch, watch_exits
from asyncdeploy.drivers.engine._ops import ContainerLook, ContainerRef
from asyncdeploy.errors import WorkloadConflict, WorkloadNotFound
from asyncdeploy.labels import LABEL_WORKLOAD
from asyncdeploy.results import ExecResult

__all__ = ["EngineContainerOps"]

REMOVAL_POLL_SECONDS = 0.05


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
        return True

    async def _kill(self, ident: str, signal: str) -> None:
        await self._client.containers.container(ident).kill(signal=signal)

    async def wait_exit(self, ref: ContainerRef) -> int | None:
        with self._errors(f"wait for {ref.name}"):
            result = await self._client.containers.container(ref.id).wait()
        code = result.get("StatusCode")
        return None if code is None else int(code)

    async def stop(self, ref: ContainerRef, timeout: float) -> int | None:
        with self._errors(f"stop {ref.name}"):
            handle = self._client.containers.container(ref.id)
            await handle.stop(t=max(0, int(timeout)))
            result = await handle.wait()
        code = result.get("StatusCode")
        return None if code is None else int(code)

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

    async def remove_volumes(self, workload: str) -> None:
        """Remove the volumes asyncdeploy created for this workload (never pre-existing ones)."""
        with self._errors(f"list volumes of {workload}"):
            found = await self._client.volumes.list(  # type: ignore[no-untyped-call]
                filters={"label": [f"{LABEL_WORKLOAD}={workload}"]}
            )
        for volume in found.get("Volumes") or []:
            try:
                with self._errors(f"remove volume {volume['Name']}"):
                    segment = spec.path_segment(volume["Name"])
                    volume_handle = aiodocker.volumes.DockerVolume(self._client, segment)  # type: ignore[no-untyped-call]
                    await volume_handle.delete()  # type: ignore[no-untyped-call]
            except WorkloadNotFound:
                pass
