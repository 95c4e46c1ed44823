"""Podman through its Docker-compatible API socket, with its quirks.

- ``CONTAINER_HOST`` (Podman's own variable), else for a non-root user the rootless socket
  ``$XDG_RUNTIME_DIR/podman/podman.sock``, else (root) the rootful ``/run/podman/podman.sock``:
  the order of Podman's own tools.
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

The status codes, the libpod calls and the two flags are :class:`~._session.PodmanSession`'s
(a Docker driver whose socket turns out to be Podman's gets that session too); this module
finds the socket.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import ClassVar

from asyncdeploy.drivers.engine._api import EngineAPIDriver
from asyncdeploy.drivers.registry import DRIVERS

__all__ = ["PodmanDriver", "podman_socket"]

ROOTFUL_SOCKET = "/run/podman/podman.sock"


class PodmanDriver(EngineAPIDriver):
    name: ClassVar[str] = "podman"
    host_variable: ClassVar[str] = str(DRIVERS["podman"].address_variable)

    @classmethod
    def discover_url(cls) -> str:
        return podman_socket(os.environ, os.getuid())


def podman_socket(environ: Mapping[str, str], uid: int) -> str:
    """Where Podman's own tools look: ``CONTAINER_HOST``; else, for a non-root user, the
    rootless socket under ``$XDG_RUNTIME_DIR`` (``/run/user/UID`` when unset), whether or not
    its service runs yet (the error then names that socket); else the rootful one."""
    if host := environ.get(PodmanDriver.host_variable):
        return host
    if uid != 0:
        runtime_dir = environ.get("XDG_RUNTIME_DIR") or f"/run/user/{uid}"
        return f"unix://{Path(runtime_dir, 'podman', 'podman.sock')}"
    return f"unix://{ROOTFUL_SOCKET}"
