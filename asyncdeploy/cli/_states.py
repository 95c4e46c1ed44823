"""A workload's state in the words a kubectl user reads (pure): the STATE, READY and AGE columns
of ``list`` and ``get``, and the same fields in their JSON.

- STATE: why a dead deployer left it unfinished (``half-made``, ``half-drained``: see
  ``reconcile``), else ``draining (12s left)`` while a drain runs (kubectl's Terminating),
  else the workload's state (``running``, ``exited``, ``creating`` ...);
- READY: run containers ready, of how many (:attr:`WorkloadStatus.ready`);
- AGE: since it was created, as kubectl writes it (``45s``, ``3m20s``, ``5h``, ``4d``).
"""

from __future__ import annotations

import datetime
import math
from typing import Any

import attrs

from asyncdeploy._results import WorkloadStatus

__all__ = ["age", "ready_text", "state_text", "status_dict"]


def state_text(status: WorkloadStatus, now: float) -> str:
    if status.unfinished:
        return status.unfinished.partition(":")[0]
    if status.draining_until is not None:
        return f"draining ({age(max(0.0, status.draining_until - now))} left)"
    return status.state


def ready_text(status: WorkloadStatus) -> str:
    ready, total = status.ready
    return f"{ready}/{total}"


def age(seconds: float | None) -> str:
    """kubectl's short duration (its ``HumanDuration``): ``-`` when unknown."""
    if seconds is None or math.isnan(seconds):
        return "-"
    whole = max(0, int(seconds))
    minutes, hours, days = whole // 60, whole // 3600, whole // 86400
    if whole < 120:
        return f"{whole}s"
    if minutes < 10:
        return f"{minutes}m{whole % 60}s" if whole % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{days}d{hours % 24}h" if hours % 24 else f"{days}d"
    return f"{days}d" if days < 365 * 2 else f"{days // 365}y"


def status_dict(status: WorkloadStatus, now: float) -> dict[str, Any]:
    """The JSON (and YAML) form: every field of the status, and what the table shows."""
    data = attrs.asdict(status, recurse=True)
    data["labels"] = dict(status.labels)
    data["state"] = status.state
    ready, total = status.ready
    data["ready"] = {"ready": ready, "total": total}
    data["age"] = None if status.created is None else age(now - status.created)
    data["created"] = (
        None
        if status.created is None
        else datetime.datetime.fromtimestamp(status.created, datetime.UTC).isoformat()
    )
    data["draining_until"] = status.draining_until
    data["drain_seconds_left"] = (
        None if status.draining_until is None else round(max(0.0, status.draining_until - now), 1)
    )
    return data
