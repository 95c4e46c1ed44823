"""asyncdeploy: deploy inference workloads to Docker, Podman and Kubernetes, and take them down
without losing a request."""

from __future__ import annotations

from asyncdeploy.deployer import Deployer, open_deployer
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

__version__ = "0.1.0"

__all__ = [
    "AsyncDeployError",
    "Autoheal",
    "Checks",
    "Container",
    "ContainerExited",
    "ContainerForceKilled",
    "ContainerOutcome",
    "ContainerRemoved",
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
    "EngineTimeout",
    "EngineUnavailable",
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
    "open_deployer",
]
