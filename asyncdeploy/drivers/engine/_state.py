"""Engine API list entries read into asyncdeploy's values (pure: no engine calls)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from asyncdeploy._results import ContainerStatus, EngineInfo, PublishedPort, WorkloadStatus
from asyncdeploy._selectors import Selector
from asyncdeploy.drivers._books import effective_grace
from asyncdeploy.drivers.engine._ops import ContainerRef, WorkloadSnapshot
from asyncdeploy.drivers.engine._unfinished import unfinished
from asyncdeploy.labels import (
    LABEL_CONTAINER,
    LABEL_GRACE,
    LABEL_INDEX,
    LABEL_INSTANCE_OF,
    LABEL_LIVENESS,
    LABEL_PLAN_DIGEST,
    LABEL_PRE_STOP,
    LABEL_PRE_STOP_HTTP,
    LABEL_PROPAGATION,
    LABEL_READINESS,
    LABEL_RESTART_POLICY,
    LABEL_ROLE,
    LABEL_STOP_SIGNAL,
    selector_labels,
    shown_labels,
)

__all__ = [
    "just_created",
    "matching",
    "ping_info",
    "plan_order",
    "planned_state",
    "published_ports",
    "snapshot",
    "volumes_status",
    "workload_labels",
    "workload_status",
]

_EXITED = re.compile(r"Exited \((-?\d+)\)")
_HEALTH = re.compile(r"\((healthy|unhealthy|health: starting)\)")
_ROLE_ORDER = {"pause": 0, "init": 1, "sidecar": 2, "run": 3, "autoheal": 4}

STARTING_SECONDS = 30.0  # a container left "created" longer than this: its create is dead


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


def published_ports(items: Sequence[Mapping[str, Any]]) -> tuple[PublishedPort, ...]:
    """The ports the list entries publish (the pause container's), IPv4 and IPv6 entries of one
    binding counted once, in port order."""
    found: dict[tuple[int, int | None, str], PublishedPort] = {}
    for item in items:
        for entry in item.get("Ports") or []:
            if not entry.get("PrivatePort"):
                continue
            public = entry.get("PublicPort")
            port = PublishedPort(
                container_port=int(entry["PrivatePort"]),
                host_port=int(public) if public else None,
                protocol=str(entry.get("Type") or "tcp"),
                host_ip=str(entry.get("IP") or ""),
            )
            key = (port.container_port, port.host_port, port.protocol)
            if key not in found or found[key].host_ip in ("", "::"):
                found[key] = port
    return tuple(sorted(found.values(), key=lambda p: (p.container_port, p.host_port or 0)))


def _checks(labels: Mapping[str, str]) -> tuple[str, ...]:
    """The checks the plan gave the container: readiness is run by asyncdeploy (its command is
    a label); liveness is the engine's health check (its state shows in the list entry's
    status). A health check the image brings along (``HEALTHCHECK``) is none of them: its
    state is shown, never counted against the container."""
    return (("readiness",) if LABEL_READINESS in labels else ()) + (
        ("liveness",) if labels.get(LABEL_LIVENESS) == "true" else ()
    )


def workload_status(
    driver: str,
    name: str,
    items: Sequence[Mapping[str, Any]],
    restarts: Mapping[str, int] | None = None,
) -> WorkloadStatus:
    """A workload's status from the engine's container list entries, in plan order;
    ``restarts`` by container id, where the caller inspected them."""
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
                restarts=None if restarts is None else restarts.get(str(item.get("Id"))),
                checks=_checks(item["Labels"]),
            )
        )
    return WorkloadStatus(
        name=name,
        driver=driver,
        labels=user_labels,
        grace_period_seconds=effective_grace(first.get(LABEL_GRACE)),
        plan_digest=first.get(LABEL_PLAN_DIGEST),
        containers=tuple(containers),
        unfinished=unfinished(items),
        ports=published_ports(items),
        created=min((float(i["Created"]) for i in items if i.get("Created")), default=None),
    )


def just_created(items: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """The restart counts of containers this create has just made and started: 0 each (what
    ``get`` reads from the engine a moment later; None would say "not known")."""
    return {str(item.get("Id")): 0 for item in items}


def snapshot(name: str, items: Sequence[Mapping[str, Any]]) -> WorkloadSnapshot:
    """What a drain works on; no items: only the plan's named volumes are left (a create was
    killed before its containers), and the drain removes them."""
    if not items:
        return WorkloadSnapshot(
            name=name, grace_period_seconds=effective_grace(None), containers=()
        )
    refs = []
    for item in sorted(items, key=plan_order):  # the engine lists newest first
        labels = item["Labels"]
        exited = _EXITED.search(item.get("Status", ""))
        pre_stop = labels.get(LABEL_PRE_STOP)
        hook = json.loads(labels.get(LABEL_PRE_STOP_HTTP) or "null")
        window = _propagation(labels.get(LABEL_PROPAGATION))
        refs.append(
            ContainerRef(
                id=str(item["Id"]),
                name=labels.get(LABEL_CONTAINER, str(item["Id"])[:12]),
                role=labels.get(LABEL_ROLE, "run"),
                running=item.get("State") in ("running", "restarting", "paused"),
                paused=item.get("State") == "paused",
                exit_code=int(exited.group(1)) if exited else None,
                pre_stop=tuple(json.loads(pre_stop)) if pre_stop else None,
                pre_stop_http=(int(hook["port"]), str(hook["path"])) if hook else None,
                stop_signal=labels.get(LABEL_STOP_SIGNAL, "SIGTERM"),
                restart_policy=labels.get(LABEL_RESTART_POLICY, "no"),
                workload=name,
                propagation=window,
            )
        )
    refs.sort(key=lambda r: _ROLE_ORDER.get(r.role, 9))
    first = items[0]["Labels"]
    grace = effective_grace(first.get(LABEL_GRACE))
    return WorkloadSnapshot(
        name=name,
        grace_period_seconds=grace,
        containers=tuple(refs),
        plan_name=first.get(LABEL_INSTANCE_OF, ""),
        volumes=_mounts_volume(items),
    )


def _propagation(label: str | None) -> tuple[float, str] | None:
    """The propagation label's window; None when absent or not ours to read (a label a user
    set by hand on a container of theirs never breaks a delete)."""
    try:
        data = json.loads(label or "null")
        return (float(data["seconds"]), str(data["during"])) if data else None
    except (ValueError, TypeError, KeyError):
        return None


def _mounts_volume(items: Sequence[Mapping[str, Any]]) -> bool | None:
    """Whether a listed container mounts a volume; None when the list does not say."""
    mounts = [mount for item in items for mount in item.get("Mounts") or ()]
    if not all(isinstance(mount, Mapping) for mount in mounts):
        return None
    return any(mount.get("Type") == "volume" for mount in mounts)


def volumes_status(
    driver: str, plan: str, why: str, labels: Mapping[str, str] | None = None
) -> WorkloadStatus:
    """The status of a plan of which only named volumes are left (``why``: ``left_volumes``)."""
    return WorkloadStatus(
        name=plan,
        driver=driver,
        labels=dict(labels or {}),
        grace_period_seconds=effective_grace(None),
        plan_digest=None,
        containers=(),
        unfinished=why,
    )


def workload_labels(items: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """The labels a selector sees: the user's, and the workload's name and plan digest, as on
    a Kubernetes Pod (the per-container ``asyncdeploy.io/`` labels are left out)."""
    return selector_labels(items[0]["Labels"])


def planned_state(
    items: Sequence[Mapping[str, Any]], now: float
) -> Literal["as-planned", "building", "dead"]:
    """Whether a complete workload of an unchanged plan is in the state that plan asks for.

    ``as-planned``: the pause container runs, nothing is left unstarted and a run container
    runs (one exited while another serves is left alone: repairing it would drain the one that
    serves; ``create --wait`` reports it). ``building``: a container was created moments ago and
    not started yet: a create is at work. ``dead``: the pause is paused (a delete claimed it)
    or gone, a container was left unstarted by a create that died, or every run container
    has exited.
    """
    states = {str(i["Labels"].get(LABEL_CONTAINER)): str(i.get("State")) for i in items}
    unstarted = [i for i in items if i.get("State") == "created"]
    if any(now - float(i.get("Created") or 0) < STARTING_SECONDS for i in unstarted):
        return "building"
    runs = [i for i in items if i["Labels"].get(LABEL_ROLE) == "run"]
    serving = any(i.get("State") in ("running", "restarting") for i in runs)
    if states.get("pause") != "running" or unstarted or not serving:
        return "dead"
    return "as-planned"


def ping_info(driver: str, headers: Mapping[str, str]) -> EngineInfo | None:
    """What answered, from the headers of ``/_ping`` (None when they do not say): Podman adds
    ``Libpod-Api-Version``; both name their API version and ``Server: Docker/20.10.24 ...``.
    (``/version`` says the same in its body, and takes Podman 0.3 s idle, seconds loaded.)"""
    lowered = {k.lower(): v for k, v in headers.items()}
    api, server = lowered.get("api-version"), lowered.get("server", "")
    if not api:
        return None
    libpod = lowered.get("libpod-api-version")
    version = libpod or server.partition("/")[2].partition(" ")[0]
    return EngineInfo(
        driver=driver, version=version, api_version=api, engine="podman" if libpod else "docker"
    )


def matching(
    grouped: Mapping[str, list[dict[str, Any]]], selector: Selector | None
) -> dict[str, list[dict[str, Any]]]:
    """The workloads ``selector`` matches, by name. Matched here, not by the engine's label
    filter: Podman reads "team=" as "any value"."""
    return {
        name: items
        for name, items in sorted(grouped.items())
        if selector is None or selector.matches(workload_labels(items))
    }
