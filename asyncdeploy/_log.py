"""Deployer-side logging: every drain event also becomes one record on the ``asyncdeploy`` logger.

Quiet by default (the library adds only a ``NullHandler``); the CLI's ``-v`` shows INFO and
``-vv`` DEBUG on stderr. Each record carries the event's fields as attributes (through
``extra=``): always ``event`` (its type's name), ``workload``, ``container`` and ``role`` (None
for workload-wide events) and ``elapsed``, plus the event's own (``signal``, ``exit_code``, ...),
so a JSON log formatter gets structured data without parsing messages.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from asyncdeploy._events import (
    ContainerExited,
    ContainerForceKilled,
    ContainerRemoved,
    DrainEvent,
    DrainFinished,
    DrainStarted,
    NodeUnreachable,
    PauseRemoved,
    PreStopFinished,
    PreStopStarted,
    SidecarRemoved,
    SignalSent,
    TeardownPending,
    TrafficLeft,
    TrafficStillRouted,
    event_to_dict,
)

__all__ = ["configure_cli_logging", "log_event", "logger"]

logger = logging.getLogger("asyncdeploy")
logger.addHandler(logging.NullHandler())


def _describe(event: DrainEvent) -> tuple[int, str]:
    """The level and the message of one event (pure)."""
    match event:
        case DrainStarted():
            names = ", ".join(event.containers)
            return logging.INFO, f"drain started, grace {event.grace_period_seconds} s: {names}"
        case SidecarRemoved():
            return logging.DEBUG, "autoheal sidecar removed"
        case PreStopStarted():
            return logging.DEBUG, "pre_stop hook started"
        case PreStopFinished(timed_out=True):
            return logging.WARNING, "pre_stop hook cut off at the deadline"
        case PreStopFinished(exit_code=0):
            return logging.INFO, "pre_stop hook exited 0"
        case PreStopFinished():
            return logging.WARNING, f"pre_stop hook failed (exit {event.exit_code})"
        case SignalSent():
            return logging.INFO, f"{event.signal} sent"
        case ContainerExited(graceful=True):
            return logging.INFO, f"exited {event.exit_code}"
        case ContainerExited():
            return logging.WARNING, f"exited {event.exit_code} after a kill"
        case ContainerForceKilled():
            return logging.WARNING, f"SIGKILL sent ({event.reason})"
        case ContainerRemoved():
            return logging.DEBUG, "removed"
        case PauseRemoved():
            return logging.DEBUG, "pause container removed"
        case TrafficLeft():
            return logging.INFO, f"left the ready endpoints of {', '.join(event.services)}"
        case TrafficStillRouted():
            return (
                logging.WARNING,
                f"still a ready endpoint of {', '.join(event.services)} after {event.window:g} s",
            )
        case TeardownPending():
            return logging.WARNING, f"still being torn down {event.timeout:g} s into the drain"
        case NodeUnreachable():
            return (
                logging.ERROR,
                f"node {event.node} stopped reporting; pod {event.pod} stays: {event.remedy}",
            )
        case DrainFinished():
            summary = event.summary
            counts = ", ".join(
                f"{summary.count(outcome)} {outcome}"
                for outcome in ("exited", "killed", "already-exited", "missing")
                if summary.count(outcome)
            )
            if summary.errors:
                errors = "; ".join(summary.errors)
                return logging.ERROR, f"drain failed after {summary.seconds:.3f} s: {errors}"
            return logging.INFO, f"drained in {summary.seconds:.3f} s ({counts or 'no containers'})"


def log_event(event: DrainEvent) -> None:
    """Log one drain event (cheap when nobody listens)."""
    level, message = _describe(event)
    if not logger.isEnabledFor(level):
        return
    fields: dict[str, Any] = {"container": None, "role": None, **event_to_dict(event)}
    subject = (
        event.workload if fields["container"] is None else f"{event.workload}/{fields['container']}"
    )
    logger.log(level, "%s: %s (+%.3f s)", subject, message, event.elapsed, extra=fields)


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to the ``sys.stderr`` of the moment (click's test runner swaps it)."""

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)


def configure_cli_logging(verbosity: int) -> None:
    """``-v``: INFO records of the ``asyncdeploy`` loggers on stderr; ``-vv``: DEBUG too."""
    for handler in [h for h in logger.handlers if isinstance(h, _StderrHandler)]:
        logger.removeHandler(handler)
    if verbosity <= 0:
        logger.setLevel(logging.NOTSET)
        return
    handler = _StderrHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO if verbosity == 1 else logging.DEBUG)
