"""Docker: the shared Engine API driver, found as the docker CLI finds its engine: an address
or a docker context named, ``DOCKER_HOST`` (with ``DOCKER_TLS_VERIFY``), the current docker
context, else the usual sockets (``_address``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import ClassVar, Self, cast

from asyncdeploy.drivers.engine._address import EngineAddress, docker_address
from asyncdeploy.drivers.engine._api import EngineAPIDriver
from asyncdeploy.drivers.registry import DRIVERS, driver_entry

__all__ = ["DockerDriver"]

SOCKETS = ("/var/run/docker.sock", "/run/docker.sock")


class DockerDriver(EngineAPIDriver):
    name: ClassVar[str] = "docker"
    host_variable: ClassVar[str] = str(DRIVERS["docker"].address_variable)

    @classmethod
    def discover_url(cls) -> str:
        """``DOCKER_HOST``, else the first Docker socket that exists, else the default one."""
        if host := os.environ.get(cls.host_variable):
            return host
        for path in (*SOCKETS, str(Path.home() / ".docker/run/docker.sock")):
            if Path(path).is_socket():
                return f"unix://{path}"
        return f"unix://{SOCKETS[0]}"

    @classmethod
    async def connect(cls, *, url: str | None = None, docker_context: str | None = None) -> Self:
        """Open the engine at ``url``, in the docker context named, else as the docker CLI
        finds it (``_address``), and check that it answers."""
        return await cls._connect(url, docker_context)

    @classmethod
    def find_address(cls, url: str | None, docker_context: str | None) -> EngineAddress:
        return docker_address(
            url, docker_context, environ=dict(os.environ), discovered=cls.discover_url()
        )

    @classmethod
    def _for_engine(cls, engine: str) -> type[EngineAPIDriver]:
        """Podman behind ``DOCKER_HOST`` is driven as Podman: the registry's Podman driver (this
        module does not import it; its quirks are in its session, ``_session.py``)."""
        if engine == "podman":
            return cast(type[EngineAPIDriver], driver_entry("podman").load())
        return cls
