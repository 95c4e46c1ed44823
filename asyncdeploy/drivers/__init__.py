"""The drivers: the contract (:mod:`.base`), the registry (:mod:`.registry`), and one package per
kind of engine (``engine`` for Docker and Podman, ``kubernetes``), imported only when opened."""

from __future__ import annotations

from asyncdeploy.drivers.registry import (
    AUTO_DETECT_ORDER,
    DRIVER_NAMES,
    DRIVERS,
    DriverClass,
    DriverEntry,
    DriverName,
    connect_driver,
    driver_entry,
)

__all__ = [
    "AUTO_DETECT_ORDER",
    "DRIVERS",
    "DRIVER_NAMES",
    "DriverClass",
    "DriverEntry",
    "DriverName",
    "connect_driver",
    "driver_entry",
]
