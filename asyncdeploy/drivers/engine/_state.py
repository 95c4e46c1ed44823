"""Engine API list entries read into asyncdeploy's values (pure: no engine calls)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from asyncdeploy.drivers._books import effective_grace
from asyncdeploy.drivers.engine._ops import ContainerRef, WorkloadSnapshot
from asyncdeploy.labels import (
    LABEL_CONTAINER,
    LABEL_GRACE,
    LABEL_INDEX,
    LABEL_PLAN_DIGEST,
    LABEL_PRE_STOP,
    LABEL_RESTART_POLICY,
    LABEL_ROLE,
    LABEL_STOP_SIGNAL,
    selector_labels,
    shown_labels,
)
from asyncdeploy.results import ContainerStatus, WorkloadStatus

__all__ = ["plan_order", "snapshot", "workload_labels", "workload_status"]

_EXITED = re.compile(r"Exited \((-?\d+)\)")
_HEALTH = re.compile(r"\((healthy|unhealthy|health: starting)\)")
_ROLE_ORDER = {"pause": 0, "init": 1, "run": 2, "autoheal": 3}


def plan_order(item: Mapping[str, Any]) -> tuple[int, int, int]:
    """Sort key of a list entry: by role (pause, init, run, autoheal), then as in the plan."""
    labels = item["Labels"]
    index = labels.get(LABEL_INDEX, "")
    # containers made before the index label: creation order (the engine lists newest first)
    fallback = int(item.get("Created") or 0)
    return (
        _ROLE_ORDER.get(labels.get(LABEL_ROLE), 9),
        int(index) if index.isdigit() else 0,
        fallback,
    )


def workload_status(driver: str, name: str, items: Sequence[Mapping[str, Any]]) -> WorkloadStatus:
    """A workload's status from the engine's container list entries, in plan order."""
    items = sorted(items, key=plan_order)
    first = items[0]["Labels"]
    user_labels = shown_labels(first)
    containers = []
    for item in items:
        exited = _EXITED.search(item.get("Status", ""))
        health = _HEALTH.search(item.get("Status", ""))
        containers.append(
            ContainerStatus(
                name=item["Labels"].get(LABEL_CONTAINER, ""),
                role=item["Labels"].get(LABEL_ROLE, "run"),
                image=item.get("Image", ""),
                state=item.get("State", "unknown"),
                exit_code=int(exited.group(1)) if exited else None,
                health=health.group(1).replace("health: ", "") if health else None,
            )
        )
    return WorkloadStatus(
        name=name,
        driver=driver,
        labels=user_labels,
        grace_period_seconds=effective_grace(first.get(LABEL_GRACE)),
        plan_digest=first.get(LABEL_PLAN_DIGEST),
        containers=tuple(containers),
    )


def snapshot(name: str, items: Sequence[Mapping[str, Any]]) -> WorkloadSnapshot:
    refs = []
    for item in items:
        labels = item["Labels"]
        exited = _EXITED.search(item.get("Status", ""))
        pre_stop = labels.get(LABEL_PRE_STOP)
        refs.append(
            ContainerRef(
                id=str(item["Id"]),
                name=labels.get(LABEL_CONTAINER, str(item["Id"])[:12]),
                role=labels.get(LABEL_ROLE, "run"),
                running=item.get("State") in ("running", "restarting", "paused"),
                paused=item.get("State") == "paused",
                exit_code=int(exited.group(1)) if exited else None,
                pre_stop=tuple(json.loads(pre_stop)) if pre_stop else None,
                stop_signal=labels.get(LABEL_STOP_SIGNAL, "SIGTERM"),
                restart_policy=labels.get(LABEL_RESTART_POLICY, "no"),
            )
        )
    refs.sort(key=lambda r: _ROLE_ORDER.get(r.role, 9))
    grace = effective_grace(items[0]["Labels"].get(LABEL_GRACE))
    return WorkloadSnapshot(name=name, grace_period_seconds=grace, containers=tuple(refs))


def workload_labels(items: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """The labels a selector sees: the user's, and the workload's name and plan digest, as on
    a Kubernetes Pod (the per-container ``asyncdeploy.io/`` labels are left out)."""
    return selector_labels(items[0]["Labels"])
