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
    "asyncdeploy.deployer": ("Deployer",),
    "asyncdeploy.drivers.registry": ("DRIVER_NAMES", "DriverName"),
    "asyncdeploy.drivers.base": ("Driver", "Found"),
    "asyncdeploy._errors": (
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
    "asyncdeploy._events": (
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
    "asyncdeploy.plan._fields": (
        "FrozenCounts",
        "FrozenMap",
    ),
    "asyncdeploy.plan._model": (
        "Container",
        "WorkloadPlan",
    ),
    "asyncdeploy.plan._parts": (
        "Autoheal",
        "Checks",
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
    ),
    "asyncdeploy.replace._run": ("ReplaceResult",),
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
    "asyncdeploy._results": (
        "ApplyResult",
        "ContainerStatus",
        "EngineInfo",
        "ExecResult",
        "PublishedPort",
        "WorkloadEvent",
        "WorkloadStatus",
    ),
    "asyncdeploy._selectors": ("Requirement", "Selector", "parse_selector"),
}
_HOMES = {name: module for module, names in _PUBLIC.items() for name in names}
__all__ = sorted(_HOMES)  # noqa: PLE0605 - made from the table, as the view below

if TYPE_CHECKING:  # the type checkers' view, written from _PUBLIC
    from asyncdeploy._errors import AsyncDeployError as AsyncDeployError
    from asyncdeploy._errors import CreateError as CreateError
    from asyncdeploy._errors import DrainError as DrainError
    from asyncdeploy._errors import DrainUnreachable as DrainUnreachable
    from asyncdeploy._errors import DriverNotFound as DriverNotFound
    from asyncdeploy._errors import DriverNotInstalled as DriverNotInstalled
    from asyncdeploy._errors import EngineAPIError as EngineAPIError
    from asyncdeploy._errors import EngineError as EngineError
    from asyncdeploy._errors import EngineTimeout as EngineTimeout
    from asyncdeploy._errors import EngineUnavailable as EngineUnavailable
    from asyncdeploy._errors import ExecInterrupted as ExecInterrupted
    from asyncdeploy._errors import NoDriverInstalled as NoDriverInstalled
    from asyncdeploy._errors import OperationTimeout as OperationTimeout
    from asyncdeploy._errors import PlanError as PlanError
    from asyncdeploy._errors import ReplaceFailed as ReplaceFailed
    from asyncdeploy._errors import ReplaceInProgress as ReplaceInProgress
    from asyncdeploy._errors import SelectorError as SelectorError
    from asyncdeploy._errors import UnsupportedEventLoop as UnsupportedEventLoop
    from asyncdeploy._errors import WorkloadConflict as WorkloadConflict
    from asyncdeploy._errors import WorkloadNotFound as WorkloadNotFound
    from asyncdeploy._events import ContainerEnd as ContainerEnd
    from asyncdeploy._events import ContainerExited as ContainerExited
    from asyncdeploy._events import ContainerForceKilled as ContainerForceKilled
    from asyncdeploy._events import ContainerOutcome as ContainerOutcome
    from asyncdeploy._events import ContainerRemoved as ContainerRemoved
    from asyncdeploy._events import DrainEvent as DrainEvent
    from asyncdeploy._events import DrainFinished as DrainFinished
    from asyncdeploy._events import DrainStarted as DrainStarted
    from asyncdeploy._events import DrainSummary as DrainSummary
    from asyncdeploy._events import Event as Event
    from asyncdeploy._events import NodeUnreachable as NodeUnreachable
    from asyncdeploy._events import PauseRemoved as PauseRemoved
    from asyncdeploy._events import PreStopFinished as PreStopFinished
    from asyncdeploy._events import PreStopStarted as PreStopStarted
    from asyncdeploy._events import PullEvent as PullEvent
    from asyncdeploy._events import PullFailed as PullFailed
    from asyncdeploy._events import PullFinished as PullFinished
    from asyncdeploy._events import PullProgress as PullProgress
    from asyncdeploy._events import PullStarted as PullStarted
    from asyncdeploy._events import SidecarRemoved as SidecarRemoved
    from asyncdeploy._events import SignalSent as SignalSent
    from asyncdeploy._events import TeardownPending as TeardownPending
    from asyncdeploy._events import TrafficLeft as TrafficLeft
    from asyncdeploy._events import TrafficStillRouted as TrafficStillRouted
    from asyncdeploy._events import event_to_dict as event_to_dict
    from asyncdeploy._opening import open_deployer as open_deployer
    from asyncdeploy._operations import CreateEvents as CreateEvents
    from asyncdeploy._operations import Drain as Drain
    from asyncdeploy._operations import Operation as Operation
    from asyncdeploy._operations import Replacement as Replacement
    from asyncdeploy._results import ApplyResult as ApplyResult
    from asyncdeploy._results import ContainerStatus as ContainerStatus
    from asyncdeploy._results import EngineInfo as EngineInfo
    from asyncdeploy._results import ExecResult as ExecResult
    from asyncdeploy._results import PublishedPort as PublishedPort
    from asyncdeploy._results import WorkloadEvent as WorkloadEvent
    from asyncdeploy._results import WorkloadStatus as WorkloadStatus
    from asyncdeploy._selectors import Requirement as Requirement
    from asyncdeploy._selectors import Selector as Selector
    from asyncdeploy._selectors import parse_selector as parse_selector
    from asyncdeploy.deployer import Deployer as Deployer
    from asyncdeploy.drivers.base import Driver as Driver
    from asyncdeploy.drivers.base import Found as Found
    from asyncdeploy.drivers.registry import DRIVER_NAMES as DRIVER_NAMES
    from asyncdeploy.drivers.registry import DriverName as DriverName
    from asyncdeploy.plan._fields import FrozenCounts as FrozenCounts
    from asyncdeploy.plan._fields import FrozenMap as FrozenMap
    from asyncdeploy.plan._model import Container as Container
    from asyncdeploy.plan._model import WorkloadPlan as WorkloadPlan
    from asyncdeploy.plan._parts import Autoheal as Autoheal
    from asyncdeploy.plan._parts import Checks as Checks
    from asyncdeploy.plan._parts import Gate as Gate
    from asyncdeploy.plan._parts import GateReady as GateReady
    from asyncdeploy.plan._parts import HTTPGet as HTTPGet
    from asyncdeploy.plan._parts import Mount as Mount
    from asyncdeploy.plan._parts import Port as Port
    from asyncdeploy.plan._parts import Probe as Probe
    from asyncdeploy.plan._parts import PullPolicy as PullPolicy
    from asyncdeploy.plan._parts import RegistryAuth as RegistryAuth
    from asyncdeploy.plan._parts import Resources as Resources
    from asyncdeploy.plan._parts import Service as Service
    from asyncdeploy.plan._parts import ServicePort as ServicePort
    from asyncdeploy.replace._run import ReplaceResult as ReplaceResult
    from asyncdeploy.replace.events import ReplaceDowntime as ReplaceDowntime
    from asyncdeploy.replace.events import ReplaceEvent as ReplaceEvent
    from asyncdeploy.replace.events import ReplaceReady as ReplaceReady
    from asyncdeploy.replace.events import ReplaceRestored as ReplaceRestored
    from asyncdeploy.replace.events import ReplaceRolledBack as ReplaceRolledBack
    from asyncdeploy.replace.events import ReplaceStrategy as ReplaceStrategy
    from asyncdeploy.replace.events import ReplaceWaiting as ReplaceWaiting
    from asyncdeploy.replace.events import Strategy as Strategy


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
