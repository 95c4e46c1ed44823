"""Docker: the shared Engine API driver, found through ``DOCKER_HOST`` or the usual sockets."""

from __future__ import annotations

import os
from pathlib import Path
from typing import ClassVar

from asyncdeploy.drivers.engine._api import EngineAPIDriver
from asyncdeploy.drivers.registry import DRIVERS

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
    def _for_engine(cls, engine: str) -> type[EngineAPIDriver]:
        if engine == "podman":
            from asyncdeploy.drivers.engine._podman import PodmanDriver

            return PodmanDriver
        return cls
