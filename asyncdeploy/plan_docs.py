"""What every plan field means, and which engines honour it: the one source of the plan reference.

:mod:`asyncdeploy.schema` joins these words with the plan's attrs model to produce both the JSON
Schema and the reference page, so neither can drift from the code: a field without an entry here
fails the tests.
"""

from __future__ import annotations

import attrs

__all__ = ["ALL_ENGINES", "FIELD_DOCS", "TYPE_DOCS", "FieldDoc"]

ALL_ENGINES = "all"


@attrs.frozen
class FieldDoc:
    text: str
    engines: str = ALL_ENGINES  # where it is honoured, in words: "all", "Docker, Podman", ...


TYPE_DOCS: dict[str, str] = {
    "WorkloadPlan": "Everything asyncdeploy needs to create, replace and drain one workload.",
    "Container": "One init or run container of the workload.",
    "Port": "A container port, published on the host through the pause container.",
    "Mount": "A bind mount (`source` is a host path), a named volume, or a tmpfs.",
    "Resources": "CPU and memory as Kubernetes quantities, kept in canonical form; "
    "extended resources (`nvidia.com/gpu: 1`) as whole counts beside them; pinned devices.",
    "Checks": "Startup, readiness and liveness checks, kept apart as Kubernetes keeps them.",
    "Probe": "A health check: exactly one of `exec`, `http` or `tcp`.",
    "HTTPGet": "An HTTP GET health check; any status from 200 to 399 passes.",
    "Autoheal": "A sidecar that restarts unhealthy containers through the engine socket.",
    "RegistryAuth": "Where the credentials for one registry are: a file, never the secret itself.",
}

_K8S_IGNORES = "Docker, Podman (Kubernetes: ignored, the Pod sandbox is the pause)"

FIELD_DOCS: dict[str, FieldDoc] = {
    # WorkloadPlan
    "WorkloadPlan.name": FieldDoc(
        "The workload's name: a DNS label (lower-case letters, digits, '-'; at most 63)."
    ),
    "WorkloadPlan.labels": FieldDoc(
        "Labels put on every container (or the Pod); selectors of `list` and `delete-all` match "
        "them."
    ),
    "WorkloadPlan.containers": FieldDoc(
        "The init containers (run one after another to completion, in order) and run "
        "containers (started together); at least one `run`."
    ),
    "WorkloadPlan.termination_grace_period_seconds": FieldDoc(
        "Seconds between the stop signal and SIGKILL on delete; one deadline for the whole "
        "workload. A delete's `grace_period_seconds` overrides it."
    ),
    "WorkloadPlan.host_network": FieldDoc(
        "Share the host's network namespace instead of a bridge."
    ),
    "WorkloadPlan.pid_shared": FieldDoc(
        "Containers share one PID namespace (the pause container's, or the Pod's)."
    ),
    "WorkloadPlan.shm_size": FieldDoc(
        "Size of /dev/shm shared by the containers (a memory quantity, e.g. `16Gi`): inference "
        "servers need it for tensor-parallel workers."
    ),
    "WorkloadPlan.pause_image": FieldDoc(
        "The image of the pause container that holds the namespaces.", _K8S_IGNORES
    ),
    "WorkloadPlan.autoheal": FieldDoc(
        "An optional sidecar restarting unhealthy containers; removed first on delete.",
        _K8S_IGNORES.replace("the Pod sandbox is the pause", "liveness probes restart"),
    ),
    "WorkloadPlan.pause_image_pull_policy": FieldDoc(
        "When to pull the pause image: `IfNotPresent` (unset), `Always`, `Never`.", _K8S_IGNORES
    ),
    "WorkloadPlan.registry_auth": FieldDoc(
        "Credentials files per registry, read when an image is pulled (before the engines' own "
        "`~/.docker/config.json`, `$REGISTRY_AUTH_FILE`); never printed.",
        "Docker, Podman (Kubernetes: `image_pull_secrets`)",
    ),
    "WorkloadPlan.image_pull_secrets": FieldDoc(
        "Names of Secrets the kubelet pulls with (the Pod's `imagePullSecrets`).", "Kubernetes"
    ),
    "WorkloadPlan.namespace": FieldDoc(
        "The Kubernetes namespace (else the context's, else `default`).", "Kubernetes"
    ),
    # Container
    "Container.name": FieldDoc("The container's name within the workload: a DNS label."),
    "Container.image": FieldDoc("The image reference."),
    "Container.role": FieldDoc("`init` runs to completion before the `run` containers start."),
    "Container.image_pull_policy": FieldDoc(
        "When to pull the image: `IfNotPresent`, `Always`, `Never`. Unset: `IfNotPresent` on "
        "Docker and Podman (local `:latest` images keep working offline), the cluster's default "
        "on Kubernetes. Every image is pulled once, concurrently, before anything is created."
    ),
    "Container.command": FieldDoc("Replaces the image's entrypoint (a list, or one string)."),
    "Container.args": FieldDoc("Replaces the image's command arguments (a list, or one string)."),
    "Container.env": FieldDoc(
        "Environment variables; values of secret-looking names are masked wherever printed."
    ),
    "Container.ports": FieldDoc("Ports to publish (on Kubernetes: container ports)."),
    "Container.mounts": FieldDoc(
        "Bind mounts, volumes and tmpfs (on Kubernetes, volumes are per-Pod emptyDirs)."
    ),
    "Container.resources": FieldDoc("CPU and memory limits (on Kubernetes, requests = limits)."),
    "Container.stop_signal": FieldDoc(
        "The signal a delete sends first (else the image's, else SIGTERM)."
    ),
    "Container.pre_stop": FieldDoc(
        "A command run in the container before its stop signal, inside the deadline (for "
        "example `asyncdeploy drain --propagation-wait 10s`)."
    ),
    "Container.checks": FieldDoc("Startup, readiness and liveness checks."),
    "Container.restart_policy": FieldDoc(
        "What the engine does when the container exits (Kubernetes: the Pod's policy).",
        "Docker, Podman",
    ),
    # Port
    "Port.container_port": FieldDoc("The port inside the container."),
    "Port.host_port": FieldDoc("The host port (else none is published)."),
    "Port.protocol": FieldDoc("`tcp` or `udp`."),
    "Port.host_ip": FieldDoc("The host address to bind (else every address).", "Docker, Podman"),
    "Port.name": FieldDoc("A name for the port (Kubernetes port names).", "Kubernetes"),
    # Mount
    "Mount.target": FieldDoc("The absolute path inside the container."),
    "Mount.source": FieldDoc("The host path (bind) or the volume name (volume)."),
    "Mount.type": FieldDoc(
        "`bind`, `volume` (created with the workload unless it exists; shared by every instance "
        "of the plan across `replace`, removed with the last one if asyncdeploy created it) or "
        "`tmpfs`."
    ),
    "Mount.read_only": FieldDoc("Mount read-only."),
    "Mount.keep": FieldDoc(
        "A volume asyncdeploy creates is kept as data when the last instance goes.",
        "Docker, Podman",
    ),
    # Resources
    "Resources.cpu": FieldDoc("A CPU quantity: `2`, `0.5` or `500m`."),
    "Resources.memory": FieldDoc("A memory quantity: `512Mi`, `16Gi`, `1G`."),
    "Resources.extended": FieldDoc(
        "An extended resource and its whole count, written beside `cpu`: `nvidia.com/gpu: 1`. "
        "Docker counts only `nvidia.com/gpu` (NVIDIA container toolkit); Podman cannot count: "
        "pin `devices` there.",
        "Kubernetes (limits = requests), Docker (nvidia.com/gpu only)",
    ),
    "Resources.devices": FieldDoc(
        "Pinned devices by CDI name `vendor/class=name`: `nvidia.com/gpu=0`, "
        "`nvidia.com/gpu=all`. A kind is counted or pinned, not both.",
        "Docker (NVIDIA; other vendors from Docker 25), Podman (CDI specs in /etc/cdi); "
        "Kubernetes: refused, use a count",
    ),
    # Checks
    "Checks.startup": FieldDoc("Must pass before readiness and liveness are checked."),
    "Checks.readiness": FieldDoc(
        "`create --wait` and `wait_ready` wait for it; load balancers follow it."
    ),
    "Checks.liveness": FieldDoc(
        "A failing liveness check restarts the container (Docker: HEALTHCHECK with autoheal; "
        "Kubernetes: the kubelet).",
        "Docker, Kubernetes (Podman: no health timers without systemd)",
    ),
    # Probe
    "Probe.exec": FieldDoc("A command run in the container; exit 0 passes."),
    "Probe.http": FieldDoc("An HTTP GET against the container."),
    "Probe.tcp": FieldDoc("A port that must accept a TCP connection."),
    "Probe.period_seconds": FieldDoc("Seconds between checks."),
    "Probe.timeout_seconds": FieldDoc("Seconds one check may take."),
    "Probe.failure_threshold": FieldDoc("Failures in a row before the check counts as failed."),
    "Probe.initial_delay_seconds": FieldDoc("Seconds before the first check."),
    # HTTPGet
    "HTTPGet.path": FieldDoc("The request path."),
    "HTTPGet.port": FieldDoc("The container port."),
    # RegistryAuth
    "RegistryAuth.registry": FieldDoc("The registry, `host[:port]` as in image names."),
    "RegistryAuth.auth_file": FieldDoc(
        "A Docker `config.json` or Podman `auth.json` whose `auths` entry for it is used."
    ),
    # Autoheal
    "Autoheal.image": FieldDoc("The sidecar's image (it gets the engine socket mounted)."),
    "Autoheal.command": FieldDoc("Replaces the image's entrypoint."),
    "Autoheal.interval_seconds": FieldDoc("Seconds between the sidecar's checks."),
}
