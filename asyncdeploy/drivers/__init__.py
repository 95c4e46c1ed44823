"""The driver registry: a name → an importable class, loaded only when asked for."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from asyncdeploy.drivers.base import Driver
from asyncdeploy.errors import DriverNotFound, DriverNotInstalled

__all__ = ["DRIVERS", "connect_driver"]

if TYPE_CHECKING:  # mypy checks every registered driver against the contract
    from asyncdeploy.drivers.engine import DockerDriver, PodmanDriver
    from asyncdeploy.drivers.kubernetes import KubernetesDriver

    _CONFORMING: tuple[type[Driver], ...] = (DockerDriver, PodmanDriver, KubernetesDriver)

DRIVERS: dict[str, str] = {
    "docker": "asyncdeploy.drivers.engine:DockerDriver",
    "podman": "asyncdeploy.drivers.engine:PodmanDriver",
    "kubernetes": "asyncdeploy.drivers.kubernetes:KubernetesDriver",
}
EXTRAS: dict[str, str] = {"docker": "docker", "podman": "docker", "kubernetes": "kubernetes"}
"""The pip extra (``asyncdeploy[...]``) that brings each driver's client library."""


def driver_class(name: str) -> Any:
    try:
        target = DRIVERS[name]
    except KeyError:
        raise DriverNotFound(
            f"unknown driver {name!r}; choose one of {', '.join(sorted(DRIVERS))}"
        ) from None
    module_name, _, class_name = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.split(".")[0] == "asyncdeploy":
            raise
        raise DriverNotInstalled(name, EXTRAS[name], exc.name.split(".")[0]) from exc
    return getattr(module, class_name)


async def connect_driver(name: str, **options: Any) -> Driver:
    """Open a driver by name and check that its engine answers (``EngineUnavailable`` if not)."""
    driver: Driver = await driver_class(name).connect(**options)
    return driver
