"""The driver registry: a name → an importable class, loaded only when asked for."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from asyncdeploy.drivers.base import Driver
from asyncdeploy.errors import DriverNotFound

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


def driver_class(name: str) -> Any:
    try:
        target = DRIVERS[name]
    except KeyError:
        raise DriverNotFound(
            f"unknown driver {name!r}; choose one of {', '.join(sorted(DRIVERS))}"
        ) from None
    module_name, _, class_name = target.partition(":")
    return getattr(importlib.import_module(module_name), class_name)


async def connect_driver(name: str, **options: Any) -> Driver:
    """Open a driver by name and check that its engine answers (``EngineUnavailable`` if not)."""
    driver: Driver = await driver_class(name).connect(**options)
    return driver
