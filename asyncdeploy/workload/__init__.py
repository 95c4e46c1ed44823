"""The drain kit inference servers embed: state machine, ASGI middleware, triggers, metrics.

Needs only anyio and attrs; :mod:`asyncdeploy.workload.runner` (uvicorn),
:mod:`asyncdeploy.workload.demo` and :mod:`asyncdeploy.workload.prometheus` (prometheus_client)
are imported explicitly. Nothing here installs signal handlers
or runs an event loop at import time, and nothing is loaded before it is used: each name below
is imported on first use (PEP 562), so a server, or the drain gate's controller, pays at start
only for the parts it uses.
"""

from __future__ import annotations

import importlib as _importlib
import typing as _typing

#: each public name's home module (the one place a name is added)
_PUBLIC: dict[str, tuple[str, ...]] = {
    "asyncdeploy.durations": ("parse_duration",),
    "asyncdeploy.workload.client": (
        "DrainReport",
        "control_request",
        "run_drain_command",
    ),
    "asyncdeploy.workload.control": ("serve_control_socket",),
    "asyncdeploy.workload.errors": (
        "ControlSocketError",
        "ControlSocketInUse",
        "WorkloadError",
    ),
    "asyncdeploy.workload.histogram": ("HistogramSnapshot",),
    "asyncdeploy.workload.metrics": (
        "METRICS_CONTENT_TYPE",
        "MetricFamily",
        "Sample",
        "metric_families",
        "render_metrics",
    ),
    "asyncdeploy.workload.middleware": (
        "DrainMiddleware",
        "HealthPaths",
        "sse_cut_frame",
    ),
    "asyncdeploy.workload.signals": (
        "RepeatedSigterm",
        "SignalHandlers",
        "TerminationRequest",
        "install_sigterm_handler",
    ),
    "asyncdeploy.workload.state": (
        "Admission",
        "DrainController",
        "DrainFlag",
        "DrainState",
        "DrainStatistics",
        "RequestOutcome",
        "StateChanged",
    ),
    "asyncdeploy.workload.window": (
        "BalancerCheck",
        "PropagationWindow",
        "WindowClose",
    ),
}
_HOMES = {name: module for module, names in _PUBLIC.items() for name in names}
#: old names kept for servers written against them: the name each stands for
_ALIASES = {
    # the name RequestOutcome had before it was told apart from the deployer's ContainerEnd
    "Outcome": "RequestOutcome",
}

__all__ = [
    "METRICS_CONTENT_TYPE",
    "Admission",
    "BalancerCheck",
    "ControlSocketError",
    "ControlSocketInUse",
    "DrainController",
    "DrainFlag",
    "DrainMiddleware",
    "DrainReport",
    "DrainState",
    "DrainStatistics",
    "HealthPaths",
    "HistogramSnapshot",
    "MetricFamily",
    "Outcome",
    "PropagationWindow",
    "RepeatedSigterm",
    "RequestOutcome",
    "Sample",
    "SignalHandlers",
    "StateChanged",
    "TerminationRequest",
    "WindowClose",
    "WorkloadError",
    "control_request",
    "install_sigterm_handler",
    "metric_families",
    "parse_duration",
    "render_metrics",
    "run_drain_command",
    "serve_control_socket",
    "sse_cut_frame",
]

if _typing.TYPE_CHECKING:  # the type checkers' view, written from _PUBLIC
    from asyncdeploy.durations import parse_duration as parse_duration

    from .client import DrainReport as DrainReport
    from .client import control_request as control_request
    from .client import run_drain_command as run_drain_command
    from .control import serve_control_socket as serve_control_socket
    from .errors import ControlSocketError as ControlSocketError
    from .errors import ControlSocketInUse as ControlSocketInUse
    from .errors import WorkloadError as WorkloadError
    from .histogram import HistogramSnapshot as HistogramSnapshot
    from .metrics import METRICS_CONTENT_TYPE as METRICS_CONTENT_TYPE
    from .metrics import MetricFamily as MetricFamily
    from .metrics import Sample as Sample
    from .metrics import metric_families as metric_families
    from .metrics import render_metrics as render_metrics
    from .middleware import DrainMiddleware as DrainMiddleware
    from .middleware import HealthPaths as HealthPaths
    from .middleware import sse_cut_frame as sse_cut_frame
    from .signals import RepeatedSigterm as RepeatedSigterm
    from .signals import SignalHandlers as SignalHandlers
    from .signals import TerminationRequest as TerminationRequest
    from .signals import install_sigterm_handler as install_sigterm_handler
    from .state import Admission as Admission
    from .state import DrainController as DrainController
    from .state import DrainFlag as DrainFlag
    from .state import DrainState as DrainState
    from .state import DrainStatistics as DrainStatistics
    from .state import RequestOutcome as RequestOutcome
    from .state import StateChanged as StateChanged
    from .window import BalancerCheck as BalancerCheck
    from .window import PropagationWindow as PropagationWindow
    from .window import WindowClose as WindowClose

    Outcome = RequestOutcome


def __getattr__(name: str) -> _typing.Any:
    home = _ALIASES.get(name, name)
    try:
        module = _HOMES[home]
    except KeyError:
        raise AttributeError(f"module 'asyncdeploy.workload' has no attribute {name!r}") from None
    value = getattr(_importlib.import_module(module), home)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
