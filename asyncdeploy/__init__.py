"""asyncdeploy: deploy inference workloads to Docker, Podman and Kubernetes, and take them down
without losing a request.

The names below are loaded on first use (PEP 562): ``import asyncdeploy.workload`` (the server
kit) and the CLI's start load none of the deployer, the drivers or an engine client.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# The public names, by the module each lives in: the one table. ``__all__`` and the lazy look-up
# are made from it here; the type checkers' view below is written from it and held to it by
# tests/unit/test_public_table.py (``python tests/unit/test_public_table.py`` rewrites it).
_PUBLIC: dict[str, tuple[str, ...]] = {
    "asyncdeploy._opening": ("open_deployer",),
    "asyncdeploy._operations": ("CreateEvents", "Drain", "Operation", "Replacement"),
    "asyncdeploy.deployer": ("Deployer", "ReplaceResult"),
    "asyncdeploy.drivers": ("DRIVER_NAMES", "DriverName"),
    "asyncdeploy.drivers.base": ("Driver", "Found"),
    "asyncdeploy.errors": (
        "AsyncDeployError",
        "CreateError",
        "DrainError",
        "DrainUnreachable",
        "DriverNotFound",
        "DriverNotInstalled",
        "EngineAPIError",
        "EngineError",
        "EngineTimeout",
        "EngineUnavailable",
        "ExecInterrupted",
        "NoDriverInstalled",
        "OperationTimeout",
        "PlanError",
        "ReplaceFailed",
        "ReplaceInProgress",
        "SelectorError",
        "UnsupportedEventLoop",
        "WorkloadConflict",
        "WorkloadNotFound",
    ),
    "asyncdeploy.events": (
        "ContainerEnd",
        "ContainerExited",
        "ContainerForceKilled",
        "ContainerOutcome",
        "ContainerRemoved",
        "DrainEvent",
        "DrainFinished",
        "DrainStarted",
        "DrainSummary",
        "Event",
        "NodeUnreachable",
        "PauseRemoved",
        "PreStopFinished",
        "PreStopStarted",
        "PullEvent",
        "PullFailed",
        "PullFinished",
        "PullProgress",
        "PullStarted",
        "SidecarRemoved",
        "SignalSent",
        "TeardownPending",
        "TrafficLeft",
        "TrafficStillRouted",
        "event_to_dict",
    ),
    "asyncdeploy.plan": (
        "Autoheal",
        "Checks",
        "Container",
        "FrozenCounts",
        "FrozenMap",
        "Gate",
        "GateReady",
        "HTTPGet",
        "Mount",
        "Port",
        "Probe",
        "PullPolicy",
        "RegistryAuth",
        "Resources",
        "Service",
        "ServicePort",
        "WorkloadPlan",
    ),
    "asyncdeploy.replace.events": (
        "ReplaceDowntime",
        "ReplaceEvent",
        "ReplaceReady",
        "ReplaceRestored",
        "ReplaceRolledBack",
        "ReplaceStrategy",
        "ReplaceWaiting",
        "Strategy",
    ),
    "asyncdeploy.results": (
        "ApplyResult",
        "ContainerStatus",
        "EngineInfo",
        "ExecResult",
        "PublishedPort",
        "WorkloadEvent",
        "WorkloadStatus",
    ),
    "asyncdeploy.selectors": ("Requirement", "Selector", "parse_selector"),
}
_HOMES = {name: module for module, names in _PUBLIC.items() for name in names}
__all__ = sorted(_HOMES)  # noqa: PLE0605 - made from the table, as the view below

if TYPE_CHECKING:  # the type checkers' view, written from _PUBLIC
    from asyncdeploy._opening import open_deployer as open_deployer
    from asyncdeploy._operations import CreateEvents as CreateEvents
    from asyncdeploy._operations import Drain as Drain
    from asyncdeploy._operations import Operation as Operation
    from asyncdeploy._operations import Replacement as Replacement
    from asyncdeploy.deployer import Deployer as Deployer
    from asyncdeploy.deployer import ReplaceResult as ReplaceResult
    from asyncdeploy.drivers import DRIVER_NAMES as DRIVER_NAMES
    from asyncdeploy.drivers import DriverName as DriverName
    from asyncdeploy.drivers.base import Driver as Driver
    from asyncdeploy.drivers.base import Found as Found
    from asyncdeploy.errors import AsyncDeployError as AsyncDeployError
    from asyncdeploy.errors import CreateError as CreateError
    from asyncdeploy.errors import DrainError as DrainError
    from asyncdeploy.errors import DrainUnreachable as DrainUnreachable
    from asyncdeploy.errors import DriverNotFound as DriverNotFound
    from asyncdeploy.errors import DriverNotInstalled as DriverNotInstalled
    from asyncdeploy.errors import EngineAPIError as EngineAPIError
    from asyncdeploy.errors import EngineError as EngineError
    from asyncdeploy.errors import EngineTimeout as EngineTimeout
    from asyncdeploy.errors import EngineUnavailable as EngineUnavailable
    from asyncdeploy.errors import ExecInterrupted as ExecInterrupted
    from asyncdeploy.errors import NoDriverInstalled as NoDriverInstalled
    from asyncdeploy.errors import OperationTimeout as OperationTimeout
    from asyncdeploy.errors import PlanError as PlanError
    from asyncdeploy.errors import ReplaceFailed as ReplaceFailed
    from asyncdeploy.errors import ReplaceInProgress as ReplaceInProgress
    from asyncdeploy.errors import SelectorError as SelectorError
    from asyncdeploy.errors import UnsupportedEventLoop as UnsupportedEventLoop
    from asyncdeploy.errors import WorkloadConflict as WorkloadConflict
    from asyncdeploy.errors import WorkloadNotFound as WorkloadNotFound
    from asyncdeploy.events import ContainerEnd as ContainerEnd
    from asyncdeploy.events import ContainerExited as ContainerExited
    from asyncdeploy.events import ContainerForceKilled as ContainerForceKilled
    from asyncdeploy.events import ContainerOutcome as ContainerOutcome
    from asyncdeploy.events import ContainerRemoved as ContainerRemoved
    from asyncdeploy.events import DrainEvent as DrainEvent
    from asyncdeploy.events import DrainFinished as DrainFinished
    from asyncdeploy.events import DrainStarted as DrainStarted
    from asyncdeploy.events import DrainSummary as DrainSummary
    from asyncdeploy.events import Event as Event
    from asyncdeploy.events import NodeUnreachable as NodeUnreachable
    from asyncdeploy.events import PauseRemoved as PauseRemoved
    from asyncdeploy.events import PreStopFinished as PreStopFinished
    from asyncdeploy.events import PreStopStarted as PreStopStarted
    from asyncdeploy.events import PullEvent as PullEvent
    from asyncdeploy.events import PullFailed as PullFailed
    from asyncdeploy.events import PullFinished as PullFinished
    from asyncdeploy.events import PullProgress as PullProgress
    from asyncdeploy.events import PullStarted as PullStarted
    from asyncdeploy.events import SidecarRemoved as SidecarRemoved
    from asyncdeploy.events import SignalSent as SignalSent
    from asyncdeploy.events import TeardownPending as TeardownPending
    from asyncdeploy.events import TrafficLeft as TrafficLeft
    from asyncdeploy.events import TrafficStillRouted as TrafficStillRouted
    from asyncdeploy.events import event_to_dict as event_to_dict
    from asyncdeploy.plan import Autoheal as Autoheal
    from asyncdeploy.plan import Checks as Checks
    from asyncdeploy.plan import Container as Container
    from asyncdeploy.plan import FrozenCounts as FrozenCounts
    from asyncdeploy.plan import FrozenMap as FrozenMap
    from asyncdeploy.plan import Gate as Gate
    from asyncdeploy.plan import GateReady as GateReady
    from asyncdeploy.plan import HTTPGet as HTTPGet
    from asyncdeploy.plan import Mount as Mount
    from asyncdeploy.plan import Port as Port
    from asyncdeploy.plan import Probe as Probe
    from asyncdeploy.plan import PullPolicy as PullPolicy
    from asyncdeploy.plan import RegistryAuth as RegistryAuth
    from asyncdeploy.plan import Resources as Resources
    from asyncdeploy.plan import Service as Service
    from asyncdeploy.plan import ServicePort as ServicePort
    from asyncdeploy.plan import WorkloadPlan as WorkloadPlan
    from asyncdeploy.replace.events import ReplaceDowntime as ReplaceDowntime
    from asyncdeploy.replace.events import ReplaceEvent as ReplaceEvent
    from asyncdeploy.replace.events import ReplaceReady as ReplaceReady
    from asyncdeploy.replace.events import ReplaceRestored as ReplaceRestored
    from asyncdeploy.replace.events import ReplaceRolledBack as ReplaceRolledBack
    from asyncdeploy.replace.events import ReplaceStrategy as ReplaceStrategy
    from asyncdeploy.replace.events import ReplaceWaiting as ReplaceWaiting
    from asyncdeploy.replace.events import Strategy as Strategy
    from asyncdeploy.results import ApplyResult as ApplyResult
    from asyncdeploy.results import ContainerStatus as ContainerStatus
    from asyncdeploy.results import EngineInfo as EngineInfo
    from asyncdeploy.results import ExecResult as ExecResult
    from asyncdeploy.results import PublishedPort as PublishedPort
    from asyncdeploy.results import WorkloadEvent as WorkloadEvent
    from asyncdeploy.results import WorkloadStatus as WorkloadStatus
    from asyncdeploy.selectors import Requirement as Requirement
    from asyncdeploy.selectors import Selector as Selector
    from asyncdeploy.selectors import parse_selector as parse_selector


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
