"""Pure readings of a live Pod (the JSON the API server sends): status values, readiness, masks.

Container states use the container engines' words, so one vocabulary serves every driver:
``running``, ``exited`` (terminated), ``restarting`` (waiting in CrashLoopBackOff) and
``created`` (waiting for anything else, or no status yet). The Pod sandbox is not a container of
the Pod API and is not listed.
"""

from __future__ import annotations

import copy
import datetime
from collections.abc import Iterator, Mapping
from typing import Any

import attrs

from asyncdeploy._results import ContainerStatus, PublishedPort, WorkloadEvent, WorkloadStatus
from asyncdeploy.drivers._books import effective_grace
from asyncdeploy.drivers.kubernetes._errors import ENGINE
from asyncdeploy.labels import LABEL_PLAN, LABEL_PLAN_DIGEST, LABEL_WORKLOAD, PlanRole, shown_labels
from asyncdeploy.masking import mask_tree, mask_value
from asyncdeploy.plan import masked_plan_record

__all__ = [
    "NodeSilence",
    "container_specs",
    "container_state",
    "container_statuses",
    "kubelet_wrote",
    "masked_pod",
    "node_silence",
    "pod_events",
    "pod_node",
    "pod_ready",
    "stop_signal",
    "terminated",
    "timestamp",
    "workload_name",
    "workload_status",
]


def workload_name(pod: Mapping[str, Any]) -> str:
    metadata = pod.get("metadata") or {}
    return str((metadata.get("labels") or {}).get(LABEL_WORKLOAD) or metadata.get("name", ""))


def container_specs(pod: Mapping[str, Any]) -> Iterator[tuple[PlanRole, dict[str, Any]]]:
    """``(role, container spec)`` for the init containers (a native sidecar, one with
    ``restartPolicy: Always``, is a ``sidecar``), then the run containers."""
    spec = pod.get("spec") or {}
    for container in spec.get("initContainers") or []:
        yield ("sidecar" if container.get("restartPolicy") == "Always" else "init"), container
    for container in spec.get("containers") or []:
        yield "run", container


def container_statuses(pod: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The container status entries (init and run) by container name."""
    status = pod.get("status") or {}
    found = {}
    for key in ("initContainerStatuses", "containerStatuses"):
        for entry in status.get(key) or []:
            found[entry["name"]] = entry
    return found


def container_state(entry: Mapping[str, Any] | None) -> str:
    """A container status entry in the engines' words (``created`` when there is none yet)."""
    state = (entry or {}).get("state") or {}
    if "running" in state:
        return "running"
    if "terminated" in state:
        return "exited"
    if (state.get("waiting") or {}).get("reason") == "CrashLoopBackOff":
        return "restarting"
    return "created"


def terminated(entry: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The ``state.terminated`` of a container status entry, if it has ended."""
    state = (entry or {}).get("state") or {}
    value = state.get("terminated")
    return dict(value) if isinstance(value, Mapping) else None


def stop_signal(container: Mapping[str, Any]) -> str:
    """The signal the kubelet sends: ``lifecycle.stopSignal`` if the cluster kept it.

    Without it the kubelet uses the image's STOPSIGNAL, which the API does not show: SIGTERM
    is then the honest guess, and the usual one.
    """
    lifecycle = container.get("lifecycle") or {}
    return str(lifecycle.get("stopSignal") or "SIGTERM")


def _health(container: Mapping[str, Any], entry: Mapping[str, Any] | None) -> str | None:
    if not any(container.get(p) for p in ("readinessProbe", "livenessProbe", "startupProbe")):
        return None
    if container_state(entry) != "running":
        return None
    assert entry is not None
    if not entry.get("started"):
        return "starting"
    return "healthy" if entry.get("ready") else "unhealthy"


def workload_status(pod: Mapping[str, Any]) -> WorkloadStatus:
    metadata = pod.get("metadata") or {}
    labels = metadata.get("labels") or {}
    statuses = container_statuses(pod)
    containers = []
    for role, container in container_specs(pod):
        entry = statuses.get(container["name"])
        ended = terminated(entry)
        containers.append(
            ContainerStatus(
                name=container["name"],
                role=role,
                image=container.get("image", ""),
                state=container_state(entry),
                exit_code=None if ended is None else ended.get("exitCode"),
                health=_health(container, entry),
                restarts=None if entry is None else int(entry.get("restartCount") or 0),
                checks=tuple(
                    kind
                    for kind in ("startup", "readiness", "liveness")
                    if container.get(f"{kind}Probe")
                ),
            )
        )
    grace = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")
    return WorkloadStatus(
        name=workload_name(pod),
        driver=ENGINE,
        labels=shown_labels(labels),
        grace_period_seconds=effective_grace(grace),
        plan_digest=(metadata.get("annotations") or {}).get(LABEL_PLAN_DIGEST),
        containers=tuple(containers),
        ports=_ports(pod),
        namespace=metadata.get("namespace"),
        created=timestamp(metadata["creationTimestamp"])
        if metadata.get("creationTimestamp")
        else None,
        # the API server's deletionTimestamp is the deletion's deadline (its start + grace)
        draining_until=timestamp(metadata["deletionTimestamp"])
        if metadata.get("deletionTimestamp")
        else None,
        node=pod_node(pod),
    )


def pod_node(pod: Mapping[str, Any]) -> str | None:
    """The node the Pod is bound to (``spec.nodeName``), None before it is scheduled."""
    return (pod.get("spec") or {}).get("nodeName") or None


@attrs.frozen(kw_only=True)
class NodeSilence:
    """A node that stopped reporting: ``silent_for`` seconds since its kubelet last renewed its
    lease (None when only the Node's Ready condition says so)."""

    node: str
    silent_for: float | None

    def remedy(self, namespace: str, pod: str) -> str:
        """What to run about a Pod held on this node."""
        return (
            f"the Pod stays until the kubelet on {self.node} reports again: restart it there; "
            f"if the node is gone for good, `kubectl delete pod {pod} -n {namespace} --force "
            "--grace-period=0` removes the Pod (not what may still run on the node)"
        )


def node_silence(
    name: str, node: Mapping[str, Any] | None, lease: Mapping[str, Any] | None, now: float
) -> NodeSilence | None:
    """Whether node ``name`` stopped reporting, from its Node and its Lease (in
    ``kube-node-lease``; either None when it could not be read), at UNIX time ``now``.

    The kubelet renews its Lease every quarter of ``leaseDurationSeconds`` (10 s of 40 by
    default): a lease not renewed for more than half of it has missed two renewals in a row. The
    node lifecycle controller, where it runs, says the same later (40-50 s) by setting the
    Ready condition ``Unknown`` ("Kubelet stopped posting node status"). A node whose Lease and
    Node cannot be read is not judged (None): only what was seen is reported."""
    silent_for = None
    spec = (lease or {}).get("spec") or {}
    renewed, duration = spec.get("renewTime"), spec.get("leaseDurationSeconds")
    if timestamp(renewed) and duration:
        silent_for = max(0.0, now - timestamp(renewed))
        if silent_for > float(duration) / 2:
            return NodeSilence(node=name, silent_for=round(silent_for, 1))
    conditions = ((node or {}).get("status") or {}).get("conditions") or []
    ready = next((c for c in conditions if c.get("type") == "Ready"), None)
    if ready is not None and ready.get("status") == "Unknown":
        return NodeSilence(
            node=name, silent_for=None if silent_for is None else round(silent_for, 1)
        )
    return None


def _ports(pod: Mapping[str, Any]) -> tuple[PublishedPort, ...]:
    """The run containers' ports; a ``hostPort`` is published on the node."""
    ports = []
    for role, container in container_specs(pod):
        for entry in container.get("ports") or [] if role == "run" else []:
            ports.append(
                PublishedPort(
                    container_port=int(entry["containerPort"]),
                    host_port=int(entry["hostPort"]) if entry.get("hostPort") else None,
                    protocol=str(entry.get("protocol") or "TCP").lower(),
                    host_ip=str(entry.get("hostIP") or ""),
                )
            )
    return tuple(ports)


def pod_ready(pod: Mapping[str, Any]) -> bool:
    """The Pod's ``Ready`` condition is True: every container runs and passes its readiness."""
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def masked_pod(pod: Mapping[str, Any]) -> dict[str, Any]:
    """A copy for people, managedFields dropped, masked by :mod:`asyncdeploy.masking`: env values
    by their variable's name, and every string for the credentials inside it."""
    out = copy.deepcopy(dict(pod))
    (out.get("metadata") or {}).pop("managedFields", None)
    for _, container in container_specs(out):
        for env in container.get("env") or []:
            if isinstance(env.get("value"), str):
                env["value"] = mask_value(str(env.get("name", "")), env["value"])
    annotations = (out.get("metadata") or {}).get("annotations") or {}
    if LABEL_PLAN in annotations:
        annotations[LABEL_PLAN] = masked_plan_record(annotations[LABEL_PLAN])
    masked: dict[str, Any] = mask_tree(out)
    return masked


def pod_events(listing: Mapping[str, Any], *, limit: int) -> list[WorkloadEvent]:
    """The last ``limit`` Events of a Pod (an Events list answer), oldest first."""
    found = []
    for item in listing.get("items") or []:
        stamp = item.get("lastTimestamp") or item.get("eventTime") or item.get("firstTimestamp")
        field_path = str((item.get("involvedObject") or {}).get("fieldPath") or "")
        container = field_path.partition("{")[2].rstrip("}")  # spec.containers{server}
        found.append(
            WorkloadEvent(
                time=timestamp(stamp),
                container=container,
                action=str(item.get("reason") or ""),
                message=str(item.get("message") or ""),
            )
        )
    found.sort(key=lambda e: e.time)
    return found[-limit:] if limit > 0 else []


def timestamp(value: Any) -> float:
    """An API time (RFC 3339, whole seconds) as a Unix time; 0.0 for none or another form."""
    if not isinstance(value, str) or not value:
        return 0.0
    try:
        return datetime.datetime.fromisoformat(value).timestamp()  # 3.11 reads "Z"
    except ValueError:
        return 0.0


def kubelet_wrote(pod: Mapping[str, Any]) -> float | None:
    """When the API received the kubelet's last write of the Pod's status (its ``managedFields``
    entry: manager ``kubelet``, subresource ``status``; whole seconds), None when not on record."""
    times = [
        timestamp(entry.get("time"))
        for entry in (pod.get("metadata") or {}).get("managedFields") or []
        if entry.get("manager") == "kubelet" and entry.get("subresource") == "status"
    ]
    return max(times, default=0.0) or None
