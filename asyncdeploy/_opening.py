"""Opening a deployer: the driver the caller named, else the engine the environment names, else
the first that answers; asyncio only (the deployer's engine clients run on aiohttp)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Literal, overload

import anyio

from asyncdeploy._errors import (
    DriverNotInstalled,
    EngineUnavailable,
    NoDriverInstalled,
    UnsupportedEventLoop,
)
from asyncdeploy.deployer import Deployer
from asyncdeploy.drivers import (
    AUTO_DETECT_ORDER,
    DRIVER_NAMES,
    DRIVERS,
    DriverName,
    connect_driver,
    driver_entry,
)
from asyncdeploy.drivers.base import Driver
from asyncdeploy.drivers.engine._docker_config import current_context

__all__ = ["AUTO_DETECT_ORDER", "DRIVER_NAMES", "DriverName", "open_deployer"]


@overload
def open_deployer(
    driver: Literal["docker"], *, url: str | None = None, docker_context: str | None = None
) -> AbstractAsyncContextManager[Deployer]: ...


@overload
def open_deployer(
    driver: Literal["podman"], *, url: str | None = None
) -> AbstractAsyncContextManager[Deployer]: ...


@overload
def open_deployer(
    driver: Literal["kubernetes"],
    *,
    kubeconfig: str | None = None,
    context: str | None = None,
    namespace: str | None = None,
    request_timeout: float = 30.0,
    all_namespaces: bool = False,
    drain_timeout: float | None = None,
) -> AbstractAsyncContextManager[Deployer]: ...


@overload
def open_deployer(driver: None = None) -> AbstractAsyncContextManager[Deployer]: ...


def open_deployer(
    driver: DriverName | None = None, **options: Any
) -> AbstractAsyncContextManager[Deployer]:
    """Open a deployer on ``driver`` (``docker``, ``podman`` or ``kubernetes``).

    Options per driver: ``url`` for Docker and Podman (default: discovered, honouring
    ``DOCKER_HOST`` / ``CONTAINER_HOST``); ``docker_context`` for Docker (a docker context by
    name; default: ``DOCKER_CONTEXT``, else ``docker context use``'s, as the docker CLI);
    ``kubeconfig``, ``context``, ``namespace``,
    ``request_timeout``, ``all_namespaces`` (list and drain in every namespace),
    ``drain_timeout`` (how long a drain waits for its Pods to go, from its start: kubectl's
    ``delete --timeout``; a Pod whose containers all ended but which is still being torn down
    then is reported so, not as a failure) for Kubernetes.
    Without a name, an engine named by its address variable (``DOCKER_HOST``, else
    ``CONTAINER_HOST``) or by a current docker context is used, and ``EngineUnavailable`` raised when it does not answer;
    with neither set, the first engine of :data:`AUTO_DETECT_ORDER` that answers. Needs
    asyncio (see the module docstring).
    """
    return _open_deployer(driver, options)


@asynccontextmanager
async def _open_deployer(driver: str | None, options: Mapping[str, Any]) -> AsyncIterator[Deployer]:
    _require_asyncio()
    if driver is None:
        opened = await _first_answering(options)
    else:
        opened = await connect_driver(driver, **options)
    deployer = Deployer(opened)
    try:
        yield deployer
    finally:
        await deployer.aclose()  # shielded: a block ended by cancellation still closes it


def _require_asyncio() -> None:
    """Fail clearly, not with aiohttp's bare "no running event loop", outside asyncio."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        library = "this event loop"
        try:
            import sniffio

            library = sniffio.current_async_library()
        except (ImportError, RuntimeError):
            pass  # sniffio only names the library in the message
        raise UnsupportedEventLoop(
            f"the deployer needs asyncio, but it runs under {library}: its engine clients "
            "(aiodocker, kubernetes-asyncio) are asyncio-only; run it with asyncio.run() or "
            "anyio.run(..., backend='asyncio'). The server kit, asyncdeploy.workload, runs on both."
        ) from None


async def _first_answering(options: Mapping[str, Any]) -> Driver:
    candidates = await anyio.to_thread.run_sync(_named_by_environment) or AUTO_DETECT_ORDER
    reasons = []
    missing: list[DriverNotInstalled] = []
    for name in candidates:
        if not set(options) <= driver_entry(name).options:
            continue  # an option meant for another engine (url= is not a Kubernetes option)
        try:
            return await connect_driver(name, **options)
        except DriverNotInstalled as exc:
            if candidates is not AUTO_DETECT_ORDER:
                raise
            reasons.append(f"{name}: {exc}")
            missing.append(exc)
        except EngineUnavailable as exc:
            if candidates is not AUTO_DETECT_ORDER:
                raise  # the user named this engine: never fall back to another one
            reasons.append(f"{name}: {exc.message}")
    if missing and len(missing) == len(reasons):  # not one driver is installed: a usage error
        raise NoDriverInstalled(missing)
    raise EngineUnavailable(
        "no engine answers (" + "; ".join(reasons) + ")", engine="/".join(DRIVERS)
    )


def _named_by_environment() -> tuple[str, ...]:
    """The first engine whose address variable is set (``DOCKER_HOST``, ``CONTAINER_HOST``);
    Docker when a docker context is current (``DOCKER_CONTEXT``, ``docker context use``): the
    user chose that engine, so another one never answers in its place. Reads the docker
    configuration file: off the event loop."""
    for name in AUTO_DETECT_ORDER:
        variable = DRIVERS[name].address_variable
        if variable and os.environ.get(variable):
            return (name,)
        if name == "docker" and current_context(os.environ) is not None:
            return (name,)
    return ()
