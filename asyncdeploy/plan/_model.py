"""The declarative workload plan: frozen, validated attrs values.

A plan is built in Python (``WorkloadPlan(name=..., containers=[...])``) or from a mapping or a
YAML/JSON file whose keys are exactly the attribute names (``WorkloadPlan.from_file(path)``).
Every invalid value raises :class:`~asyncdeploy._errors.PlanError` naming the field path, e.g.
``containers[1].resources.memory``. The values a container is made of live in
``_parts.py`` and are imported from here; the field rules in ``_fields.py``.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import attrs

from asyncdeploy._errors import PlanError
from asyncdeploy.labels import PLAN_ROLES, PlanRole
from asyncdeploy.masking import mask_tree
from asyncdeploy.plan import _fields as rules
from asyncdeploy.plan._fields import DNS_LABEL as DNS_LABEL_SCHEMA
from asyncdeploy.plan._fields import (
    MAX_SECONDS,
    QUANTITY,
    STRINGS_OR_LIST,
    FrozenCounts,
    FrozenMap,
    about,
)
from asyncdeploy.plan._mapping import plan_to_mapping, structure
from asyncdeploy.plan._parts import (
    DEFAULT_GATE_IMAGE,
    GATE_TOKEN_ENV,
    Autoheal,
    Checks,
    Gate,
    GateReady,
    HTTPGet,
    Mount,
    Port,
    Probe,
    PullPolicy,
    RegistryAuth,
    Resources,
    RestartPolicy,
    Service,
    ServicePort,
    pull_policy,
)

__all__ = [
    "DEFAULT_GATE_IMAGE",
    "DEFAULT_GRACE_PERIOD_SECONDS",
    "DEFAULT_PAUSE_IMAGE",
    "GATE_TOKEN_ENV",
    "MAX_SECONDS",
    "Autoheal",
    "Checks",
    "Container",
    "FrozenCounts",
    "FrozenMap",
    "Gate",
    "GateReady",
    "HTTPGet",
    "Mount",
    "Port",
    "Probe",
    "PullPolicy",
    "RegistryAuth",
    "Resources",
    "Service",
    "ServicePort",
    "WorkloadPlan",
    "plan_digest",
    "plan_to_mapping",
]

DEFAULT_GRACE_PERIOD_SECONDS = 30
DEFAULT_PAUSE_IMAGE = "registry.k8s.io/pause:3.10"


@attrs.frozen(kw_only=True)
class Container:
    """One init or run container of a workload."""

    summary: ClassVar[str] = "One init, sidecar or run container of the workload."

    name: str = attrs.field(
        validator=rules.dns_label,
        metadata=about(
            "The container's name within the workload: a DNS label.", schema=DNS_LABEL_SCHEMA
        ),
    )
    image: str = attrs.field(
        validator=rules.image_reference, metadata=about("The image reference.")
    )
    role: PlanRole = attrs.field(
        default="run",
        validator=rules.one_of(*PLAN_ROLES),
        metadata=about(
            "`init` runs to completion before the `run` containers start; a `sidecar` (a proxy, an exporter) starts before them and is signalled only after they have exited."
        ),
    )
    command: tuple[str, ...] | None = attrs.field(
        default=None,
        converter=rules.strings,
        validator=[rules.string_items, rules.non_empty],
        metadata=about(
            "Replaces the image's entrypoint (a list, or one string).", schema=STRINGS_OR_LIST
        ),
    )
    args: tuple[str, ...] | None = attrs.field(
        default=None,
        converter=rules.strings,
        validator=rules.string_items,
        metadata=about(
            "Replaces the image's command arguments (a list, or one string).",
            schema=STRINGS_OR_LIST,
        ),
    )
    env: FrozenMap = attrs.field(
        factory=FrozenMap,
        converter=rules.frozen_map,
        validator=rules.env_map,
        metadata=about(
            "Environment variables; values of secret-looking names are masked wherever printed."
        ),
    )
    ports: tuple[Port, ...] = attrs.field(
        default=(),
        converter=rules.as_tuple,
        validator=rules.tuple_of(Port),
        metadata=about(
            "Ports to publish (on Kubernetes: container ports).", nested=Port, many=True
        ),
    )
    mounts: tuple[Mount, ...] = attrs.field(
        default=(),
        converter=rules.as_tuple,
        validator=rules.tuple_of(Mount),
        metadata=about(
            "Bind mounts, volumes and tmpfs (on Kubernetes, volumes are per-Pod emptyDirs).",
            nested=Mount,
            many=True,
        ),
    )
    resources: Resources = attrs.field(
        factory=Resources,
        metadata=about(
            "CPU and memory limits (on Kubernetes, requests = limits).", nested=Resources
        ),
    )
    stop_signal: str | None = attrs.field(
        default=None,
        validator=rules.signal_name,
        metadata=about("The signal a delete sends first (else the image's, else SIGTERM)."),
    )
    pre_stop: tuple[str, ...] | None = attrs.field(
        default=None,
        converter=rules.strings,
        validator=[rules.string_items, rules.non_empty],
        metadata=about(
            "A command run in the container before its stop signal, inside the deadline (for example `asyncdeploy drain --propagation-wait 10s`).",
            schema=STRINGS_OR_LIST,
        ),
    )
    # A GET the drain sends before the stop signal (Kubernetes' preStop httpGet): on Docker and
    # Podman the deployer sends it from the host to the workload's address, so the image needs
    # no tool for it.
    pre_stop_http: HTTPGet | None = attrs.field(
        default=None,
        metadata=about(
            "A GET sent before the stop signal, inside the deadline (Kubernetes: a preStop `httpGet`; Docker and Podman: sent by the deployer to the workload's address): nothing needs to be in the image.",
            nested=HTTPGet,
        ),
    )
    gate: Gate | None = attrs.field(
        default=None,
        metadata=about(
            "Put a drain gate in front of this container: it becomes a sidecar that listens on the container's first port, passes requests on to `upstream` and drains before the container is signalled.",
            nested=Gate,
        ),
    )
    checks: Checks = attrs.field(
        factory=Checks, metadata=about("Startup, readiness and liveness checks.", nested=Checks)
    )
    restart_policy: RestartPolicy = attrs.field(
        default="no",
        validator=rules.one_of("no", "always", "on-failure", "unless-stopped"),
        metadata=about(
            "What the engine does when the container exits (Kubernetes: the Pod's policy).",
            "Docker, Podman",
        ),
    )
    # None: IfNotPresent on Docker and Podman, the cluster's own default on Kubernetes.
    image_pull_policy: PullPolicy | None = attrs.field(
        default=None,
        validator=pull_policy,
        metadata=about(
            "When to pull the image: `IfNotPresent`, `Always`, `Never`. Unset: `IfNotPresent` on Docker and Podman (local `:latest` images keep working offline), the cluster's default on Kubernetes. Every image is pulled once, concurrently, before anything is created."
        ),
    )

    def __attrs_post_init__(self) -> None:
        if self.role == "init" and self.restart_policy != "no":
            raise PlanError("restart_policy", "an init container runs once: use 'no'")
        if self.role == "init" and (self.pre_stop or self.pre_stop_http or self.checks != Checks()):
            raise PlanError("role", "an init container takes no pre_stop hook and no checks")
        if self.pre_stop and self.pre_stop_http is not None:
            raise PlanError("pre_stop_http", "give pre_stop or pre_stop_http, not both")
        if self.gate is not None:
            self._check_gate(self.gate)

    def _check_gate(self, gate: Gate) -> None:
        if self.role != "run":
            raise PlanError("gate", "only a run container can have a gate in front of it")
        tcp = [p for p in self.ports if p.protocol == "tcp"]
        if not tcp:
            raise PlanError("gate", "needs a tcp port in ports: the one the gate listens on")
        if any(p.container_port == gate.admin_port for p in self.ports):
            raise PlanError(
                "gate.admin_port",
                f"{gate.admin_port} is in ports: the admin port must not be one clients reach",
            )
        if any(p.container_port == gate.upstream for p in self.ports):
            raise PlanError(
                "gate.upstream", f"{gate.upstream} is a port the gate would listen on itself"
            )
        if self.pre_stop or self.pre_stop_http is not None:
            raise PlanError("gate", "the gate drains this container: drop its pre_stop hook")


def _containers(_: Any, attribute: attrs.Attribute[Any], value: tuple[Container, ...]) -> None:
    rules.tuple_of(Container)(None, attribute, value)
    if not any(c.role == "run" for c in value):
        raise PlanError(attribute.name, "needs at least one container with role 'run'")
    seen: set[str] = set()
    for i, container in enumerate(value):
        if container.name in seen:
            raise PlanError(f"containers[{i}].name", f"{container.name!r} is used twice")
        if container.name in ("pause", "autoheal"):
            raise PlanError(f"containers[{i}].name", f"{container.name!r} is reserved")
        seen.add(container.name)
    for i, container in enumerate(value):
        if container.gate is not None and gate_name(container.name) in seen:
            raise PlanError(
                f"containers[{i}].gate",
                f"its sidecar would be named {gate_name(container.name)!r}, which is taken",
            )


def gate_name(container: str) -> str:
    """The name of the sidecar a container's gate becomes."""
    return f"{container}-gate"[:63]


@attrs.frozen(kw_only=True)
class WorkloadPlan:
    """Everything asyncdeploy needs to create, replace and drain one workload."""

    summary: ClassVar[str] = (
        "Everything asyncdeploy needs to create, replace and drain one workload."
    )

    name: str = attrs.field(
        validator=rules.dns_label,
        metadata=about(
            "The workload's name: a DNS label (lower-case letters, digits, '-'; at most 63).",
            schema=DNS_LABEL_SCHEMA,
        ),
    )
    labels: FrozenMap = attrs.field(
        factory=FrozenMap,
        converter=rules.frozen_map,
        validator=rules.label_map,
        metadata=about(
            "Labels put on every container (or the Pod); selectors of `list` and `delete-all` match them."
        ),
    )
    containers: tuple[Container, ...] = attrs.field(
        converter=rules.as_tuple,
        validator=_containers,
        metadata=about(
            "The init containers (run one after another to completion, in order) and run containers (started together); at least one `run`.",
            nested=Container,
            many=True,
        ),
    )
    termination_grace_period_seconds: int = attrs.field(
        default=DEFAULT_GRACE_PERIOD_SECONDS,
        validator=rules.seconds,
        metadata=about(
            "Seconds between the stop signal and SIGKILL on delete; one deadline for the whole workload. A delete's `grace_period_seconds` overrides it."
        ),
    )
    host_network: bool = attrs.field(
        default=False, metadata=about("Share the host's network namespace instead of a bridge.")
    )
    pid_shared: bool = attrs.field(
        default=True,
        metadata=about("Containers share one PID namespace (the pause container's, or the Pod's)."),
    )
    shm_size: str | None = attrs.field(
        default=None,
        converter=rules.memory_quantity,
        validator=rules.quantity_of("memory"),
        metadata=about(
            "Size of /dev/shm shared by the containers (a memory quantity, e.g. `16Gi`): inference servers need it for tensor-parallel workers.",
            schema=QUANTITY,
        ),
    )
    pause_image: str = attrs.field(
        default=DEFAULT_PAUSE_IMAGE,
        validator=rules.image_reference,
        metadata=about(
            "The image of the pause container that holds the namespaces.",
            "Docker, Podman (Kubernetes: ignored, the Pod sandbox is the pause)",
        ),
    )
    autoheal: Autoheal | None = attrs.field(
        default=None,
        metadata=about(
            "An optional sidecar restarting unhealthy containers; removed first on delete.",
            "Docker, Podman (Kubernetes: ignored, liveness probes restart)",
            nested=Autoheal,
        ),
    )
    namespace: str | None = attrs.field(
        default=None,
        validator=rules.optional_str,
        metadata=about(
            "The Kubernetes namespace (else the context's, else `default`).", "Kubernetes"
        ),
    )
    pause_image_pull_policy: PullPolicy | None = attrs.field(
        default=None,
        validator=pull_policy,
        metadata=about(
            "When to pull the pause image: `IfNotPresent` (unset), `Always`, `Never`.",
            "Docker, Podman (Kubernetes: ignored, the Pod sandbox is the pause)",
        ),
    )
    registry_auth: tuple[RegistryAuth, ...] = attrs.field(
        default=(),
        converter=rules.as_tuple,
        validator=rules.tuple_of(RegistryAuth),
        metadata=about(
            "Credentials files per registry, read when an image is pulled (before the engines' own `~/.docker/config.json`, `$REGISTRY_AUTH_FILE`); never printed.",
            "Docker, Podman (Kubernetes: `image_pull_secrets`)",
            nested=RegistryAuth,
            many=True,
        ),
    )
    image_pull_secrets: tuple[str, ...] = attrs.field(
        default=(),
        converter=rules.names,
        validator=[rules.string_list, attrs.validators.deep_iterable(rules.dns_label)],
        metadata=about(
            "Names of Secrets the kubelet pulls with (the Pod's `imagePullSecrets`).",
            "Kubernetes",
            schema=STRINGS_OR_LIST,
        ),
    )
    node_selector: FrozenMap = attrs.field(
        factory=FrozenMap,
        converter=rules.frozen_map,
        validator=rules.node_labels,
        metadata=about(
            "Run the Pod only on a node carrying every one of these labels (the Pod's `nodeSelector`; `kubernetes.io/hostname: NODE` names one node). Docker and Podman refuse a plan that sets it (exit 2): they run on their one host, which is not a node the selector picks.",
            "Kubernetes",
        ),
    )
    instance_of: str | None = attrs.field(
        default=None,
        validator=attrs.validators.optional(rules.dns_label),
        metadata={"internal": True},
    )
    """Set by ``Deployer.replace`` only (never by a plan file, so no plan can forge it): the plan
    name this workload is an instance of, written as ``LABEL_INSTANCE_OF``."""
    service: Service | None = attrs.field(
        default=None,
        metadata=about(
            "A ClusterIP Service named after the plan, selecting its Pod and every instance `replace` starts for it (a stable name across replacements); created with the workload, deleted with the last of its instances. A drain reports when the Pod has left the Service's ready endpoints (`TrafficLeft`).",
            "Kubernetes",
            nested=Service,
        ),
    )

    @property
    def init_containers(self) -> tuple[Container, ...]:
        """The ``init`` containers, in plan order (run one after another before the rest)."""
        return tuple(c for c in self.containers if c.role == "init")

    @property
    def run_containers(self) -> tuple[Container, ...]:
        """The ``run`` containers, in plan order (the servers)."""
        return tuple(c for c in self.containers if c.role == "run")

    @property
    def sidecar_containers(self) -> tuple[Container, ...]:
        """The ``sidecar`` containers (a gate, a proxy), in plan order."""
        return tuple(c for c in self.containers if c.role == "sidecar")

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> WorkloadPlan:
        """Build a plan from plain data whose keys are exactly the attribute names."""
        try:
            return structure(cls, data, "")
        except RecursionError:
            raise PlanError("", "the plan is nested too deeply") from None

    @classmethod
    def from_file(cls, path: str | Path) -> WorkloadPlan:
        """Read a YAML or JSON plan file (JSON is YAML, so one parser reads both).

        A key given twice in one mapping is refused, not silently overwritten.
        """
        from asyncdeploy.plan._documents import read_document  # PyYAML: not for the server kit

        return cls.from_mapping(read_document(path))


_HOOK_TOKEN = re.compile(r"([?&]token=)[^&]*")


def plan_digest(plan: WorkloadPlan) -> str:
    """A short hash of everything the plan declares; equal plans have equal digests.

    A gate's admin token is drawn fresh each time a plan is expanded (``plan.gating``): the
    digest covers where it goes (the gate's environment, the drain hook's query), not its
    value, so the same plan applied again is unchanged and keeps the token it runs with.
    """
    mapping = plan_to_mapping(plan)
    for container in mapping.get("containers", ()):
        env = container.get("env")
        if env and GATE_TOKEN_ENV in env:
            env[GATE_TOKEN_ENV] = "*"
        hook = container.get("pre_stop_http")
        if hook and "path" in hook:  # a default path ("/") is left out of the mapping
            hook["path"] = _HOOK_TOKEN.sub(r"\1*", hook["path"])
    text = json.dumps(mapping, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def plan_record(plan: WorkloadPlan) -> str:
    """The plan as the workload records it (``LABEL_PLAN``): what a failed recreate brings back.
    ``instance_of`` is kept too (a plan file cannot write it, so it is carried beside)."""
    data = plan_to_mapping(attrs.evolve(plan, instance_of=None))
    return json.dumps({"plan": data, "instance_of": plan.instance_of}, sort_keys=True)


def plan_from_record(text: str | None) -> WorkloadPlan | None:
    """The plan a workload recorded (:func:`plan_record`); None when there is none, or it cannot
    be read (made by an older asyncdeploy, or a plan field this one does not know)."""
    if not text:
        return None
    try:
        raw = json.loads(text)
        plan = WorkloadPlan.from_mapping(raw["plan"])
        return attrs.evolve(plan, instance_of=raw.get("instance_of") or None)
    except (ValueError, KeyError, TypeError):  # PlanError is a ValueError
        return None


def masked_plan_record(text: str) -> str:
    """A recorded plan as ``inspect`` may print it: its env values masked by their names."""
    try:
        return json.dumps(mask_tree(json.loads(text)), sort_keys=True)
    except ValueError:
        return mask_tree(text)  # type: ignore[no-any-return]
