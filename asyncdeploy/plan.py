"""The declarative workload plan: frozen, validated attrs values.

A plan is built in Python (``WorkloadPlan(name=..., containers=[...])``) or from a mapping or a
YAML/JSON file whose keys are exactly the attribute names (``WorkloadPlan.from_file(path)``).
Every invalid value raises :class:`~asyncdeploy.errors.PlanError` naming the field path, e.g.
``containers[1].resources.memory``.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal, TypeVar

import attrs

from asyncdeploy._plan_fields import (
    EXTENDED_NAME_PATTERN,
    MAX_SECONDS,
    FrozenCounts,
    FrozenMap,
    _args,
    _cdi_names,
    _check_str_tuple,
    _command,
    _cpu,
    _devices,
    _dns_label,
    _env,
    _env_map,
    _exec,
    _extended,
    _fail,
    _grace,
    _label_map,
    _labels,
    _memory,
    _non_empty_str,
    _one_of,
    _optional_str,
    _port_number,
    _positive_int,
    _pre_stop,
    _shm_size,
    _signal,
    _string,
    _strings,
    _tuple_of,
    cdi_kind,
    check_volume_name,
    image_reference,
)
from asyncdeploy.errors import PlanError
from asyncdeploy.labels import PLAN_ROLES, PlanRole
from asyncdeploy.masking import masked_repr

__all__ = [
    "DEFAULT_GATE_IMAGE",
    "DEFAULT_GRACE_PERIOD_SECONDS",
    "DEFAULT_PAUSE_IMAGE",
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
DEFAULT_GATE_IMAGE = "asyncdeploy-gate/gate:latest"  # built by ci/build-gate-image.sh

T = TypeVar("T")
Role = PlanRole
RestartPolicy = Literal["no", "always", "on-failure", "unless-stopped"]
PullPolicy = Literal["IfNotPresent", "Always", "Never"]
_pull_policy = attrs.validators.optional(_one_of("IfNotPresent", "Always", "Never"))


def _nested(kind: type[Any], *, many: bool = False) -> dict[str, Any]:
    return {"nested": kind, "many": many}


def _ports(value: Iterable[Port]) -> tuple[Port, ...]:
    return tuple(value)


def _mounts(value: Iterable[Mount]) -> tuple[Mount, ...]:
    return tuple(value)


def _container_tuple(value: Iterable[Container]) -> tuple[Container, ...]:
    return tuple(value)


# --- the value types -------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class Port:
    """A container port, published on the host through the pause container."""

    container_port: int = attrs.field(validator=_port_number)
    host_port: int | None = attrs.field(default=None, validator=_port_number)
    protocol: str = attrs.field(default="tcp", validator=_one_of("tcp", "udp"))
    host_ip: str = attrs.field(default="", validator=_string)
    name: str | None = attrs.field(default=None, validator=_optional_str)


@attrs.frozen(kw_only=True)
class Mount:
    """A bind mount (``source`` is a host path), a named volume, or a tmpfs."""

    target: str = attrs.field(validator=_non_empty_str)
    source: str | None = attrs.field(default=None, validator=_optional_str)
    type: str = attrs.field(default="bind", validator=_one_of("bind", "volume", "tmpfs"))
    read_only: bool = attrs.field(default=False)
    keep: bool = attrs.field(default=False)  # a volume asyncdeploy creates is never removed

    def __attrs_post_init__(self) -> None:
        if self.keep and self.type != "volume":
            raise PlanError("keep", f"only a volume can be kept, not a {self.type} mount")
        if not self.target.startswith("/"):
            raise PlanError("target", f"must be an absolute path, got {masked_repr(self.target)}")
        if self.type == "bind" and not (self.source or "").startswith("/"):
            raise PlanError("source", "a bind mount needs an absolute host path")
        if self.type == "volume":
            if not self.source:
                raise PlanError("source", "a volume mount needs a volume name")
            check_volume_name(self.source)


@attrs.frozen(kw_only=True)
class Resources:
    """CPU and memory as Kubernetes quantities, kept in canonical form (``0.5`` → ``500m``);
    extended resources as whole counts (``nvidia.com/gpu: 1``, written beside ``cpu`` in a plan
    file); ``devices`` pins devices by CDI name (``nvidia.com/gpu=0``, ``nvidia.com/gpu=all``).

    A count asks the scheduler (Kubernetes) or the engine's GPU driver (Docker) for any N
    devices; pinned devices say which ones. One kind takes one or the other, not both.
    """

    cpu: str | None = attrs.field(default=None, converter=_cpu)
    memory: str | None = attrs.field(default=None, converter=_memory)
    extended: FrozenCounts = attrs.field(
        factory=FrozenCounts,
        converter=_extended,
        metadata={"inline_keys": EXTENDED_NAME_PATTERN},  # plan files write them beside cpu
    )
    devices: tuple[str, ...] = attrs.field(default=(), converter=_devices, validator=_cdi_names)

    def __attrs_post_init__(self) -> None:
        for i, device in enumerate(self.devices):
            if cdi_kind(device) in self.extended:
                raise PlanError(
                    f"devices[{i}]",
                    f"{device!r} pins a {cdi_kind(device)} while the resources also count "
                    f"{self.extended[cdi_kind(device)]} of them: give a count or devices, not both",
                )

    @property
    def accelerated(self) -> bool:
        """Whether the container asks for any device or extended resource (a count above 0)."""
        return bool(self.devices) or any(self.extended.values())

    @staticmethod
    def fold_mapping(data: Mapping[str, Any]) -> dict[str, Any]:
        """Plan-file form → attribute form: ``vendor/resource`` keys go into ``extended``."""
        folded = {k: v for k, v in data.items() if "/" not in str(k)}
        extended = {k: v for k, v in data.items() if "/" in str(k)}
        if extended:
            folded["extended"] = {**(folded.get("extended") or {}), **extended}
        return folded


@attrs.frozen(kw_only=True)
class HTTPGet:
    path: str = attrs.field(default="/", validator=_string)
    port: int = attrs.field(validator=_port_number)

    def __attrs_post_init__(self) -> None:
        if not self.path.startswith("/"):
            raise PlanError("path", f"must start with '/', got {masked_repr(self.path)}")


@attrs.frozen(kw_only=True)
class Probe:
    """A health check: exactly one of ``exec``, ``http`` or ``tcp`` (a port)."""

    exec: tuple[str, ...] | None = attrs.field(
        default=None, converter=_exec, validator=_check_str_tuple
    )
    http: HTTPGet | None = attrs.field(default=None, metadata=_nested(HTTPGet))
    tcp: int | None = attrs.field(default=None)
    period_seconds: int = attrs.field(default=10, validator=_positive_int)
    timeout_seconds: int = attrs.field(default=1, validator=_positive_int)
    failure_threshold: int = attrs.field(default=3, validator=_positive_int)
    initial_delay_seconds: int = attrs.field(default=0, validator=_grace)

    def __attrs_post_init__(self) -> None:
        given = [k for k in ("exec", "http", "tcp") if getattr(self, k) is not None]
        if len(given) != 1:
            raise PlanError("", f"needs exactly one of exec, http, tcp; got {given or 'none'}")
        if self.tcp is not None:
            _port_number(None, attrs.fields(Probe).tcp, self.tcp)


@attrs.frozen(kw_only=True)
class GateReady:
    """The engine's own health path, which the gate checks before it reports ready."""

    path: str = attrs.field(default="/health", validator=_string)

    def __attrs_post_init__(self) -> None:
        if not self.path.startswith("/"):
            raise PlanError("path", f"must start with '/', got {masked_repr(self.path)}")


@attrs.frozen(kw_only=True)
class Gate:
    """A drain gate in front of this container's server (see ``asyncdeploy.gate``).

    The container's first port is what clients reach: the gate listens there, in the same
    network namespace, and passes requests on to ``upstream``, the engine's own port. The
    engine's image needs nothing: its readiness is the gate's (``ready``: its own health path
    answering, else a TCP connect to ``upstream``), and its drain the gate's, before it is
    signalled. ``propagation_seconds``: the longest the drain goes on serving new requests while
    traffic moves away (the kit's propagation window), before it refuses them.
    """

    upstream: int = attrs.field(validator=_port_number)
    ready: GateReady | None = attrs.field(default=None, metadata=_nested(GateReady))
    image: str = attrs.field(default=DEFAULT_GATE_IMAGE, validator=_non_empty_str)
    propagation_seconds: int = attrs.field(default=10, validator=_grace)


@attrs.frozen(kw_only=True)
class Checks:
    """Startup, readiness and liveness checks, kept apart as Kubernetes keeps them."""

    startup: Probe | None = attrs.field(default=None, metadata=_nested(Probe))
    readiness: Probe | None = attrs.field(default=None, metadata=_nested(Probe))
    liveness: Probe | None = attrs.field(default=None, metadata=_nested(Probe))

    def __attrs_post_init__(self) -> None:
        # The engines' health check waits out the startup probe before liveness counts: the sum
        # must fit their durations (int64 nanoseconds), so keep it within the plan's bound.
        if self.liveness is not None and self.startup is not None:
            startup = self.startup.period_seconds * self.startup.failure_threshold
            if self.liveness.initial_delay_seconds + startup > MAX_SECONDS:
                raise PlanError(
                    "startup", f"period_seconds x failure_threshold exceeds {MAX_SECONDS} s"
                )


@attrs.frozen(kw_only=True)
class Container:
    """One init or run container of a workload."""

    name: str = attrs.field(validator=_dns_label)
    image: str = attrs.field(validator=image_reference)
    role: Role = attrs.field(default="run", validator=_one_of(*PLAN_ROLES))
    command: tuple[str, ...] | None = attrs.field(
        default=None, converter=_command, validator=_check_str_tuple
    )
    args: tuple[str, ...] | None = attrs.field(
        default=None, converter=_args, validator=_check_str_tuple
    )
    env: FrozenMap = attrs.field(factory=FrozenMap, converter=_env, validator=_env_map)
    ports: tuple[Port, ...] = attrs.field(
        default=(), converter=_ports, validator=_tuple_of(Port), metadata=_nested(Port, many=True)
    )
    mounts: tuple[Mount, ...] = attrs.field(
        default=(),
        converter=_mounts,
        validator=_tuple_of(Mount),
        metadata=_nested(Mount, many=True),
    )
    resources: Resources = attrs.field(factory=Resources, metadata=_nested(Resources))
    stop_signal: str | None = attrs.field(default=None, validator=_signal)
    pre_stop: tuple[str, ...] | None = attrs.field(
        default=None, converter=_pre_stop, validator=_check_str_tuple
    )
    # A GET the drain sends before the stop signal (Kubernetes' preStop httpGet): on Docker and
    # Podman the deployer sends it from the host to the workload's address, so the image needs
    # no tool for it.
    pre_stop_http: HTTPGet | None = attrs.field(default=None, metadata=_nested(HTTPGet))
    gate: Gate | None = attrs.field(default=None, metadata=_nested(Gate))
    checks: Checks = attrs.field(factory=Checks, metadata=_nested(Checks))
    restart_policy: RestartPolicy = attrs.field(
        default="no", validator=_one_of("no", "always", "on-failure", "unless-stopped")
    )
    # None: IfNotPresent on Docker and Podman, the cluster's own default on Kubernetes.
    image_pull_policy: PullPolicy | None = attrs.field(default=None, validator=_pull_policy)

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
        if any(p.container_port == gate.upstream for p in self.ports):
            raise PlanError(
                "gate.upstream", f"{gate.upstream} is a port the gate would listen on itself"
            )
        if self.pre_stop or self.pre_stop_http is not None:
            raise PlanError("gate", "the gate drains this container: drop its pre_stop hook")


@attrs.frozen(kw_only=True)
class Autoheal:
    """A sidecar that restarts unhealthy containers through the engine socket."""

    image: str = attrs.field(validator=image_reference)
    command: tuple[str, ...] | None = attrs.field(
        default=None, converter=_command, validator=_check_str_tuple
    )
    interval_seconds: int = attrs.field(default=5, validator=_positive_int)


@attrs.frozen(kw_only=True)
class ServicePort:
    """One port of the workload's Service: ``port`` on its cluster IP, sent to ``target_port``
    of the Pod (default: the same number)."""

    port: int = attrs.field(validator=_port_number)
    target_port: int | None = attrs.field(default=None, validator=_port_number)
    name: str | None = attrs.field(default=None, validator=_optional_str)


def _service_ports(value: Iterable[ServicePort]) -> tuple[ServicePort, ...]:
    return tuple(value)


def _some_ports(_: Any, attribute: attrs.Attribute[Any], value: tuple[ServicePort, ...]) -> None:
    _tuple_of(ServicePort)(None, attribute, value)
    if not value:
        raise _fail(attribute, "needs at least one port")
    if len(value) > 1 and not all(p.name for p in value):
        raise _fail(attribute, "name every port when there are several (the API requires it)")


@attrs.frozen(kw_only=True)
class Service:
    """A ClusterIP Service for the workload (Kubernetes): a stable name in front of the plan's
    Pod and of every instance ``replace`` starts for it."""

    ports: tuple[ServicePort, ...] = attrs.field(
        converter=_service_ports, validator=_some_ports, metadata=_nested(ServicePort, many=True)
    )


@attrs.frozen(kw_only=True)
class RegistryAuth:
    """Where the credentials for one registry are: a reference, never the secret itself.

    ``auth_file`` is a Docker ``config.json`` or a Podman ``auth.json``; its ``auths`` entry for
    ``registry`` is read when an image is pulled (Docker and Podman; on Kubernetes the kubelet
    pulls, with the plan's ``image_pull_secrets``).
    """

    registry: str = attrs.field(validator=_non_empty_str)  # host[:port], as in image names
    auth_file: str = attrs.field(validator=_non_empty_str)

    def __attrs_post_init__(self) -> None:
        if "/" in self.registry:
            raise PlanError("registry", f"must be a host[:port], got {self.registry!r}")


def _secret_names(value: Iterable[str] | str | None) -> tuple[str, ...]:
    return _strings("image_pull_secrets", value) or ()  # type: ignore[arg-type]


def _registry_auths(value: Iterable[RegistryAuth]) -> tuple[RegistryAuth, ...]:
    return tuple(value)


def _containers(_: Any, attribute: attrs.Attribute[Any], value: tuple[Container, ...]) -> None:
    _tuple_of(Container)(None, attribute, value)
    if not any(c.role == "run" for c in value):
        raise _fail(attribute, "needs at least one container with role 'run'")
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

    name: str = attrs.field(validator=_dns_label)
    labels: FrozenMap = attrs.field(factory=FrozenMap, converter=_labels, validator=_label_map)
    containers: tuple[Container, ...] = attrs.field(
        converter=_container_tuple, validator=_containers, metadata=_nested(Container, many=True)
    )
    termination_grace_period_seconds: int = attrs.field(
        default=DEFAULT_GRACE_PERIOD_SECONDS, validator=_grace
    )
    host_network: bool = attrs.field(default=False)
    pid_shared: bool = attrs.field(default=True)
    shm_size: str | None = attrs.field(default=None, converter=_shm_size)
    pause_image: str = attrs.field(default=DEFAULT_PAUSE_IMAGE, validator=image_reference)
    autoheal: Autoheal | None = attrs.field(default=None, metadata=_nested(Autoheal))
    namespace: str | None = attrs.field(default=None, validator=_optional_str)
    pause_image_pull_policy: PullPolicy | None = attrs.field(default=None, validator=_pull_policy)
    registry_auth: tuple[RegistryAuth, ...] = attrs.field(
        default=(),
        converter=_registry_auths,
        validator=_tuple_of(RegistryAuth),
        metadata=_nested(RegistryAuth, many=True),
    )
    image_pull_secrets: tuple[str, ...] = attrs.field(
        default=(),
        converter=_secret_names,
        validator=attrs.validators.deep_iterable(_dns_label),
    )
    instance_of: str | None = attrs.field(
        default=None,
        validator=attrs.validators.optional(_dns_label),
        metadata={"internal": True},
    )
    """Set by ``Deployer.replace`` only (never by a plan file, so no plan can forge it): the plan
    name this workload is an instance of, written as ``LABEL_INSTANCE_OF``."""
    service: Service | None = attrs.field(default=None, metadata=_nested(Service))

    @property
    def init_containers(self) -> tuple[Container, ...]:
        return tuple(c for c in self.containers if c.role == "init")

    @property
    def run_containers(self) -> tuple[Container, ...]:
        return tuple(c for c in self.containers if c.role == "run")

    @property
    def sidecar_containers(self) -> tuple[Container, ...]:
        return tuple(c for c in self.containers if c.role == "sidecar")

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> WorkloadPlan:
        """Build a plan from plain data whose keys are exactly the attribute names."""
        try:
            return _structure(cls, data, "")
        except RecursionError:
            raise PlanError("", "the plan is nested too deeply") from None

    @classmethod
    def from_file(cls, path: str | Path) -> WorkloadPlan:
        """Read a YAML or JSON plan file (JSON is YAML, so one parser reads both).

        A key given twice in one mapping is refused, not silently overwritten.
        """
        from asyncdeploy._documents import read_document  # PyYAML: not for the server kit

        return cls.from_mapping(read_document(path))


# --- mapping <-> plan ------------------------------------------------------------------------

_BOOL_FIELDS = {"host_network", "pid_shared", "read_only", "keep"}


def _structure(cls: type[T], data: Any, path: str) -> T:
    """Build ``cls`` from ``data``, recursing into nested plan types, with field paths in errors."""
    if not isinstance(data, Mapping):
        raise PlanError(path, f"must be a mapping, got {type(data).__name__}")
    if cls is Resources:
        data = Resources.fold_mapping(data)
    fields = {f.name: f for f in attrs.fields(cls) if not f.metadata.get("internal")}  # type: ignore[arg-type]
    unknown = sorted(set(data) - set(fields), key=str)
    if unknown:
        key = unknown[0]
        where = _join(path, key) if isinstance(key, str) and key.isidentifier() else None
        raise PlanError(where or f"{path}[{masked_repr(key)}]", "unknown field")
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        field = fields[key]
        nested = field.metadata.get("nested")
        here = _join(path, key)
        if value is None and field.default not in (None, attrs.NOTHING):
            continue  # "checks:" left empty in YAML means the default, as if not written
        if key in _BOOL_FIELDS and not isinstance(value, bool):
            raise PlanError(here, f"must be true or false, got {masked_repr(value)}")
        if nested is not None and field.metadata.get("many"):
            if not isinstance(value, list | tuple):
                raise PlanError(here, f"must be a list, got {type(value).__name__}")
            value = tuple(_structure(nested, item, f"{here}[{i}]") for i, item in enumerate(value))
        elif nested is not None and value is not None:
            value = _structure(nested, value, here)
        kwargs[key] = value
    try:
        return cls(**kwargs)
    except PlanError as exc:
        raise exc.within(path) from None
    except TypeError as exc:
        missing = re.search(r"missing .*'(\w+)'", str(exc))
        if missing is None:
            raise PlanError(path, str(exc)) from None
        raise PlanError(_join(path, missing.group(1)), "is required") from None


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def plan_to_mapping(plan: Any) -> Any:
    """Plain data for a plan (or a part of one): the inverse of ``WorkloadPlan.from_mapping``."""
    if attrs.has(type(plan)):
        out = {}
        for field in attrs.fields(type(plan)):
            value = getattr(plan, field.name)
            default = field.default
            if isinstance(default, attrs.Factory):  # type: ignore[arg-type]
                default = default.factory()
            if default is not attrs.NOTHING and value == default:
                continue
            out[field.name] = plan_to_mapping(value)
        if isinstance(plan, Resources):
            out.update(out.pop("extended", {}))  # written beside cpu and memory, as in a plan file
        return out
    if isinstance(plan, Mapping):
        return {k: plan_to_mapping(v) for k, v in plan.items()}
    if isinstance(plan, tuple | list):
        return [plan_to_mapping(v) for v in plan]
    return plan


def plan_digest(plan: WorkloadPlan) -> str:
    """A short hash of everything the plan declares; equal plans have equal digests."""
    text = json.dumps(plan_to_mapping(plan), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]
