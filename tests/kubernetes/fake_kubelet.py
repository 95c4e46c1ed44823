"""The simulated node for the fake API server: container scripts and the status a kubelet writes.

Status shapes follow the recordings (05a, 05b, 01d): container status entries, the five Pod
conditions, the terminal phase (Succeeded only when every run container exited 0).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import anyio
import attrs
import fake_pods as k8s


@attrs.define
class ContainerScript:
    """How a simulated container behaves on the simulated node."""

    drain: float = 0.0  # seconds from SIGTERM to its exit
    exit_code: int = 0
    ignore_term: bool = False  # then the kubelet kills it at the deadline: 137
    exit_on_start: int | None = None  # ends right after starting, with this code
    exit_after: float | None = None  # runs this long, then ends on its own with exit_code
    prestop: float = 0.0  # how long its preStop hook runs, if the Pod declares one
    prestop_fails: bool = False  # the hook fails (the kubelet records FailedPreStopHook)
    ready_after: float = 0.0  # readiness passes this long after start (with a readinessProbe)
    logs: tuple[str, ...] = ("started",)


@attrs.define(eq=False)
class Node:
    """The kubelet's view of one Pod."""

    key: tuple[str, str]
    uid: str
    stopping: anyio.Event = attrs.Factory(anyio.Event)
    gone: anyio.Event = attrs.Factory(anyio.Event)
    started: bool = False
    stop_at: float = 0.0
    grace: int = 0
    logs: dict[str, list[str]] = attrs.Factory(dict)
    log_changed: anyio.Event = attrs.Factory(anyio.Event)

    def log(self, container: str, line: str) -> None:
        self.logs.setdefault(container, []).append(line)
        self.poke()

    def poke(self) -> None:
        """Wake the log followers (a line, or a container that ended)."""
        self.log_changed.set()
        self.log_changed = anyio.Event()


TRAP = re.compile(r"trap '(?P<handler>[^']*)' TERM;")


def script_from_command(command: list[str]) -> ContainerScript:
    """The shell idioms the simulated node understands: ``sh -c 'exit N'`` ends at once with N;
    ``trap 'echo got TERM; sleep D; ...; exit N' TERM`` (``k8s_contract.trap_script``) drains
    D s and exits N; a handler without ``exit`` ignores SIGTERM. Anything else runs until
    SIGTERM and then exits 0 at once."""
    if command[:2] == ["sh", "-c"] and (ends := re.fullmatch(r"exit (\d+)", command[-1])):
        return ContainerScript(exit_on_start=int(ends[1]))
    match = TRAP.search(command[-1]) if command else None
    if match is None:
        return ContainerScript()
    handler = match["handler"]
    code = re.search(r"exit (\d+)", handler)
    if code is None:
        return ContainerScript(ignore_term=True)
    sleep = re.search(r"sleep ([\d.]+)", handler)
    return ContainerScript(drain=float(sleep[1]) if sleep else 0.0, exit_code=int(code[1]))


STATUS_ORDER = [
    "observedGeneration",
    "phase",
    "conditions",
    "hostIP",
    "hostIPs",
    "podIP",
    "podIPs",
    "startTime",
    "initContainerStatuses",
    "containerStatuses",
    "qosClass",
]


def containers(pod: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    spec = pod.get("spec") or {}
    return [("init", c) for c in spec.get("initContainers") or []] + [
        ("run", c) for c in spec.get("containers") or []
    ]


def status_entry(pod: dict[str, Any], name: str) -> dict[str, Any] | None:
    status = pod.get("status") or {}
    for key in ("initContainerStatuses", "containerStatuses"):
        for entry in status.get(key) or []:
            if entry["name"] == name:
                return dict(entry)
    return None


def condition(kind: str, ok: bool, reason: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "type": kind,
        "status": "True" if ok else "False",
        "lastProbeTime": None,
        "lastTransitionTime": k8s.rfc3339(datetime.now(UTC)),
    }
    if reason:
        out["reason"] = reason
    return out


def entry(
    container: dict[str, Any], state: dict[str, Any], *, ready: bool, started: bool
) -> dict[str, Any]:
    return {
        "name": container["name"],
        "state": state,
        "lastState": {},
        "ready": ready,
        "restartCount": 0,
        "image": container["image"],
        "imageID": "sha256:" + "0" * 64,
        "containerID": f"containerd://{abs(hash(container['name'])):064x}"[:77],
        "started": started,
    }


def _ended(code: int, now: str) -> dict[str, Any]:
    reason = "Completed" if code == 0 else "Error"
    return {"terminated": {"exitCode": code, "reason": reason, "startedAt": now, "finishedAt": now}}


def start_status(
    pod: dict[str, Any], running: bool, script_of: Callable[[dict[str, Any]], ContainerScript]
) -> None:
    """The kubelet's status while creating (``running`` False) and once started.

    Init containers run to completion first; one that fails stops the Pod there: phase Failed
    with ``restartPolicy: Never``, else Pending (the kubelet would retry it, in back-off).
    """
    now = k8s.rfc3339(datetime.now(UTC))
    spec, status = pod["spec"], pod["status"]
    initializing = {"waiting": {"reason": "PodInitializing"}}
    inits, failed = [], None
    for container in spec.get("initContainers") or []:
        code = script_of(container).exit_on_start or 0
        if not running or failed is not None:
            inits.append(entry(container, initializing, ready=False, started=False))
            continue
        inits.append(entry(container, _ended(code, now), ready=code == 0, started=False))
        if code != 0:
            failed = code
    runs = []
    for container in spec["containers"]:
        script = script_of(container)
        if not running or failed is not None:
            waiting = {"waiting": {"reason": "PodInitializing" if failed else "ContainerCreating"}}
            runs.append(entry(container, waiting, ready=False, started=False))
        elif script.exit_on_start is not None:
            runs.append(
                entry(container, _ended(script.exit_on_start, now), ready=False, started=False)
            )
        else:
            ready = not (container.get("readinessProbe") and script.ready_after > 0)
            runs.append(
                entry(container, {"running": {"startedAt": now}}, ready=ready, started=True)
            )
    status["observedGeneration"] = pod["metadata"]["generation"]
    status["phase"] = "Running" if running and failed is None else "Pending"
    status.update(hostIP="192.0.2.2", hostIPs=[{"ip": "192.0.2.2"}], startTime=now)
    status.update(podIP="198.18.0.11", podIPs=[{"ip": "198.18.0.11"}])
    if inits:
        status["initContainerStatuses"] = inits
    status["containerStatuses"] = runs
    set_ready_conditions(pod, started=running)
    if failed is not None and spec.get("restartPolicy") == "Never":
        status["phase"] = "Failed"
    set_phase(pod)


def set_ready_conditions(pod: dict[str, Any], *, started: bool = True) -> None:
    status = pod["status"]
    runs = status.get("containerStatuses") or []
    ready = bool(runs) and all(e["ready"] for e in runs)
    reason = None if ready else "ContainersNotReady"
    status["conditions"] = [
        condition("PodReadyToStartContainers", started),
        condition("Initialized", True),
        condition("Ready", ready, reason),
        condition("ContainersReady", ready, reason),
        condition("PodScheduled", True),
    ]
    pod["status"] = k8s.ordered(status, STATUS_ORDER)


def set_phase(pod: dict[str, Any]) -> None:
    """Once every run container has ended: Succeeded (all exit 0) or Failed."""
    status = pod["status"]
    runs = status.get("containerStatuses") or []
    ended = [e["state"].get("terminated") for e in runs]
    if not runs or not all(ended):
        return
    ok = all(t["exitCode"] == 0 for t in ended)
    status["phase"] = "Succeeded" if ok else "Failed"
    reason = "PodCompleted" if ok else "PodFailed"
    status["conditions"] = [
        condition("PodReadyToStartContainers", False),
        condition("Initialized", True, "PodCompleted" if ok else None),
        condition("Ready", False, reason),
        condition("ContainersReady", False, reason),
        condition("PodScheduled", True),
    ]


def terminate(pod: dict[str, Any], name: str, code: int, at: datetime | None = None) -> None:
    """``name`` ended with ``code`` (``at``: when, if not now: the kubelet writes the end it saw
    at its relist, later)."""
    now = k8s.rfc3339(at or datetime.now(UTC))
    for entry in pod["status"].get("containerStatuses") or []:
        if entry["name"] == name:
            started = (entry["state"].get("running") or {}).get("startedAt", now)
            entry["state"] = {
                "terminated": {
                    "exitCode": code,
                    "reason": "Completed" if code == 0 else "Error",
                    "startedAt": started,
                    "finishedAt": now,
                    "containerID": entry["containerID"],
                }
            }
            entry["ready"] = False
            entry["started"] = False
    pod["status"]["observedGeneration"] = pod["metadata"]["generation"]
    set_ready_conditions(pod)
    set_phase(pod)


def record_status_write(pod: dict[str, Any]) -> None:
    """The kubelet wrote the Pod's status now: its ``managedFields`` entry says when (whole
    seconds, as recorded: 05a's kubelet entries carry the second its container started)."""
    entries = pod["metadata"].setdefault("managedFields", [])
    entries[:] = [e for e in entries if e.get("manager") != "kubelet"]
    entries.append(
        {
            "manager": "kubelet",
            "operation": "Update",
            "apiVersion": "v1",
            "time": k8s.rfc3339(k8s.truncated_now()),
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:status": {}},
            "subresource": "status",
        }
    )
