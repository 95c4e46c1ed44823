"""``get NAME`` for people: one workload described (its containers, ports, checks, last events).

Pure: the status and the events come in, lines go out. ``inspect`` stays the engine's raw form.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from asyncdeploy._results import (
    DRAINING,
    ContainerStatus,
    PublishedPort,
    WorkloadEvent,
    WorkloadStatus,
)
from asyncdeploy.cli._states import age, state_text
from asyncdeploy.cli._table import render_table

__all__ = ["describe_workload"]


def describe_workload(status: WorkloadStatus, events: Sequence[WorkloadEvent] | None) -> list[str]:
    """The description's lines; ``events`` None when the engine could not be asked."""
    table, now = render_table, time.time()
    ready, runs = status.ready
    created = (
        "-"
        if status.created is None
        else f"{_when(status.created)} ({age(now - status.created)} ago)"
    )
    state = state_text(status, now)
    lines = [
        f"{status.name} ({status.driver}): {state}, grace {status.grace_period_seconds} s",
        f"Ready:       {ready}/{runs} run containers",
        f"Created:     {created}",
        *([f"Node:        {status.node}"] if status.node else []),  # Kubernetes: where it runs
        "Labels:      " + (", ".join(f"{k}={v}" for k, v in status.labels.items()) or "-"),
        "Ports:       " + (", ".join(_port(p) for p in status.ports) or "none published"),
        "Containers:",
    ]
    rows = [
        [
            c.role,
            c.name,
            c.state,
            _health(c),
            ",".join(c.checks) or "-",
            "-" if c.restarts is None else str(c.restarts),
            "-" if c.exit_code is None else str(c.exit_code),
            c.image,
        ]
        for c in status.containers
    ]
    header = ["ROLE", "NAME", "STATE", "HEALTH", "CHECKS", "RESTARTS", "EXIT", "IMAGE"]
    lines += [f"  {line}" for line in table(header, rows)]
    if events is None:
        lines.append("Events:      (the engine did not say)")
    elif not events:
        lines.append("Events:      none recorded")
    else:
        lines.append(f"Events (last {len(events)}):")
        ev_rows = [[_when(e.time), e.container or "-", e.action, e.message or ""] for e in events]
        lines += [f"  {line}" for line in table(["TIME", "CONTAINER", "EVENT", ""], ev_rows)]
    return lines


def _health(container: ContainerStatus) -> str:
    if container.health == DRAINING:
        return "draining (not ready: its drain has begun)"
    if container.health and not container.checks:
        return f"{container.health} (image's own check, not counted)"
    return container.health or ("-" if not container.checks else "not checked")


def _port(port: PublishedPort) -> str:
    if port.host_port is None:
        return f"{port} (not published on the host)"
    return str(port)


def _when(stamp: float) -> str:
    if not stamp:
        return "-"
    return time.strftime("%H:%M:%S", time.localtime(stamp))
