"""Pure translation of a plan into Engine API create configs (Docker and Podman alike).

No I/O here: tests call these functions without an engine.
"""

from __future__ import annotations

import json
import shlex
from decimal import Decimal
from typing import Any

from asyncdeploy.drivers.engine._devices import device_host_config
from asyncdeploy.labels import (
    LABEL_CONTAINER,
    LABEL_GRACE,
    LABEL_INDEX,
    LABEL_INSTANCE_OF,
    LABEL_LIVENESS,
    LABEL_PLAN,
    LABEL_PLAN_DIGEST,
    LABEL_PRE_STOP,
    LABEL_PRE_STOP_HTTP,
    LABEL_PROPAGATION,
    LABEL_READINESS,
    LABEL_READINESS_NET,
    LABEL_RESTART_POLICY,
    LABEL_ROLE,
    LABEL_STOP_SIGNAL,
    LABEL_WORKLOAD,
    autoheal_label,
)
from asyncdeploy.plan import (
    Container,
    Mount,
    Port,
    Probe,
    WorkloadPlan,
    plan_digest,
    plan_record,
)
from asyncdeploy.plan._fields import check_volume_name
from asyncdeploy.plan.propagation import propagation
from asyncdeploy.plan.quantity import parse_quantity

__all__ = [
    "autoheal_config",
    "container_config",
    "container_name",
    "path_segment",
    "pause_config",
    "probe_command",
    "probe_target",
    "refuse_unsupported_devices",
    "volume_name",
]

SOCKET_IN_SIDECAR = "/var/run/docker.sock"
_SECOND_NS = 1_000_000_000


def container_name(workload: str, container: str) -> str:
    """Engine name of a workload's container: ``<workload>_<container>``, ``<workload>_pause``.

    Workload and container names are DNS labels, which never hold ``_``: the name splits back
    one way only, so two workloads never want the same engine name (with ``-``, workload ``a``'s
    container ``x-pause`` and workload ``a-x``'s pause would both be ``a-x-pause``). ``pause``
    and ``autoheal`` are reserved container names, so the sidecars collide with nothing either.
    """
    return f"{workload}_{container}"


def path_segment(name: str) -> str:
    """A volume name checked to be one Engine API URL path segment, before aiodocker sends it.

    aiodocker puts volume names into paths unescaped (``volumes/{name}``) and yarl resolves
    ``..``, so ``../info`` would reach ``GET /info``. Escaping is not enough: Docker's router
    decodes ``%2F`` and cleans the path too (``volumes/..%2Finfo`` is redirected to ``/info``).
    So only names the engines' own rule allows are sent; plans refuse the others already, and
    this holds for any name, whatever its source. Raises ``PlanError``.
    """
    check_volume_name(name, "mounts.source")
    return name


def volume_name(workload: str, mount: Mount) -> str:
    assert mount.source is not None
    return mount.source


def _labels(plan: WorkloadPlan, role: str, container: str) -> dict[str, str]:
    return {
        **plan.labels,
        LABEL_WORKLOAD: plan.name,
        LABEL_ROLE: role,
        LABEL_CONTAINER: container,
        LABEL_GRACE: str(plan.termination_grace_period_seconds),
        LABEL_PLAN_DIGEST: plan_digest(plan),
        **({LABEL_INSTANCE_OF: plan.instance_of} if plan.instance_of else {}),
    }


def _port_key(container_port: int, protocol: str) -> str:
    return f"{container_port}/{protocol}"


LOOPBACK = "127.0.0.1"


def host_address(port: Port) -> str:
    """The host address a port is published on: its ``host_ip``; else every address for a
    fixed ``host_port`` (as ``docker run -p 8000:8000``), and the loopback for a port the engine
    picks: a port the plan does not ask to publish is never opened to the network (a balancer on
    the engine's host reaches it there; Docker's default would bind every interface)."""
    if port.host_ip:
        return port.host_ip
    return "" if port.host_port is not None else LOOPBACK


def pause_config(plan: WorkloadPlan) -> dict[str, Any]:
    """The pause container: owns the network, IPC and PID namespaces and publishes the ports."""
    ports = [p for c in plan.containers for p in c.ports]
    host_config: dict[str, Any] = {
        # Docker's default IPC mode is private; others can only join a shareable one.
        "IpcMode": "shareable",
        "RestartPolicy": {"Name": "no"},
    }
    if plan.host_network:
        host_config["NetworkMode"] = "host"
    else:
        host_config["PortBindings"] = {
            _port_key(p.container_port, p.protocol): [
                {"HostIp": host_address(p), "HostPort": str(p.host_port or "")}
            ]
            for p in ports
        }
    if plan.shm_size is not None:
        host_config["ShmSize"] = int(parse_quantity(plan.shm_size))
    return {
        "Image": plan.pause_image,
        "Labels": {**_labels(plan, "pause", "pause"), LABEL_PLAN: plan_record(plan)},
        "ExposedPorts": {_port_key(p.container_port, p.protocol): {} for p in ports},
        "StopSignal": "SIGTERM",
        "StopTimeout": 1,
        "HostConfig": host_config,
    }


def probe_command(probe: Probe) -> list[str]:
    """The probe as a command run inside the container (busybox wget/nc, else python3)."""
    if probe.exec is not None:
        return list(probe.exec)
    if probe.http is not None:
        url = f"http://127.0.0.1:{probe.http.port}{probe.http.path}"
        py = (
            "import sys,urllib.request;"
            f"urllib.request.urlopen(sys.argv[1],timeout={probe.timeout_seconds})"
        )
        script = (
            f"wget -q -O /dev/null -T {probe.timeout_seconds} {shlex.quote(url)} 2>/dev/null"
            f" || python3 -c {shlex.quote(py)} {shlex.quote(url)} 2>/dev/null"
        )
    else:
        py = (
            "import socket,sys;"
            f"socket.create_connection(('127.0.0.1',int(sys.argv[1])),{probe.timeout_seconds})"
        )
        script = (
            f"nc -z 127.0.0.1 {probe.tcp} 2>/dev/null"
            f" || python3 -c {shlex.quote(py)} {probe.tcp} 2>/dev/null"
        )
    return ["sh", "-c", script]


def probe_target(probe: Probe) -> dict[str, Any] | None:
    """An HTTP or TCP probe as what the deployer checks from outside the container (through
    the workload's address): nothing needs to be in the image. None for an exec probe."""
    if probe.http is not None:
        return {
            "http": {"port": probe.http.port, "path": probe.http.path},
            "timeout": probe.timeout_seconds,
        }
    if probe.tcp is not None:
        return {"tcp": probe.tcp, "timeout": probe.timeout_seconds}
    return None


def _healthcheck(container: Container) -> dict[str, Any] | None:
    """The engine health check carries liveness (what autoheal acts on), never readiness:
    a draining server fails readiness on purpose and must not be restarted for it."""
    probe = container.checks.liveness
    if probe is None:
        return None
    startup = container.checks.startup
    start_period = probe.initial_delay_seconds
    if startup is not None:
        start_period += startup.period_seconds * startup.failure_threshold
    return {
        "Test": ["CMD", *probe_command(probe)],
        "Interval": probe.period_seconds * _SECOND_NS,
        "Timeout": probe.timeout_seconds * _SECOND_NS,
        "Retries": probe.failure_threshold,
        "StartPeriod": start_period * _SECOND_NS,
    }


def _mounts(plan: WorkloadPlan, container: Container) -> list[dict[str, Any]]:
    mounts = []
    for mount in container.mounts:
        spec: dict[str, Any] = {"Target": mount.target, "ReadOnly": mount.read_only}
        if mount.type == "tmpfs":
            spec["Type"] = "tmpfs"
        elif mount.type == "volume":
            spec.update(Type="volume", Source=volume_name(plan.name, mount))
        else:
            spec.update(Type="bind", Source=mount.source)
        mounts.append(spec)
    return mounts


def container_config(
    plan: WorkloadPlan,
    container: Container,
    pause_id: str,
    *,
    engine: str = "docker",
    api_version: str = "",
) -> dict[str, Any]:
    """An init, sidecar or run container that joins the pause container's namespaces.

    ``engine`` and ``api_version`` choose how its devices are asked for (``_devices.py``).
    """
    joined = f"container:{pause_id}"
    host_config: dict[str, Any] = {
        "NetworkMode": joined,
        "IpcMode": joined,
        "RestartPolicy": {"Name": container.restart_policy},
        "Mounts": _mounts(plan, container),
    }
    if plan.pid_shared:
        host_config["PidMode"] = joined
    if container.resources.cpu is not None:
        host_config["NanoCpus"] = int(parse_quantity(container.resources.cpu) * Decimal(10**9))
    if container.resources.memory is not None:
        host_config["Memory"] = int(parse_quantity(container.resources.memory))
    where = f"container {container_name(plan.name, container.name)}"
    host_config.update(
        device_host_config(container, engine=engine, api_version=api_version, where=where)
    )
    labels = _labels(plan, container.role, container.name)
    labels[LABEL_INDEX] = str(plan.containers.index(container))
    if container.pre_stop:
        labels[LABEL_PRE_STOP] = json.dumps(list(container.pre_stop))
    if container.pre_stop_http is not None:
        hook = {"port": container.pre_stop_http.port, "path": container.pre_stop_http.path}
        labels[LABEL_PRE_STOP_HTTP] = json.dumps(hook)
    stop_signal = container.stop_signal or "SIGTERM"
    labels[LABEL_STOP_SIGNAL] = stop_signal
    window = propagation(container)
    if window is not None and window.seconds > 0:
        labels[LABEL_PROPAGATION] = json.dumps({"seconds": window.seconds, "during": window.during})
    labels[LABEL_RESTART_POLICY] = container.restart_policy
    if container.checks.readiness is not None:
        labels[LABEL_READINESS] = json.dumps(probe_command(container.checks.readiness))
        target = probe_target(container.checks.readiness)
        if target is not None:
            labels[LABEL_READINESS_NET] = json.dumps(target)
    if plan.autoheal is not None and container.role == "run":
        labels[autoheal_label(plan.name)] = "true"
    config: dict[str, Any] = {
        "Image": container.image,
        "Labels": labels,
        "Env": [f"{k}={v}" for k, v in container.env.items()],
        "StopSignal": stop_signal,
        "StopTimeout": plan.termination_grace_period_seconds,
        "HostConfig": host_config,
    }
    if container.command is not None:
        config["Entrypoint"] = list(container.command)
    if container.args is not None:
        config["Cmd"] = list(container.args)
    healthcheck = _healthcheck(container)
    if healthcheck is not None:
        config["Healthcheck"] = healthcheck
        labels[LABEL_LIVENESS] = "true"  # the health a list shows is the plan's, and counts
    return config


def refuse_unsupported_devices(plan: WorkloadPlan, *, engine: str, api_version: str) -> None:
    """Raise the CreateError of the first container whose devices ``engine`` cannot give."""
    for container in plan.containers:
        where = f"container {container_name(plan.name, container.name)}"
        device_host_config(container, engine=engine, api_version=api_version, where=where)


def autoheal_config(plan: WorkloadPlan, socket_path: str) -> dict[str, Any]:
    """The autoheal sidecar, with the engine socket mounted as willfarrell/autoheal expects."""
    assert plan.autoheal is not None
    config: dict[str, Any] = {
        "Image": plan.autoheal.image,
        "Labels": _labels(plan, "autoheal", "autoheal"),
        "Env": [
            f"AUTOHEAL_CONTAINER_LABEL={autoheal_label(plan.name)}",
            f"AUTOHEAL_INTERVAL={plan.autoheal.interval_seconds}",
            f"DOCKER_SOCK={SOCKET_IN_SIDECAR}",
        ],
        "HostConfig": {
            "Binds": [f"{socket_path}:{SOCKET_IN_SIDECAR}"],
            "NetworkMode": "none",
            "RestartPolicy": {"Name": "always"},
        },
    }
    if plan.autoheal.command is not None:
        config["Entrypoint"] = list(plan.autoheal.command)
        config["Cmd"] = []
    return config
