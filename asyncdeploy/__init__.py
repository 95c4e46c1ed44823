"""asyncdeploy: deploy inference workloads to Docker, Podman and Kubernetes, and take them down
without losing a request."""

from __future__ import annotations

from asyncdeploy.deployer import DRIVER_NAMES, Deployer, open_deployer
from asyncdeploy.errors import (
    AsyncDeployError,
    CreateError,
    DrainError,
    DriverNotFound,
    EngineAPIError,
    EngineError,
    EngineTimeout,
    EngineUnavailable,
    PlanError,
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
    PauseRemoved,
    PreStopFinished,
    PreStopStarted,
    SidecarRemoved,
    SignalSent,
)
from asyncdeploy.plan import (
    Autoheal,
    Checks,
    Container,
    HTTPGet,
    Mount,
    Port,
    Probe,
    Resources,
    WorkloadPlan,
)
from asyncdeploy.results import (
    ApplyResult,
    ContainerStatus,
    EngineInfo,
    ExecResult,
    WorkloadStatus,
)

__version__ = "0.1.0"

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
    "Deployer",
    "DrainError",
    "DrainEvent",
    "DrainFinished",
    "DrainStarted",
    "DrainSummary",
    "DriverNotFound",
    "EngineAPIError",
    "EngineError",
    "EngineInfo",
    "EngineTimeout",
    "EngineUnavailable",
    "ExecResult",
    "HTTPGet",
    "Mount",
    "PauseRemoved",
    "PlanError",
    "Port",
    "PreStopFinished",
    "PreStopStarted",
    "Probe",
    "Resources",
    "SidecarRemoved",
    "SignalSent",
    "WorkloadConflict",
    "WorkloadNotFound",
    "WorkloadPlan",
    "WorkloadStatus",
    "open_deployer",
]
