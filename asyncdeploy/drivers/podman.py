"""Podman through its Docker-compatible API socket, with its quirks.

- ``CONTAINER_HOST`` (Podman's own variable), else the rootless socket under
  ``$XDG_RUNTIME_DIR``, else the rootful ``/run/podman/podman.sock``.
- Podman answers 500 where Docker answers 409: killing a container that is not running
  ("container state improper"), a taken name ("already in use"), and removing a container whose
  namespaces others still use ("dependent containers"). These mean a conflict, not a failure.
- Podman answers 304 on stopping a stopped container and force-delete stops gracefully: the
  shared driver never calls stop, and it SIGKILLs before a force-delete where nothing drains.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import ClassVar

import aiodocker

from asyncdeploy.drivers._engine_api import EngineAPIDriver

__all__ = ["PodmanDriver"]

ROOTFUL_SOCKET = "/run/podman/podman.sock"
_CONFLICT_MESSAGES = ("state improper", "already in use", "dependent containers")


class PodmanDriver(EngineAPIDriver):
    name: ClassVar[str] = "podman"

    @classmethod
    def discover_url(cls) -> str:
        if host := os.environ.get("CONTAINER_HOST"):
            return host
        runtime_dir = os.environ.get("XDG_RUNTIME_DIR")
        if runtime_dir and os.getuid() != 0:
            rootless = Path(runtime_dir, "podman", "podman.sock")
            if rootless.is_socket():
                return f"unix://{rootless}"
        return f"unix://{ROOTFUL_SOCKET}"

    def _conflict(self, exc: aiodocker.DockerError) -> bool:
        if exc.status == 409:
            return True
        message = str(exc.message).lower()
        return exc.status == 500 and any(m in message for m in _CONFLICT_MESSAGES)
