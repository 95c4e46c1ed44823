"""Pure translation of a plan into a Pod manifest: plain dicts, no I/O, no cluster needed.

One Pod per workload, named after it. What maps where:

* ``init`` containers → ``initContainers``; ``run`` containers → ``containers`` (plan order).
* ``command`` / ``args`` → ``command`` / ``args`` (the image's ENTRYPOINT / CMD, as on Docker).
* resources → ``requests`` = ``limits`` (Guaranteed QoS), in the plan's canonical spelling;
  extended resources (``nvidia.com/gpu: 1``) beside cpu and memory, as the device plugin's
  scheduler accounting expects. Pinned CDI ``devices`` are refused: Kubernetes hands devices
  out through device plugins (or DRA claims), never by name from the Pod.
* startup / readiness / liveness checks → ``startupProbe`` / ``readinessProbe`` /
  ``livenessProbe``, kept apart; ``pre_stop`` → ``lifecycle.preStop.exec``, ``pre_stop_http`` →
  ``lifecycle.preStop.httpGet``; a ``sidecar`` → an init container with ``restartPolicy: Always``.
* ``stop_signal`` → ``lifecycle.stopSignal`` (with ``spec.os.name: linux``, which the field
  requires). Clusters without the ``ContainerStopSignals`` feature drop the field on create; the
  driver reads the signal back from the live Pod, never from the plan.
* ``termination_grace_period_seconds`` → ``terminationGracePeriodSeconds``.
* ``image_pull_policy`` → ``imagePullPolicy`` when set (else the cluster's default: Always for
  ``:latest``, IfNotPresent otherwise); ``image_pull_secrets`` → ``imagePullSecrets``. The
  kubelet pulls: ``registry_auth`` and ``pause_image_pull_policy`` are for Docker and Podman.
* ``host_network`` → ``hostNetwork``; ``pid_shared`` → ``shareProcessNamespace``;
  ``node_selector`` → ``nodeSelector``.
* ``shm_size`` → an ``emptyDir`` (medium Memory, ``sizeLimit``) on ``/dev/shm`` of every container.
* mounts: bind → ``hostPath``; volume → an ``emptyDir`` named after the volume (it lives and dies
  with the Pod: asyncdeploy creates no PersistentVolumeClaims); tmpfs → ``emptyDir`` Memory.
* the Pod's ``restartPolicy`` comes from the run containers: the most restarting one wins
  (always / unless-stopped → Always, on-failure → OnFailure, no → Never).

Not translated, on purpose: the pause container (the Pod sandbox is the kubelet's) and the
autoheal sidecar (liveness probes already restart unhealthy containers).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any, Literal

from asyncdeploy._errors import PlanError, WorkloadConflict
from asyncdeploy.builtin_images import built_in
from asyncdeploy.labels import (
    LABEL_INSTANCE_OF,
    LABEL_PLAN,
    LABEL_PLAN_DIGEST,
    LABEL_SERVICE,
    LABEL_WORKLOAD,
)
from asyncdeploy.plan import Container, Mount, Port, Probe, WorkloadPlan, plan_digest, plan_record

__all__ = [
    "SHM_VOLUME",
    "Decision",
    "apply_decision",
    "pod_manifest",
    "probe_spec",
    "restart_policy",
    "service_manifest",
    "service_name",
    "stop_signal_name",
    "volume_name",
]

SHM_VOLUME = "shm"
_RESTART = {
    "no": "Never",
    "on-failure": "OnFailure",
    "always": "Always",
    "unless-stopped": "Always",
}
_RESTART_RANK = {"Never": 0, "OnFailure": 1, "Always": 2}
# Linux numbering, whatever the platform asyncdeploy runs on: the containers run on Linux nodes.
_LINUX_SIGNALS = (
    *("HUP", "INT", "QUIT", "ILL", "TRAP", "ABRT", "BUS", "FPE", "KILL", "USR1", "SEGV"),
    *("USR2", "PIPE", "ALRM", "TERM", "STKFLT", "CHLD", "CONT", "STOP", "TSTP", "TTIN"),
    *("TTOU", "URG", "XCPU", "XFSZ", "VTALRM", "PROF", "WINCH", "IO", "PWR", "SYS"),
)
_SIGRTMIN, _SIGRTMAX = 34, 64
_NOT_DNS = re.compile(r"[^a-z0-9]+")


def pod_manifest(plan: WorkloadPlan, *, namespace: str) -> dict[str, Any]:
    """The Pod asyncdeploy creates for ``plan`` in ``namespace``."""
    digest = plan_digest(plan)
    volumes, mounts = _volumes(plan)
    spec: dict[str, Any] = {
        "terminationGracePeriodSeconds": plan.termination_grace_period_seconds,
        "restartPolicy": restart_policy(plan),
    }
    if plan.host_network:
        spec["hostNetwork"] = True
    if plan.pid_shared:
        spec["shareProcessNamespace"] = True
    inits = [_container(plan, c, mounts[c.name]) for c in plan.init_containers]
    # Native sidecars (KEP-753): init containers that keep running, started before the main
    # containers and stopped after them.
    inits += [
        {**_container(plan, c, mounts[c.name]), "restartPolicy": "Always"}
        for c in plan.sidecar_containers
    ]
    if inits:
        spec["initContainers"] = inits
    spec["containers"] = [_container(plan, c, mounts[c.name]) for c in plan.run_containers]
    if volumes:
        spec["volumes"] = volumes
    if any(c.stop_signal for c in plan.containers):
        spec["os"] = {"name": "linux"}  # lifecycle.stopSignal is refused without it
    if plan.image_pull_secrets:
        spec["imagePullSecrets"] = [{"name": name} for name in plan.image_pull_secrets]
    if plan.node_selector:
        spec["nodeSelector"] = dict(plan.node_selector)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": plan.name,
            "namespace": namespace,
            "labels": {
                **plan.labels,
                LABEL_WORKLOAD: plan.name,
                LABEL_PLAN_DIGEST: digest,
                **({LABEL_INSTANCE_OF: plan.instance_of} if plan.instance_of else {}),
                **({LABEL_SERVICE: service_name(plan)} if plan.service else {}),
            },
            "annotations": {LABEL_PLAN_DIGEST: digest, LABEL_PLAN: plan_record(plan)},
        },
        "spec": spec,
    }


Decision = Literal["create", "unchanged", "replace"]


def apply_decision(live: Mapping[str, Any] | None, plan: WorkloadPlan) -> Decision:
    """What ``apply`` does, decided from the digest recorded on the live Pod, never its spec.

    The API server rewrites what it stores (defaults, ``0.5`` → ``500m``, dropped ``false``
    toggles), so the live spec is never compared with the plan: the digest of the plan that
    created the Pod is. Equal → ``unchanged``; different or missing → ``replace``; a Pod that
    is already being deleted, or whose every container has ended (phase ``Failed`` or
    ``Succeeded``) → ``replace`` (drain it, then create). A Pod of the same name
    that asyncdeploy did not create → ``WorkloadConflict``.
    """
    if live is None:
        return "create"
    metadata = live.get("metadata") or {}
    if LABEL_WORKLOAD not in (metadata.get("labels") or {}):
        raise WorkloadConflict(
            f"pod {metadata.get('namespace')}/{metadata.get('name')} exists and is not an "
            "asyncdeploy workload",
            engine="kubernetes",
        )
    if metadata.get("deletionTimestamp"):
        return "replace"
    if (live.get("status") or {}).get("phase") in ("Failed", "Succeeded"):
        return "replace"  # the same plan, but dead: not the state it asks for
    recorded = (metadata.get("annotations") or {}).get(LABEL_PLAN_DIGEST)
    return "unchanged" if recorded == plan_digest(plan) else "replace"


def restart_policy(plan: WorkloadPlan) -> str:
    """The Pod's one restart policy: the most restarting of the run containers' policies."""
    policies = [_RESTART[c.restart_policy] for c in plan.run_containers]
    return max(policies, key=_RESTART_RANK.__getitem__)


def stop_signal_name(value: str) -> str:
    """The ``lifecycle.stopSignal`` spelling: ``TERM``, ``15`` and ``SIGTERM`` → ``SIGTERM``."""
    if value.isdigit():
        number = int(value)
        if 1 <= number <= len(_LINUX_SIGNALS):
            return f"SIG{_LINUX_SIGNALS[number - 1]}"
        if number == _SIGRTMIN:
            return "SIGRTMIN"
        if number == _SIGRTMAX:
            return "SIGRTMAX"
        if _SIGRTMIN < number < _SIGRTMAX:
            return f"SIGRTMIN+{number - _SIGRTMIN}"
        raise PlanError("stop_signal", f"{value} is not a Linux signal number")
    return value if value.startswith("SIG") else f"SIG{value}"


def probe_spec(probe: Probe) -> dict[str, Any]:
    """A probe as the Pod API spells it; ``successThreshold`` is left to the server (1)."""
    out: dict[str, Any]
    if probe.exec is not None:
        out = {"exec": {"command": list(probe.exec)}}
    elif probe.http is not None:
        out = {"httpGet": {"path": probe.http.path, "port": probe.http.port}}
    else:
        out = {"tcpSocket": {"port": probe.tcp}}
    out.update(
        initialDelaySeconds=probe.initial_delay_seconds,
        periodSeconds=probe.period_seconds,
        timeoutSeconds=probe.timeout_seconds,
        failureThreshold=probe.failure_threshold,
    )
    return out


def volume_name(kind: str, key: str) -> str:
    """A DNS-label volume name for ``key`` (a path or a volume name), unique per ``key``.

    A short hash keeps two keys that read alike (``/data/a`` and ``/data-a``) apart.
    """
    slug = _NOT_DNS.sub("-", key.lower()).strip("-")[:40].strip("-")
    digest = hashlib.sha256(key.encode()).hexdigest()[:8]
    return f"{kind}-{slug}-{digest}" if slug else f"{kind}-{digest}"


# --- internals -------------------------------------------------------------------------------


def _container(
    plan: WorkloadPlan, container: Container, mounts: list[dict[str, Any]]
) -> dict[str, Any]:
    index = plan.containers.index(container)
    out: dict[str, Any] = {"name": container.name, "image": container.image}
    if built_in(container.image) is not None:  # made on the node, never pulled (docs/cli.md)
        out["imagePullPolicy"] = "Never"
    elif container.image_pull_policy is not None:  # else the cluster's default for the tag
        out["imagePullPolicy"] = container.image_pull_policy
    if container.command is not None:
        out["command"] = list(container.command)
    if container.args is not None:
        out["args"] = list(container.args)
    if container.env:
        out["env"] = [{"name": k, "value": v} for k, v in container.env.items()]
    if container.ports:
        out["ports"] = [
            _port(plan, port, f"containers[{index}].ports[{i}]")
            for i, port in enumerate(container.ports)
        ]
    quantities = {
        key: value
        for key, value in (
            ("cpu", container.resources.cpu),
            ("memory", container.resources.memory),
        )
        if value is not None
    }
    quantities.update((kind, str(count)) for kind, count in container.resources.extended.items())
    if container.resources.devices:
        raise PlanError(
            f"containers[{index}].resources.devices",
            "Kubernetes gives devices through its device plugins, not by CDI name: ask for a "
            "count instead (e.g. nvidia.com/gpu: 1) and let the scheduler pick the devices",
        )
    if quantities:
        out["resources"] = {"limits": dict(quantities), "requests": dict(quantities)}
    for check, field in (
        (container.checks.startup, "startupProbe"),
        (container.checks.readiness, "readinessProbe"),
        (container.checks.liveness, "livenessProbe"),
    ):
        if check is not None:
            out[field] = probe_spec(check)
    lifecycle: dict[str, Any] = {}
    if container.pre_stop:
        lifecycle["preStop"] = {"exec": {"command": list(container.pre_stop)}}
    elif container.pre_stop_http is not None:  # the kubelet sends it: nothing in the image
        hook = container.pre_stop_http
        lifecycle["preStop"] = {"httpGet": {"path": hook.path, "port": hook.port}}
    if container.stop_signal:
        try:
            lifecycle["stopSignal"] = stop_signal_name(container.stop_signal)
        except PlanError as exc:
            raise exc.within(f"containers[{index}]") from None
    if lifecycle:
        out["lifecycle"] = lifecycle
    if mounts:
        out["volumeMounts"] = mounts
    return out


def _port(plan: WorkloadPlan, port: Port, path: str) -> dict[str, Any]:
    out: dict[str, Any] = {"containerPort": port.container_port, "protocol": port.protocol.upper()}
    if port.name:
        out["name"] = port.name
    if port.host_port is not None:
        if plan.host_network and port.host_port != port.container_port:
            raise PlanError(
                f"{path}.host_port",
                "with host_network the host port must equal the container port "
                f"({port.container_port}), got {port.host_port}",
            )
        out["hostPort"] = port.host_port
    if port.host_ip:
        out["hostIP"] = port.host_ip
    return out


def _volumes(plan: WorkloadPlan) -> tuple[list[dict[str, Any]], dict[str, list[dict[str, Any]]]]:
    """The Pod's volumes, and each container's volume mounts (shared volumes listed once)."""
    volumes: dict[str, dict[str, Any]] = {}
    mounts: dict[str, list[dict[str, Any]]] = {}
    for container in plan.containers:
        listed = mounts.setdefault(container.name, [])
        for mount in container.mounts:
            name, source = _volume_for(container, mount)
            volumes.setdefault(name, {"name": name, **source})
            entry: dict[str, Any] = {"name": name, "mountPath": mount.target}
            if mount.read_only:
                entry["readOnly"] = True
            listed.append(entry)
        if plan.shm_size is not None:
            volumes[SHM_VOLUME] = {
                "name": SHM_VOLUME,
                "emptyDir": {"medium": "Memory", "sizeLimit": plan.shm_size},
            }
            listed.append({"name": SHM_VOLUME, "mountPath": "/dev/shm"})
    return list(volumes.values()), mounts


def _volume_for(container: Container, mount: Mount) -> tuple[str, dict[str, Any]]:
    if mount.type == "bind":
        assert mount.source is not None
        return volume_name("host", mount.source), {"hostPath": {"path": mount.source}}
    if mount.type == "volume":
        assert mount.source is not None
        return volume_name("vol", mount.source), {"emptyDir": {}}
    # A tmpfs is private to its container, as on Docker.
    return volume_name("tmp", f"{container.name}:{mount.target}"), {
        "emptyDir": {"medium": "Memory"}
    }


def service_name(plan: WorkloadPlan) -> str:
    """The name of a plan's Service: the plan's own name, also for the instances ``replace``
    starts for it (they carry that name as their instance-of label)."""
    return plan.instance_of or plan.name


def service_manifest(plan: WorkloadPlan, *, namespace: str) -> dict[str, Any]:
    """The ClusterIP Service a plan asks for: it selects every Pod of the plan (by
    ``LABEL_SERVICE``), each port sent to its ``target_port`` (default: the same number)."""
    assert plan.service is not None
    name = service_name(plan)
    ports = []
    for port in plan.service.ports:
        entry: dict[str, Any] = {
            "protocol": "TCP",
            "port": port.port,
            "targetPort": port.target_port or port.port,
        }
        if port.name:
            entry["name"] = port.name
        ports.append(entry)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace, "labels": {LABEL_SERVICE: name}},
        "spec": {"type": "ClusterIP", "selector": {LABEL_SERVICE: name}, "ports": ports},
    }
