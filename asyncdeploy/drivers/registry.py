"""The driver registry: one typed entry per driver, its class imported only when it is opened.

The one home of the driver names; the driver classes read their name and address variable here.

An entry says everything the deployer and the CLI need before the driver's client library is
loaded: the name, where the class lives, the extra that brings its library, the environment
variable that names its engine, and the options its ``connect`` takes. Reading the registry
imports no engine client (the CLI's start and engine detection stay cheap).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Literal, Protocol, get_args

import attrs

from asyncdeploy._errors import DriverNotFound, DriverNotInstalled

if TYPE_CHECKING:  # the contract's types: reading the registry loads no plan or event module
    from asyncdeploy.drivers.base import Driver

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

DriverName = Literal["docker", "podman", "kubernetes"]
AUTO_DETECT_ORDER: tuple[DriverName, ...] = get_args(DriverName)
"""The order in which engines are tried when nothing names one."""


class DriverClass(Protocol):
    """What the registry imports: a class whose ``connect`` opens a driver and pings its engine."""

    name: str

    async def connect(self, **options: Any) -> Driver: ...


@attrs.frozen(kw_only=True)
class DriverEntry:
    name: DriverName
    target: str  # "module:Class", imported on first use
    extra: str  # the pip extra, asyncdeploy[...], that brings the client library
    address_variable: str | None  # the environment variable that names this engine
    options: frozenset[str]  # the keyword options of the class's connect()

    def load(self) -> DriverClass:
        """The driver class; ``DriverNotInstalled`` (naming the extra) when its library is missing."""
        module_name, _, class_name = self.target.partition(":")
        try:
            # the class too: a package may load its driver on first use (drivers/engine does)
            driver_class: DriverClass = getattr(importlib.import_module(module_name), class_name)
        except ModuleNotFoundError as exc:
            if exc.name is None or exc.name.split(".")[0] == "asyncdeploy":
                raise
            raise DriverNotInstalled(self.name, self.extra, exc.name.split(".")[0]) from exc
        return driver_class

    def refuse_unknown(self, options: dict[str, Any]) -> None:
        unknown = sorted(set(options) - self.options)
        if unknown:
            raise TypeError(f"the {self.name} driver takes no option {', '.join(unknown)}")


_ENGINE_OPTIONS = frozenset({"url"})
_DOCKER_OPTIONS = _ENGINE_OPTIONS | {"docker_context"}  # a docker context by name
DRIVERS: dict[str, DriverEntry] = {
    entry.name: entry
    for entry in (
        DriverEntry(
            name="docker",
            target="asyncdeploy.drivers.engine:DockerDriver",
            extra="docker",
            address_variable="DOCKER_HOST",
            options=_DOCKER_OPTIONS,
        ),
        DriverEntry(
            name="podman",
            target="asyncdeploy.drivers.engine:PodmanDriver",
            extra="docker",  # Podman speaks the Engine API: aiodocker too
            address_variable="CONTAINER_HOST",
            options=_ENGINE_OPTIONS,
        ),
        DriverEntry(
            name="kubernetes",
            target="asyncdeploy.drivers.kubernetes:KubernetesDriver",
            extra="kubernetes",
            address_variable=None,
            options=frozenset(
                {
                    "kubeconfig",
                    "context",
                    "namespace",
                    "request_timeout",
                    "all_namespaces",
                    "drain_timeout",
                }
            ),
        ),
    )
}
DRIVER_NAMES: tuple[str, ...] = tuple(sorted(DRIVERS))
"""The names ``open_deployer`` and ``--driver`` accept."""


def driver_entry(name: str) -> DriverEntry:
    try:
        return DRIVERS[name]
    except KeyError:
        raise DriverNotFound(
            f"unknown driver {name!r}; choose one of {', '.join(DRIVER_NAMES)}"
        ) from None


async def connect_driver(name: str, **options: Any) -> Driver:
    """Open a driver by name and check that its engine answers (``EngineUnavailable`` if not)."""
    entry = driver_entry(name)
    entry.refuse_unknown(options)
    return await entry.load().connect(**options)
