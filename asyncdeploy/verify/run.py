"""Prove a lossless termination: deploy, send traffic, disrupt, account for every request."""

from __future__ import annotations

import functools
import secrets
import string
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Literal

import aiohttp
import anyio
import attrs

from asyncdeploy._errors import DrainError, OperationTimeout, WorkloadConflict
from asyncdeploy._events import DrainEvent, DrainStarted, Event
from asyncdeploy.builtin_images import DEMO_IMAGE
from asyncdeploy.deployer import Deployer
from asyncdeploy.plan import Checks, Container, HTTPGet, Port, Probe, WorkloadPlan
from asyncdeploy.verify._ports import free_port
from asyncdeploy.verify.balancer import BalancerOptions, ServerState
from asyncdeploy.verify.disruptions import DISRUPTIONS, Disruption, DrainStream, Mode, Scene
from asyncdeploy.verify.front import Front, opened_front
from asyncdeploy.verify.nginx import NginxConfig
from asyncdeploy.verify.report import VerifyReport
from asyncdeploy.verify.requests import RequestSpec
from asyncdeploy.verify.traffic import (
    Clients,
    Connection,
    RequestRecord,
    TrafficMix,
    opened_clients,
    send_traffic,
)
from asyncdeploy.verify.wrk import WrkResult, run_wrk

__all__ = [
    "DEMO_IMAGE",
    "VERIFY_LABEL",
    "Balancer",
    "Mode",
    "VerifyOptions",
    "demo_plan",
    "from_registry",
    "run_verify",
]

VERIFY_LABEL = "asyncdeploy-verify"
CONTROL_SOCKET = "/run/asyncdeploy/control.sock"
# service: Kubernetes, routed as kube-proxy does
Balancer = Literal["haproxy", "nginx", "service"]
PROXIES = ("haproxy", "nginx")  # a real balancer verify starts, with one address
MAX_INSTANCES = 9
# seconds past the warm-up for a request in flight on what is drained: at the tests' sparse
# traffic (0.3 streams/s shared by two) the first stream on one workload comes after 6.7 s on
# average, and none within 45 s one run in 800 (30 s, shared by three, missed it 1 in 20)
IN_FLIGHT_WAIT = 45.0


#: A request outstanding this long (or one whose answer is streaming) is taken to last until
#: the drain begins: a short request seen in flight had often ended by then (a replace's
#: routing, a loaded machine's event), and the run tested nothing (seen in CI).
LASTING_AFTER = 0.5


def _lasting(record: RequestRecord, now: float) -> bool:
    """In flight, and likely still in flight a moment later: answering (a stream's bytes
    flow) or outstanding for ``LASTING_AFTER`` s."""
    return record.ended is None and (record.bytes > 0 or now - record.started >= LASTING_AFTER)


@attrs.frozen(kw_only=True)
class VerifyOptions:
    mode: Mode = "delete"
    port: int = 8080  # the container port the traffic goes to
    warmup_seconds: float = 3.0
    after_seconds: float = 2.0  # traffic on what is left after the disruption
    grace_period_seconds: int | None = None
    ready_timeout: float = 90.0
    mix: TrafficMix = attrs.field(factory=TrafficMix)
    requests: tuple[RequestSpec, ...] | None = (
        None  # None: the demo server's /short, /long, /stream
    )
    balancer: Balancer | None = None  # None: verify's own router (which retries refusals)
    balancer_options: BalancerOptions = attrs.field(factory=BalancerOptions)
    # the clients' habit: a kept-alive pool per kind of request (the SDKs'), or a fresh
    # connection per request
    connection: Connection = "keep-alive"
    # nginx's configuration: the one the docs recommend for lossless drains, or its defaults
    nginx_config: NginxConfig = "lossless"
    # how many copies of the plan take the traffic; None: two behind a balancer (one is
    # disrupted, the other keeps serving) and for delete-all, else one
    instances: int | None = attrs.field(
        default=None,
        validator=attrs.validators.optional(
            [attrs.validators.ge(1), attrs.validators.le(MAX_INSTANCES)]
        ),
    )

    # wrk on this many keep-alive connections beside verify's clients (a balancer only): a
    # second witness that counts non-2xx answers and socket errors itself
    wrk_connections: int = attrs.field(
        default=0, validator=[attrs.validators.ge(0), attrs.validators.le(64)]
    )

    def __attrs_post_init__(self) -> None:
        if self.wrk_connections and self.balancer not in PROXIES:
            raise ValueError(
                "wrk needs one address to load: use it with a balancer (--balancer haproxy "
                "or nginx)"
            )
        if self.balancer is not None and self.mode == "delete-all":
            raise ValueError(
                "delete-all behind a balancer leaves it nothing to send to (clients see 503 by "
                "design): use --mode delete or replace"
            )
        if self.balancer is not None and self.mode == "delete" and self.instance_count() < 2:
            raise ValueError(
                "a delete behind a balancer needs a second instance to keep serving: --instances 2"
            )

    def instance_count(self) -> int:
        if self.instances is not None:
            return self.instances
        return 2 if self.balancer is not None or self.mode == "delete-all" else 1


def demo_plan(
    name: str = "demo",
    *,
    image: str = DEMO_IMAGE,
    pause_image: str | None = None,
    grace_period_seconds: int = 30,
    propagation_wait: str = "2s",
    ignore_sigterm: bool = False,
    extra_containers: Sequence[Container] = (),
    balancer_check: BalancerOptions | None = None,
) -> WorkloadPlan:
    """The demo inference server as a workload: readiness check, pre_stop drain, one port.

    With ``ignore_sigterm`` it is the negative control: no drain hook, SIGTERM ignored.
    ``balancer_check``: the check of the balancer in front, declared to the drain (its window
    may then close once that check has certainly taken the server out).
    """
    drain_timeout = max(1, grace_period_seconds - 5)
    command = [
        "python3",
        "-m",
        "asyncdeploy.workload.demo",
        "--port",
        "8080",
        "--control-socket",
        CONTROL_SOCKET,
        "--drain-timeout",
        f"{drain_timeout}s",
    ]
    if ignore_sigterm:
        command.append("--ignore-sigterm")
    pre_stop = None
    if not ignore_sigterm:
        pre_stop = [
            "python3",
            "-m",
            "asyncdeploy.workload.drain_cmd",
            "--socket",
            CONTROL_SOCKET,
            "--propagation-wait",
            propagation_wait,
            "--timeout",
            str(drain_timeout),
        ]
        if balancer_check is not None:
            pre_stop += [
                "--balancer-interval",
                f"{balancer_check.check_interval:g}s",
                "--balancer-fall",
                str(balancer_check.fall),
            ]
    server = Container(
        name="server",
        image=image,
        command=command,
        ports=[Port(container_port=8080)],
        pre_stop=pre_stop,
        checks=Checks(
            readiness=Probe(http=HTTPGet(path="/ready", port=8080), period_seconds=1),
            liveness=Probe(http=HTTPGet(path="/live", port=8080), period_seconds=10),
        ),
    )
    plan = WorkloadPlan(
        name=name,
        containers=[server, *extra_containers],
        termination_grace_period_seconds=grace_period_seconds,
    )
    return plan if pause_image is None else attrs.evolve(plan, pause_image=pause_image)


def from_registry(image: str, registry: str) -> str:
    """The same repository and tag in ``registry``: ``registry.k8s.io/pause:3.10`` →
    ``127.0.0.1:5000/pause:3.10``, ``localhost/asyncdeploy/demo:latest`` →
    ``127.0.0.1:5000/asyncdeploy/demo:latest``."""
    first, slash, rest = image.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        image = rest
    return f"{registry.rstrip('/')}/{image}"


def ready_path(plan: WorkloadPlan, port: int) -> str:
    """The plan's HTTP readiness path on the traffic port (what a balancer checks), or /ready."""
    for container in plan.containers:
        probe = container.checks.readiness
        if probe is not None and probe.http is not None and probe.http.port == port:
            return probe.http.path
    return "/ready"


async def _instance(plan: WorkloadPlan, name: str, port: int, run: str) -> tuple[WorkloadPlan, int]:
    """The plan under ``name``, its traffic port published on a free loopback port."""
    host_port = await anyio.to_thread.run_sync(free_port)  # it probes: off the loop
    containers = []
    for container in plan.containers:
        ports = tuple(
            attrs.evolve(p, host_ip="127.0.0.1", host_port=host_port)
            if p.container_port == port
            else p
            for p in container.ports
        )
        containers.append(attrs.evolve(container, ports=ports))
    labels = {**plan.labels, VERIFY_LABEL: run}
    of = plan.instance_of or (plan.name if plan.service is not None else None)  # one Service
    made = attrs.evolve(plan, name=name[:63], containers=containers, labels=labels, instance_of=of)
    return made, host_port


def _names(plan: WorkloadPlan, count: int) -> list[str]:
    if count == 1:
        return [plan.name]
    return [f"{plan.name[:61]}-{letter}" for letter in string.ascii_lowercase[:count]]


async def _refuse_taken(deployer: Deployer, names: Sequence[str]) -> None:
    taken = {w.name for w in await deployer.list()}
    for name in names:
        if name in taken:
            raise WorkloadConflict(
                f"a workload named {name!r} already exists; verify creates and removes its own "
                "workloads and will not touch it: choose another plan name",
                engine=deployer.driver_name,
            )


async def run_verify(
    deployer: Deployer,
    plan: WorkloadPlan,
    options: VerifyOptions | None = None,
    *,
    on_event: Callable[[Event], None] | None = None,
    on_status: Callable[[str], None] | None = None,
) -> VerifyReport:
    """Deploy ``plan``, send traffic, perform the disruption, and report every request."""
    options = options or VerifyOptions()
    verify = _Run(
        deployer=deployer,
        options=options,
        on_event=on_event,
        say=on_status or (lambda _: None),
        requests=options.requests or options.mix.demo_requests(),
    )
    disruption = DISRUPTIONS[options.mode]
    names = _names(plan, options.instance_count())
    instances = [await _instance(plan, n, options.port, verify.run) for n in names]
    successor = await _instance(plan, f"{plan.name[:58]}-next", options.port, verify.run)
    # a balancer is told of every server it may send to at its start: the successor too
    declared = [*instances, *([successor] if disruption.starts_successor else [])]
    await _refuse_taken(deployer, [p.name for p, _ in declared])
    deadline = run_deadline(options, plan, len(declared))
    try:
        with anyio.move_on_after(deadline) as bounded:  # only its expiry is OperationTimeout
            async with verify.opened(plan, ready_path(plan, options.port), declared) as (
                clients,
                front,
            ):
                await verify.deploy(instances, front)
                scene = verify.scene(names, successor, front)
                await verify.disrupt_under_traffic(clients, scene, disruption)
                states = front.states()
        if bounded.cancelled_caught:
            raise OperationTimeout(
                f"verify did not end within {deadline:g} s, the sum of its steps' bounds "
                "(every workload it made was removed)"
            )
    finally:
        with anyio.CancelScope(shield=True), anyio.move_on_after(60):
            await deployer.delete_all({VERIFY_LABEL: verify.run}, grace_period_seconds=0)
    return verify.report(front.name, states)


CREATE_BOUND = 120.0  # one instance's create: its pulls from a registry, the engine's calls
MARGIN = 60.0


def run_deadline(options: VerifyOptions, plan: WorkloadPlan, workloads: int) -> float:
    """A run's own deadline, in seconds: the bounds of its steps, summed. Each workload is made
    (``CREATE_BOUND``) and waited for (``ready_timeout``); the traffic warms up, a request in
    flight on what is drained is waited for (``IN_FLIGHT_WAIT``), the drain takes
    its grace twice over (a follower's, a kill's clean-up), what is left serves on, and the last
    request may take its whole ``request_timeout``. Past it, a step that waits on something that
    never answers (an engine, a balancer) ends the run with an error instead of a hang."""
    grace = options.grace_period_seconds
    if grace is None:
        grace = plan.termination_grace_period_seconds
    return (
        workloads * (CREATE_BOUND + options.ready_timeout)
        + options.warmup_seconds
        + IN_FLIGHT_WAIT
        + 2 * grace
        + options.after_seconds
        + options.mix.request_timeout
        + MARGIN
    )


@attrs.define(kw_only=True)
class _Run:
    """One verify run: what it sends, and everything it saw."""

    deployer: Deployer
    options: VerifyOptions
    on_event: Callable[[Event], None] | None
    say: Callable[[str], None]
    requests: tuple[RequestSpec, ...]
    run: str = attrs.field(factory=lambda: secrets.token_hex(3))  # the label of its workloads
    records: list[RequestRecord] = attrs.field(factory=list)
    wrk_results: list[WrkResult] = attrs.field(factory=list)
    events: list[DrainEvent] = attrs.field(factory=list)
    stop: anyio.Event = attrs.field(factory=anyio.Event)

    @asynccontextmanager
    async def opened(
        self, plan: WorkloadPlan, ready_path: str, declared: Sequence[tuple[WorkloadPlan, int]]
    ) -> AsyncIterator[tuple[Clients, Front]]:
        """The clients and the front (the router, or a balancer that knows of every server
        ``declared``, checking ``ready_path`` unless told another)."""
        balancer_options = self.options.balancer_options
        if balancer_options.check_path is None:
            balancer_options = attrs.evolve(balancer_options, check_path=ready_path)
        servers = [(p.name, port) for p, port in declared]
        async with (
            opened_clients(self.requests, self.options.connection) as clients,
            opened_front(
                self.options.balancer,
                servers,
                balancer_options,
                ready_path,
                plan=plan,
                port=self.options.port,
                driver=self.deployer.driver,
                nginx_config=self.options.nginx_config,
            ) as front,
        ):
            yield clients, front

    def scene(
        self, names: Sequence[str], successor: tuple[WorkloadPlan, int], front: Front
    ) -> Scene:
        return Scene(
            deployer=self.deployer,
            names=names,
            successor=successor,
            front=front,
            selector={VERIFY_LABEL: self.run},
            grace_period_seconds=self.options.grace_period_seconds,
            ready_timeout=self.options.ready_timeout,
            say=self.say,
            in_flight_on=self.in_flight_on,
        )

    async def in_flight_on(self, names: Sequence[str]) -> None:
        """Return once a request is in flight on one of ``names`` (answering, or sent to it
        and not answered yet), or after ``IN_FLIGHT_WAIT`` s (the report then says the run
        tested nothing)."""
        wanted = set(names)
        with anyio.move_on_after(IN_FLIGHT_WAIT):
            while True:  # the records change under the clients' tasks: looked at, not awaited
                now = time.time()
                if any(
                    _lasting(r, now) and {r.instance, r.endpoint} & wanted for r in self.records
                ):
                    return
                await anyio.sleep(0.05)

    async def deploy(self, instances: Sequence[tuple[WorkloadPlan, int]], front: Front) -> None:
        for instance, host_port in instances:
            self.say(f"creating {instance.name} on {self.deployer.driver_name}")
            await self.deployer.create(instance, on_event=self.on_event)  # pulls what is absent
            await self.deployer.wait_ready(instance.name, timeout=self.options.ready_timeout)
            await front.add(instance.name, host_port)

    async def disrupt_under_traffic(
        self, clients: Clients, scene: Scene, disruption: Disruption
    ) -> None:
        """Traffic (and the front following readiness) from before the disruption until every
        request it sent has ended."""
        options, front = self.options, scene.front
        async with aiohttp.ClientSession() as polls, anyio.create_task_group() as tg:
            tg.start_soon(front.follow, polls)

            async def traffic() -> None:
                await self.load(clients, front)
                tg.cancel_scope.cancel()  # every request ended: stop following

            tg.start_soon(traffic)
            through = f" through {front.name}" if front.name else ""
            self.say(
                f"sending traffic{through}; disruption ({options.mode}) "
                f"in {options.warmup_seconds:g} s"
            )
            await anyio.sleep(options.warmup_seconds)
            busy = disruption.busy_first(scene)
            if busy:
                await self.in_flight_on(busy)
            await _disrupt(disruption.drain(scene), self.events, self.on_event)
            if disruption.leaves_serving(len(scene.names)):
                await anyio.sleep(options.after_seconds)  # what is left keeps serving
            self.stop.set()
            self.say("waiting for the last requests to end")

    async def load(self, clients: Clients, front: Front) -> None:
        """verify's clients, and wrk beside them when asked, until ``stop``."""
        async with anyio.create_task_group() as load:
            load.start_soon(
                functools.partial(
                    send_traffic,
                    clients,
                    front.target,
                    self.requests,
                    self.options.mix,
                    self.stop,
                    self.records,
                    retries=front.retries,
                )
            )
            if self.options.wrk_connections:
                url = _wrk_url(front, self.requests)
                connections = self.options.wrk_connections
                load.start_soon(run_wrk, url, connections, self.stop, self.wrk_results.append)

    def report(self, balancer: str | None, states: tuple[ServerState, ...]) -> VerifyReport:
        started = next((e for e in self.events if isinstance(e, DrainStarted)), None)
        drain_at = None if started is None else started.deadline - started.grace_period_seconds
        return VerifyReport(
            driver=self.deployer.driver_name,
            mode=self.options.mode,
            records=tuple(self.records),
            events=tuple(self.events),
            drain_started_at=drain_at,
            request_names=tuple(r.label for r in self.requests),
            balancer=balancer,
            balancer_states=states,
            wrk=self.wrk_results[0] if self.wrk_results else None,
        )


def _wrk_url(front: Front, requests: Sequence[RequestSpec]) -> str:
    """The balancer's address and the first plain GET the user named (wrk sends GETs)."""
    endpoint = front.target.pick()
    assert endpoint is not None  # a balancer's address is always there
    path = next((r.path for r in requests if r.method == "GET" and not r.stream), "/")
    return endpoint.base_url + path


async def _disrupt(
    drain: DrainStream,
    events: list[DrainEvent],
    on_event: Callable[[DrainEvent], None] | None,
) -> None:
    try:
        async with drain as stream:
            async for event in stream:
                events.append(event)
                if on_event is not None:
                    on_event(event)
    except DrainError:
        pass  # the summaries carry the errors; the report shows them and fails
