"""What the kubelet and the scheduler tell about a Pod, read from Events and the Pod's status.

Pure readings of the API's JSON. The Event reasons read (as kubelet v1.36 records them, seen on a
real node: ``tests/kubernetes/recordings/08*-kubelet-events-*.json``):

=======================  ==============================================================
``Killing``              "Stopping container X": the kubelet starts to stop X. It then
                         runs X's preStop hook, if X has one, and only then sends the stop
                         signal; without a hook the signal follows at once.
``FailedPreStopHook``    the hook failed or ran out of time ("PreStopHook failed"); the
                         kubelet sends the stop signal right after.
``ExceededGracePeriod``  the runtime did not stop X within the grace period (not seen on
                         containerd; read if a runtime records it).
=======================  ==============================================================

A preStop hook that succeeds is not recorded at all.

Why a Pod will not start comes from its status, where the kubelet and the scheduler put it: a
container ``waiting`` with one of :data:`FATAL_WAITING` (``ErrImagePull``,
``ImagePullBackOff``, ``CrashLoopBackOff``, ``CreateContainerConfigError``, ...), or the
``PodScheduled`` condition ``False`` with reason ``Unschedulable`` (the message names what is
short: "0/1 nodes are available: 1 Insufficient cpu.").
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import attrs

from asyncdeploy.builtin_images import build_command, built_in
from asyncdeploy.drivers.kubernetes import _status as pod_status

__all__ = [
    "EXCEEDED_GRACE_PERIOD",
    "FAILED_PRE_STOP_HOOK",
    "FATAL_WAITING",
    "KILLING",
    "KubeletEvent",
    "StartupFailure",
    "event_time",
    "read_event",
    "startup_failure",
]

KILLING = "Killing"
FAILED_PRE_STOP_HOOK = "FailedPreStopHook"
EXCEEDED_GRACE_PERIOD = "ExceededGracePeriod"
DRAIN_REASONS = frozenset({KILLING, FAILED_PRE_STOP_HOOK, EXCEEDED_GRACE_PERIOD})

# Waiting reasons after which the kubelet keeps retrying but the Pod will not become ready
# without a change: reported at once instead of after wait_ready's timeout.
FATAL_WAITING = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "ErrImageNeverPull",
        "InvalidImageName",
        "ImageInspectError",
        "RegistryUnavailable",
        "CreateContainerConfigError",
        "CreateContainerError",
        "RunContainerError",
        "CrashLoopBackOff",
    }
)
_FIELD_PATH = re.compile(r"^spec\.(?:initContainers|containers|ephemeralContainers)\{(.+)\}$")
_STOPPING = re.compile(r"^Stopping container (\S+)")
_NAME_NANOS = re.compile(r"\.([0-9a-f]{12,16})$")


@attrs.frozen
class KubeletEvent:
    """One Event about one container of a Pod, as far as the drain reads it."""

    key: str  # metadata.name: a repeat of an Event is the same object, its count bumped
    count: int  # how many times the kubelet recorded it: (key, count) is one occurrence
    uid: str  # the Pod's
    reason: str
    container: str
    message: str
    time: float | None  # when it was recorded (UNIX seconds), see event_time


def read_event(event: Mapping[str, Any]) -> KubeletEvent | None:
    """A drain-relevant Event about a container, else None."""
    reason = str(event.get("reason") or "")
    if reason not in DRAIN_REASONS:
        return None
    involved = event.get("involvedObject") or {}
    message = str(event.get("message") or "")
    path = _FIELD_PATH.match(str(involved.get("fieldPath") or ""))
    stopping = _STOPPING.match(message)
    container = path.group(1) if path else stopping.group(1) if stopping else ""
    if not container:
        return None
    series = event.get("series") or {}
    return KubeletEvent(
        key=str((event.get("metadata") or {}).get("name", "")),
        count=int(series.get("count") or event.get("count") or 1),
        uid=str(involved.get("uid") or ""),
        reason=reason,
        container=container,
        message=message,
        time=event_time(event),
    )


def event_time(event: Mapping[str, Any]) -> float | None:
    """When the Event was recorded, as precisely as it tells.

    ``eventTime`` (microseconds) when set; else the name's suffix, which client-go's recorder
    makes from the time in nanoseconds (``<object>.<hex UnixNano>``); else ``firstTimestamp``
    (whole seconds).
    """
    stamp = event.get("eventTime")
    if stamp:
        return _parse(str(stamp))
    suffix = _NAME_NANOS.search(str((event.get("metadata") or {}).get("name", "")))
    if suffix:
        return int(suffix.group(1), 16) / 1e9
    first = event.get("firstTimestamp") or (event.get("metadata") or {}).get("creationTimestamp")
    return _parse(str(first)) if first else None


def _parse(stamp: str) -> float | None:
    try:
        return datetime.fromisoformat(stamp).timestamp()  # "Z" reads as UTC since 3.11
    except ValueError:
        return None


@attrs.frozen
class StartupFailure:
    """Why a Pod will not become ready: ``what`` in the kubelet's or scheduler's words."""

    what: str
    container: str
    exit_code: int | None = None
    reason: str = ""
    message: str = ""


def startup_failure(pod: Mapping[str, Any]) -> StartupFailure | None:
    """The first reason the Pod will not become ready, else None (it may still).

    In order: the scheduler found no node; an init container failed (ended or crash-looping
    with a non-zero code); a container waits for a reason in :data:`FATAL_WAITING`; a run
    container ended; the Pod's phase is ``Failed``.
    """
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if (
            condition.get("type") == "PodScheduled"
            and condition.get("status") == "False"
            and condition.get("reason") == "Unschedulable"
        ):
            message = str(condition.get("message") or "")
            return StartupFailure(
                what="unschedulable",
                container=_short_of(pod, message),
                reason="Unschedulable",
                message=message,
            )
    statuses = pod_status.container_statuses(pod)
    for role, spec in pod_status.container_specs(pod):
        entry = statuses.get(spec["name"]) or {}
        last = pod_status.terminated({"state": entry.get("lastState")})
        waiting = (entry.get("state") or {}).get("waiting") or {}
        if role == "init":
            ended = pod_status.terminated(entry) or last
            if ended is not None and ended.get("exitCode"):
                return StartupFailure("init container failed", spec["name"], int(ended["exitCode"]))
        if waiting.get("reason") in FATAL_WAITING:
            code = None if last is None or last.get("exitCode") is None else int(last["exitCode"])
            message = str(waiting.get("message") or "")
            image = str(spec.get("image") or "")
            if built_in(image) is not None:  # never pulled: say how to provide it
                message += (
                    f" ({build_command(image)} on Docker or Podman, then load it into the "
                    "nodes, or name a registry's copy in the plan)"
                )
            return StartupFailure(
                what=str(waiting["reason"]),
                container=spec["name"],
                exit_code=code,
                reason=str(waiting["reason"]),
                message=message,
            )
        if role == "run" and (ended := pod_status.terminated(entry)) is not None:
            code = ended.get("exitCode")
            return StartupFailure(
                "container exited", spec["name"], None if code is None else int(code)
            )
    if (pod.get("status") or {}).get("phase") == "Failed":
        return StartupFailure("pod failed", "")
    return None


def _short_of(pod: Mapping[str, Any], message: str) -> str:
    """The containers asking for what the scheduler says is short ("Insufficient cpu")."""
    short = set(re.findall(r"Insufficient ([\w./-]*\w)", message))
    names = [
        str(spec["name"])
        for _, spec in pod_status.container_specs(pod)
        if short & set((spec.get("resources") or {}).get("requests") or {})
        or short & set((spec.get("resources") or {}).get("limits") or {})
    ]
    return ", ".join(names)
