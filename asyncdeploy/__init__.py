"""asyncdeploy: deploy inference workloads to Docker, Podman and Kubernetes, and take them down
without losing a request.

The names below are loaded on first use (PEP 562): ``import asyncdeploy.workload`` (the server
kit) and the CLI's start load none of the deployer, the drivers or an engine client.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from asyncdeploy._opening import open_deployer
    from asyncdeploy.deployer import (
        CreateEvents,
        Deployer,
        Replacement,
        ReplaceResult,
    )
    from asyncdeploy.drivers import DRIVER_NAMES, DriverName
    from asyncdeploy.errors import (
        AsyncDeployError,
        CreateError,
        DrainError,
        DrainUnreachable,
        DriverNotFound,
        DriverNotInstalled,
        EngineAPIError,
        EngineError,
        EngineTimeout,
        EngineUnavailable,
        NoDriverInstalled,
        PlanError,
        ReplaceFailed,
        ReplaceInProgress,
        SelectorError,
        UnsupportedEventLoop,
        WorkloadConflict,
        WorkloadNotFound,
    )
    from asyncdeploy.events import (
        ContainerExited,
        ContainerForceKilled,
        ContainerOutcome,
        ContainerRemoved,
        DrainEvent,
        DrainFinished,
        DrainStarted,
        DrainSummary,
        Event,
        PauseRemoved,
        PreStopFinished,
        PreStopStarted,
        PullEvent,
        PullFailed,
        PullFinished,
        PullProgress,
        PullStarted,
        SidecarRemoved,
        SignalSent,
        TrafficLeft,
        TrafficStillRouted,
    )
    from asyncdeploy.plan import (
        Autoheal,
        Checks,
        Container,
        HTTPGet,
        Mount,
        Port,
        Probe,
        PullPolicy,
        RegistryAuth,
        Resources,
        WorkloadPlan,
    )
    from asyncdeploy.results import (
        ApplyResult,
        ContainerStatus,
        EngineInfo,
        ExecResult,
        PublishedPort,
        WorkloadEvent,
        WorkloadStatus,
    )
    from asyncdeploy.selectors import (
        Selector,
        parse_selector,
    )

_HOMES: dict[str, str] = {
    "DRIVER_NAMES": "asyncdeploy.drivers",
    "DriverName": "asyncdeploy.drivers",
    "open_deployer": "asyncdeploy._opening",
    "CreateEvents": "asyncdeploy.deployer",
    "Deployer": "asyncdeploy.deployer",
    "Replacement": "asyncdeploy.deployer",
    "ReplaceResult": "asyncdeploy.deployer",
    "AsyncDeployError": "asyncdeploy.errors",
    "CreateError": "asyncdeploy.errors",
    "DrainError": "asyncdeploy.errors",
    "DrainUnreachable": "asyncdeploy.errors",
    "DriverNotFound": "asyncdeploy.errors",
    "DriverNotInstalled": "asyncdeploy.errors",
    "NoDriverInstalled": "asyncdeploy.errors",
    "EngineAPIError": "asyncdeploy.errors",
    "EngineError": "asyncdeploy.errors",
    "EngineTimeout": "asyncdeploy.errors",
    "EngineUnavailable": "asyncdeploy.errors",
    "PlanError": "asyncdeploy.errors",
    "ReplaceFailed": "asyncdeploy.errors",
    "ReplaceInProgress": "asyncdeploy.errors",
    "SelectorError": "asyncdeploy.errors",
    "UnsupportedEventLoop": "asyncdeploy.errors",
    "WorkloadConflict": "asyncdeploy.errors",
    "WorkloadNotFound": "asyncdeploy.errors",
    "ContainerExited": "asyncdeploy.events",
    "ContainerForceKilled": "asyncdeploy.events",
    "ContainerOutcome": "asyncdeploy.events",
    "ContainerRemoved": "asyncdeploy.events",
    "DrainEvent": "asyncdeploy.events",
    "DrainFinished": "asyncdeploy.events",
    "DrainStarted": "asyncdeploy.events",
    "DrainSummary": "asyncdeploy.events",
    "Event": "asyncdeploy.events",
    "PauseRemoved": "asyncdeploy.events",
    "PreStopFinished": "asyncdeploy.events",
    "PreStopStarted": "asyncdeploy.events",
    "SidecarRemoved": "asyncdeploy.events",
    "SignalSent": "asyncdeploy.events",
    "TrafficLeft": "asyncdeploy.events",
    "TrafficStillRouted": "asyncdeploy.events",
    "Autoheal": "asyncdeploy.plan",
    "Checks": "asyncdeploy.plan",
    "Container": "asyncdeploy.plan",
    "HTTPGet": "asyncdeploy.plan",
    "Mount": "asyncdeploy.plan",
    "Port": "asyncdeploy.plan",
    "Probe": "asyncdeploy.plan",
    "PullPolicy": "asyncdeploy.plan",
    "RegistryAuth": "asyncdeploy.plan",
    "Resources": "asyncdeploy.plan",
    "WorkloadPlan": "asyncdeploy.plan",
    "PullEvent": "asyncdeploy.events",
    "PullFailed": "asyncdeploy.events",
    "PullFinished": "asyncdeploy.events",
    "PullProgress": "asyncdeploy.events",
    "PullStarted": "asyncdeploy.events",
    "ApplyResult": "asyncdeploy.results",
    "ContainerStatus": "asyncdeploy.results",
    "EngineInfo": "asyncdeploy.results",
    "ExecResult": "asyncdeploy.results",
    "PublishedPort": "asyncdeploy.results",
    "WorkloadEvent": "asyncdeploy.results",
    "WorkloadStatus": "asyncdeploy.results",
    "Selector": "asyncdeploy.selectors",
    "parse_selector": "asyncdeploy.selectors",
}

__all__ = [
    "DRIVER_NAMES",
    "ApplyResult",
    "AsyncDeployError",
    "Autoheal",
    "Checks",
    "Container",
    "ContainerExited",
    "ContainerForceKilled",
    "ContainerOutcome",
    "ContainerRemoved",
    "ContainerStatus",
    "CreateError",
    "CreateEvents",
    "Deployer",
    "DrainError",
    "DrainEvent",
    "DrainFinished",
    "DrainStarted",
    "DrainSummary",
    "DrainUnreachable",
    "DriverName",
    "DriverNotFound",
    "DriverNotInstalled",
    "EngineAPIError",
    "EngineError",
    "EngineInfo",
    "EngineTimeout",
    "EngineUnavailable",
    "Event",
    "ExecResult",
    "HTTPGet",
    "Mount",
    "NoDriverInstalled",
    "PauseRemoved",
    "PlanError",
    "Port",
    "PreStopFinished",
    "PreStopStarted",
    "Probe",
    "PublishedPort",
    "PullEvent",
    "PullFailed",
    "PullFinished",
    "PullPolicy",
    "PullProgress",
    "PullStarted",
    "RegistryAuth",
    "ReplaceFailed",
    "ReplaceInProgress",
    "ReplaceResult",
    "Replacement",
    "Resources",
    "Selector",
    "SelectorError",
    "SidecarRemoved",
    "SignalSent",
    "TrafficLeft",
    "TrafficStillRouted",
    "UnsupportedEventLoop",
    "WorkloadConflict",
    "WorkloadEvent",
    "WorkloadNotFound",
    "WorkloadPlan",
    "WorkloadStatus",
    "open_deployer",
    "parse_selector",
]


def __getattr__(name: str) -> Any:
    try:
        module = _HOMES[name]
    except KeyError:
        raise AttributeError(f"module 'asyncdeploy' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_HOMES])
