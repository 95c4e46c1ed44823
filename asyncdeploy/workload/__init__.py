"""The drain kit inference servers embed: state machine, ASGI middleware, triggers, metrics.

Needs only anyio and attrs; :mod:`asyncdeploy.workload.runner` (uvicorn),
:mod:`asyncdeploy.workload.demo` and :mod:`asyncdeploy.workload.prometheus` (prometheus_client)
are imported explicitly. Nothing here installs signal handlers
or runs an event loop at import time.
"""

from __future__ import annotations

from asyncdeploy.durations import parse_duration

from .client import DrainReport, control_request, run_drain_command
from .control import serve_control_socket
from .errors import ControlSocketError, ControlSocketInUse, WorkloadError
from .histogram import HistogramSnapshot
from .metrics import METRICS_CONTENT_TYPE, MetricFamily, Sample, metric_families, render_metrics
from .middleware import DrainMiddleware, HealthPaths, sse_cut_frame
from .signals import RepeatedSigterm, SignalHandlers, TerminationRequest, install_sigterm_handler
from .state import (
    Admission,
    DrainController,
    DrainFlag,
    DrainState,
    DrainStatistics,
    RequestOutcome,
    StateChanged,
)
from .window import BalancerCheck, PropagationWindow, WindowClose

Outcome = RequestOutcome
"""The name :class:`RequestOutcome` had before it was told apart from the deployer's
``ContainerEnd`` (how a container ended); kept for servers written against it."""

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
