"""Podman through its Docker-compatible API socket, with its quirks.

- ``CONTAINER_HOST`` (Podman's own variable), else the rootless socket under
  ``$XDG_RUNTIME_DIR``, else the rootful ``/run/podman/podman.sock``.
- Podman answers 500 where Docker answers 409: killing a container that is not running
  ("container state improper"), a taken name ("already in use"), and removing a container whose
  namespaces others still use ("dependent containers"). These mean a conflict, not a failure.
- A container removed while a call on it runs gives 500 "no such container": it is missing.
- Podman answers 304 on stopping a stopped container and force-delete stops gracefully: the
  shared driver calls stop only for containers with a restart policy (below), and the drain
  SIGKILLs before a force-delete where nothing drains.
- A second pause is refused with "state improper" too: that is how a second delete sees that
  another one has claimed the drain.
- A container killed with its stop signal is restarted under its restart policy (only a stop
  call counts as stopped by the user): containers with a policy are stopped with a stop call
  bounded by the time left, the others with kill-then-wait (a stop call holds one of Podman's
  few API workers for the whole drain).
- The compatible kill and wait calls wait for the container's exec sessions (20 s when a
  ``pre_stop`` hook was cut off at the deadline) and for Podman's cleanup of the container:
  signals and waits go through the libpod endpoints instead.
- The compatible create refuses CDI device names (``HostConfig.Devices``) and ignores a
  ``DeviceRequests`` entry for the ``cdi`` driver: containers with devices are created through
  the libpod endpoint, from the same body translated by ``_libpod.py``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, ClassVar

import aiodocker
import anyio

from asyncdeploy.drivers.engine._api import EngineAPIDriver
from asyncdeploy.drivers.engine._libpod import libpod_spec
from asyncdeploy.drivers.engine._ops import ContainerRef
from asyncdeploy.drivers.registry import DRIVERS
from asyncdeploy.errors import CreateError, WorkloadNotFound

__all__ = ["PodmanDriver"]

ROOTFUL_SOCKET = "/run/podman/podman.sock"
KILL_POLL_SECONDS = 0.02
LIBPOD_API = "v4.0.0/libpod"  # the libpod API on the same socket; any v4 prefix is served
_CONFLICT_MESSAGES = ("state improper", "already in use", "dependent containers")


class PodmanDriver(EngineAPIDriver):
    name: ClassVar[str] = "podman"
    host_variable: ClassVar[str] = str(DRIVERS["podman"].address_variable)
    kill_triggers_restart: ClassVar[bool] = True  # only a stop call keeps the policy from acting

    @classmethod
    def discover_url(cls) -> str:
        if host := os.environ.get(cls.host_variable):
            return host
        runtime_dir = os.environ.get("XDG_RUNTIME_DIR")
        if runtime_dir and os.getuid() != 0:
            rootless = Path(runtime_dir, "podman", "podman.sock")
            if rootless.is_socket():
                return f"unix://{rootless}"
        return f"unix://{ROOTFUL_SOCKET}"

    async def _create_container(self, config: dict[str, Any], name: str) -> str:
        if not (config.get("HostConfig") or {}).get("Devices"):
            return await super()._create_container(config, name)
        try:
            body = libpod_spec(config, name)
        except ValueError as exc:
            raise CreateError(f"cannot create {name} with CDI devices on Podman: {exc}") from None
        answer = await self._client._query_json(
            f"{LIBPOD_API}/containers/create",
            method="POST",
            data=json.dumps(body),
            versioned_api=False,
        )
        return str(answer["Id"])

    async def _kill(self, ident: str, signal: str) -> None:
        """Through the libpod endpoint: the compatible one waits, after a SIGKILL, for the
        container's exec sessions to be cleaned up (20 s when a pre_stop hook was cut off)."""
        path = f"{LIBPOD_API}/containers/{ident}/kill"
        async with self._client._query(
            path, method="POST", params={"signal": signal}, versioned_api=False
        ):
            pass

    async def wait_exit(self, ref: ContainerRef) -> int | None:
        """Through the libpod endpoint, polling every 10 ms: the compatible wait returns only
        after Podman's per-container cleanup (about 0.2 s later for one container)."""
        path = f"{LIBPOD_API}/containers/{ref.id}/wait"
        params = {"condition": "stopped", "interval": "10ms"}
        with self._errors(f"wait for {ref.name}"):
            code = await self._client._query_json(
                path, method="POST", params=params, versioned_api=False
            )
        return None if code is None else int(code)

    async def wait_killed(self, ref: ContainerRef) -> int | None:
        """Poll the state: after a SIGKILL that cut a pre_stop hook off, every wait (compatible
        or libpod) blocks until the hook's exec session is cleaned up, 20 s later."""
        pause = KILL_POLL_SECONDS
        while True:
            look = await self.look(ref)
            if look is None:
                raise WorkloadNotFound(f"{ref.name} is gone", engine=self.name, status=404)
            if not look.running:
                return look.exit_code
            await anyio.sleep(pause)
            pause = min(pause * 2, 0.2)  # many containers: do not flood the API service

    def _missing(self, exc: aiodocker.DockerError) -> bool:
        """A container removed while the call ran: 500 "no such container" (another delete)."""
        return exc.status == 404 or (
            exc.status == 500 and "no such container" in str(exc.message).lower()
        )

    def _conflict(self, exc: aiodocker.DockerError) -> bool:
        if exc.status == 409:
            return True
        message = str(exc.message).lower()
        return exc.status == 500 and any(m in message for m in _CONFLICT_MESSAGES)
