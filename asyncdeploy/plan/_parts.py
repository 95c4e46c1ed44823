"""The values a workload plan is made of: ports, mounts, resources, checks, the drain gate, the
Service and registry credentials. Frozen, validated attrs values; each field carries its words
for the reference page (:func:`~asyncdeploy.plan._fields.about`).

:mod:`asyncdeploy.plan` composes them into ``Container`` and ``WorkloadPlan``, and is where they
are imported from.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import attrs

from asyncdeploy._errors import PlanError
from asyncdeploy.builtin_images import GATE_IMAGE
from asyncdeploy.masking import masked_repr
from asyncdeploy.plan._fields import (
    EXTENDED_NAME_PATTERN,
    MAX_SECONDS,
    QUANTITY,
    STRINGS_OR_LIST,
    FrozenCounts,
    about,
    as_tuple,
    cdi_kind,
    cdi_names,
    check_volume_name,
    cpu_quantity,
    device_names,
    extended_counts,
    extended_names,
    image_reference,
    memory_quantity,
    non_empty,
    non_empty_str,
    one_of,
    optional_port_number,
    optional_str,
    port_number,
    positive_int,
    quantity_of,
    seconds,
    string,
    string_items,
    strings,
    tuple_of,
)

__all__ = [
    "DEFAULT_GATE_IMAGE",
    "GATE_TOKEN_ENV",
    "Autoheal",
    "Checks",
    "Gate",
    "GateReady",
    "HTTPGet",
    "Mount",
    "Port",
    "Probe",
    "PullPolicy",
    "RegistryAuth",
    "Resources",
    "RestartPolicy",
    "Service",
    "ServicePort",
]

DEFAULT_GATE_IMAGE = GATE_IMAGE  # built on the engine by `asyncdeploy images build gate`
#: The environment variable that hands a gate its admin token (``plan.gating`` draws a fresh
#: one per expansion; ``plan_digest`` covers where it goes, not its value).
GATE_TOKEN_ENV = "ASYNCDEPLOY_GATE_TOKEN"

RestartPolicy = Literal["no", "always", "on-failure", "unless-stopped"]
PullPolicy = Literal["IfNotPresent", "Always", "Never"]
GateProtocol = Literal["http1", "h2c"]
pull_policy = attrs.validators.optional(one_of("IfNotPresent", "Always", "Never"))


@attrs.frozen(kw_only=True)
class Port:
    """A container port, published on the host through the pause container."""

    summary: ClassVar[str] = "A container port, published on the host through the pause container."

    container_port: int = attrs.field(
        validator=port_number, metadata=about("The port inside the container.")
    )
    host_port: int | None = attrs.field(
        default=None,
        validator=optional_port_number,
        metadata=about(
            "The host port. Without it, Docker and Podman publish the port on a free host "
            "port the engine picks, on 127.0.0.1 only (or `host_ip`); Kubernetes publishes none."
        ),
    )
    protocol: str = attrs.field(
        default="tcp", validator=one_of("tcp", "udp"), metadata=about("`tcp` or `udp`.")
    )
    host_ip: str = attrs.field(
        default="",
        validator=string,
        metadata=about(
            "The host address to bind (else every address for a `host_port`, 127.0.0.1 without).",
            "Docker, Podman",
        ),
    )
    name: str | None = attrs.field(
        default=None,
        validator=optional_str,
        metadata=about("A name for the port (Kubernetes port names).", "Kubernetes"),
    )


@attrs.frozen(kw_only=True)
class Mount:
    """A bind mount (``source`` is a host path), a named volume, or a tmpfs."""

    summary: ClassVar[str] = "A bind mount (`source` is a host path), a named volume, or a tmpfs."

    target: str = attrs.field(
        validator=non_empty_str, metadata=about("The absolute path inside the container.")
    )
    source: str | None = attrs.field(
        default=None,
        validator=optional_str,
        metadata=about("The host path (bind) or the volume name (volume)."),
    )
    type: str = attrs.field(
        default="bind",
        validator=one_of("bind", "volume", "tmpfs"),
        metadata=about(
            "`bind`, `volume` (created with the workload unless it exists; shared by every instance of the plan across `replace`, removed with the last one if asyncdeploy created it) or `tmpfs`."
        ),
    )
    read_only: bool = attrs.field(default=False, metadata=about("Mount read-only."))
    # a volume asyncdeploy creates is never removed
    keep: bool = attrs.field(
        default=False,
        metadata=about(
            "A volume asyncdeploy creates is kept as data when the last instance goes.",
            "Docker, Podman",
        ),
    )

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

    summary: ClassVar[str] = (
        "CPU and memory as Kubernetes quantities, kept in canonical form; extended resources (`nvidia.com/gpu: 1`) as whole counts beside them; pinned devices."
    )

    cpu: str | None = attrs.field(
        default=None,
        converter=cpu_quantity,
        validator=quantity_of("cpu"),
        metadata=about("A CPU quantity: `2`, `0.5` or `500m`.", schema=QUANTITY),
    )
    memory: str | None = attrs.field(
        default=None,
        converter=memory_quantity,
        validator=quantity_of("memory"),
        metadata=about("A memory quantity: `512Mi`, `16Gi`, `1G`.", schema=QUANTITY),
    )
    extended: FrozenCounts = attrs.field(
        factory=FrozenCounts,
        converter=extended_counts,
        validator=extended_names,
        metadata=about(
            "An extended resource and its whole count, written beside `cpu`: `nvidia.com/gpu: 1`. Docker counts only `nvidia.com/gpu` (NVIDIA container toolkit); Podman cannot count: pin `devices` there.",
            "Kubernetes (limits = requests), Docker (nvidia.com/gpu only)",
            inline_keys=EXTENDED_NAME_PATTERN,
        ),
    )
    devices: tuple[str, ...] = attrs.field(
        default=(),
        converter=device_names,
        validator=cdi_names,
        metadata=about(
            "Pinned devices by CDI name `vendor/class=name`: `nvidia.com/gpu=0`, `nvidia.com/gpu=all`. A kind is counted or pinned, not both.",
            "Docker (NVIDIA; other vendors from Docker 25), Podman (CDI specs in /etc/cdi); Kubernetes: refused, use a count",
        ),
    )

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


@attrs.frozen(kw_only=True)
class HTTPGet:
    """An HTTP GET on a container port: a check's, or a ``pre_stop_http`` hook's."""

    summary: ClassVar[str] = "An HTTP GET health check; any status from 200 to 399 passes."

    path: str = attrs.field(default="/", validator=string, metadata=about("The request path."))
    port: int = attrs.field(validator=port_number, metadata=about("The container port."))

    def __attrs_post_init__(self) -> None:
        if not self.path.startswith("/"):
            raise PlanError("path", f"must start with '/', got {masked_repr(self.path)}")


@attrs.frozen(kw_only=True)
class Probe:
    """A health check: exactly one of ``exec``, ``http`` or ``tcp`` (a port)."""

    summary: ClassVar[str] = "A health check: exactly one of `exec`, `http` or `tcp`."

    exec: tuple[str, ...] | None = attrs.field(
        default=None,
        converter=strings,
        validator=[string_items, non_empty],
        metadata=about("A command run in the container; exit 0 passes.", schema=STRINGS_OR_LIST),
    )
    http: HTTPGet | None = attrs.field(
        default=None, metadata=about("An HTTP GET against the container.", nested=HTTPGet)
    )
    tcp: int | None = attrs.field(
        default=None, metadata=about("A port that must accept a TCP connection.")
    )
    period_seconds: int = attrs.field(
        default=10, validator=positive_int, metadata=about("Seconds between checks.")
    )
    timeout_seconds: int = attrs.field(
        default=1, validator=positive_int, metadata=about("Seconds one check may take.")
    )
    failure_threshold: int = attrs.field(
        default=3,
        validator=positive_int,
        metadata=about("Failures in a row before the check counts as failed."),
    )
    initial_delay_seconds: int = attrs.field(
        default=0, validator=seconds, metadata=about("Seconds before the first check.")
    )

    def __attrs_post_init__(self) -> None:
        given = [k for k in ("exec", "http", "tcp") if getattr(self, k) is not None]
        if len(given) != 1:
            raise PlanError("", f"needs exactly one of exec, http, tcp; got {given or 'none'}")
        if self.tcp is not None:
            port_number(None, attrs.fields(Probe).tcp, self.tcp)


@attrs.frozen(kw_only=True)
class GateReady:
    """The engine's own health path, which the gate checks before it reports ready."""

    summary: ClassVar[str] = (
        "The engine's own health path, which the gate checks before it reports ready."
    )

    path: str = attrs.field(
        default="/health",
        validator=string,
        metadata=about("The path; any status from 200 to 399 passes."),
    )

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

    summary: ClassVar[str] = (
        "A drain gate in front of the container's server: a proxy in the same network namespace that gives an image you cannot change the drain kit's readiness and drain."
    )

    upstream: int = attrs.field(
        validator=port_number,
        metadata=about("The engine's own port on 127.0.0.1 (the gate listens on the first port)."),
    )
    ready: GateReady | None = attrs.field(
        default=None,
        metadata=about(
            "The engine's health path the gate checks before it reports ready (else a TCP connect).",
            nested=GateReady,
        ),
    )
    image: str = attrs.field(
        default=DEFAULT_GATE_IMAGE,
        validator=non_empty_str,
        metadata=about(
            "The gate's image (built on the engine by `asyncdeploy images build gate`; never pulled)."
        ),
    )
    propagation_seconds: int = attrs.field(
        default=10,
        validator=seconds,
        metadata=about(
            "The longest the drain goes on serving new requests while traffic moves away (the kit's propagation window; it closes earlier once a readiness probe saw the drain and requests stopped), before it refuses them with 503."
        ),
    )
    admin_port: int = attrs.field(
        default=9901,
        validator=port_number,
        metadata=about(
            "The gate's admin port: its drain, reached by the container's pre-stop hook with a per-workload token (never published, never in a Service; keep it off every port clients reach)."
        ),
    )

    header_timeout_seconds: int = attrs.field(
        default=10,
        validator=positive_int,
        metadata=about(
            "From a request head's first byte (a new connection's opening) to its end: past it the client gets 408 and the connection closes (HAProxy's `timeout http-request`)."
        ),
    )
    idle_timeout_seconds: int = attrs.field(
        default=120,
        validator=positive_int,
        metadata=about(
            "A kept-alive client connection with no request for this long is closed (keep it above your balancer's idle time for its connections to the gate)."
        ),
    )
    max_connections: int | None = attrs.field(
        default=None,
        validator=attrs.validators.optional(positive_int),
        metadata=about(
            "Client connections the gate holds at once; past it a newcomer gets 503 and is closed (default: half the gate's descriptor limit less a reserve)."
        ),
    )

    protocol: GateProtocol = attrs.field(
        default="http1",
        validator=one_of("http1", "h2c"),
        metadata=about(
            "What the engine speaks on `upstream`: `http1` (HTTP/1.1) or `h2c` (HTTP/2 without TLS, as gRPC servers do); with `h2c` the engine's readiness is a TCP connect (`ready` is an HTTP/1.1 path and is refused)."
        ),
    )

    def __attrs_post_init__(self) -> None:
        if self.admin_port == self.upstream:
            raise PlanError("admin_port", f"{self.admin_port} is the engine's own port")
        if self.protocol == "h2c" and self.ready is not None:
            raise PlanError(
                "ready",
                "is an HTTP/1.1 health path; an h2c engine's readiness is a TCP connect"
                " to its upstream port (drop `ready`)",
            )


@attrs.frozen(kw_only=True)
class Checks:
    """Startup, readiness and liveness checks, kept apart as Kubernetes keeps them."""

    summary: ClassVar[str] = (
        "Startup, readiness and liveness checks, kept apart as Kubernetes keeps them."
    )

    startup: Probe | None = attrs.field(
        default=None,
        metadata=about("Must pass before readiness and liveness are checked.", nested=Probe),
    )
    readiness: Probe | None = attrs.field(
        default=None,
        metadata=about(
            "`create --wait` and `wait_ready` wait for it; load balancers follow it.", nested=Probe
        ),
    )
    liveness: Probe | None = attrs.field(
        default=None,
        metadata=about(
            "A failing liveness check restarts the container (Docker: HEALTHCHECK with autoheal; Kubernetes: the kubelet).",
            "Docker, Kubernetes (Podman: no health timers without systemd)",
            nested=Probe,
        ),
    )

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
class Autoheal:
    """A sidecar that restarts unhealthy containers through the engine socket."""

    summary: ClassVar[str] = (
        "A sidecar that restarts unhealthy containers through the engine socket."
    )

    image: str = attrs.field(
        validator=image_reference,
        metadata=about("The sidecar's image (it gets the engine socket mounted)."),
    )
    command: tuple[str, ...] | None = attrs.field(
        default=None,
        converter=strings,
        validator=[string_items, non_empty],
        metadata=about("Replaces the image's entrypoint.", schema=STRINGS_OR_LIST),
    )
    interval_seconds: int = attrs.field(
        default=5, validator=positive_int, metadata=about("Seconds between the sidecar's checks.")
    )


@attrs.frozen(kw_only=True)
class ServicePort:
    """One port of the workload's Service: ``port`` on its cluster IP, sent to ``target_port``
    of the Pod (default: the same number)."""

    summary: ClassVar[str] = "One port of the Service and the Pod port it goes to."

    port: int = attrs.field(
        validator=port_number, metadata=about("The port on the Service's cluster IP.")
    )
    target_port: int | None = attrs.field(
        default=None,
        validator=optional_port_number,
        metadata=about("The Pod's port it goes to (default: `port`)."),
    )
    name: str | None = attrs.field(
        default=None,
        validator=optional_str,
        metadata=about("The port's name (a DNS label; required when several)."),
    )


def _some_ports(_: Any, attribute: attrs.Attribute[Any], value: tuple[ServicePort, ...]) -> None:
    tuple_of(ServicePort)(None, attribute, value)
    if not value:
        raise PlanError(attribute.name, "needs at least one port")
    if len(value) > 1 and not all(p.name for p in value):
        raise PlanError(
            attribute.name, "name every port when there are several (the API requires it)"
        )


@attrs.frozen(kw_only=True)
class Service:
    """A ClusterIP Service for the workload (Kubernetes): a stable name in front of the plan's
    Pod and of every instance ``replace`` starts for it."""

    summary: ClassVar[str] = "A ClusterIP Service in front of the workload (Kubernetes)."

    ports: tuple[ServicePort, ...] = attrs.field(
        converter=as_tuple,
        validator=_some_ports,
        metadata=about(
            "The Service's ports (at least one; each named when several).",
            nested=ServicePort,
            many=True,
        ),
    )


@attrs.frozen(kw_only=True)
class RegistryAuth:
    """Where the credentials for one registry are: a reference, never the secret itself.

    ``auth_file`` is a Docker ``config.json`` or a Podman ``auth.json``; its ``auths`` entry for
    ``registry`` is read when an image is pulled (Docker and Podman; on Kubernetes the kubelet
    pulls, with the plan's ``image_pull_secrets``).
    """

    summary: ClassVar[str] = (
        "Where the credentials for one registry are: a file, never the secret itself."
    )

    # host[:port], as in image names
    registry: str = attrs.field(
        validator=non_empty_str, metadata=about("The registry, `host[:port]` as in image names.")
    )
    auth_file: str = attrs.field(
        validator=non_empty_str,
        metadata=about(
            "A Docker `config.json` or Podman `auth.json` whose `auths` entry for it is used."
        ),
    )

    def __attrs_post_init__(self) -> None:
        if "/" in self.registry:
            raise PlanError("registry", f"must be a host[:port], got {self.registry!r}")
