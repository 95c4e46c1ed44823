"""Prove a lossless termination: deploy, send traffic, disrupt, account for every request."""

from __future__ import annotations

import secrets
import socket
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Literal

import aiohttp
import anyio
import attrs
from anyio.abc import ObjectReceiveStream

from asyncdeploy.deployer import Deployer, Replacement
from asyncdeploy.errors import DrainError, WorkloadConflict
from asyncdeploy.events import DrainEvent, DrainStarted, Event
from asyncdeploy.plan import Checks, Container, HTTPGet, Port, Probe, WorkloadPlan
from asyncdeploy.results import WorkloadStatus
from asyncdeploy.verify.report import VerifyReport
from asyncdeploy.verify.traffic import RequestRecord, Router, TrafficMix, send_traffic

__all__ = [
    "DEMO_IMAGE",
    "VERIFY_LABEL",
    "Mode",
    "VerifyOptions",
    "demo_plan",
    "from_registry",
    "run_verify",
]

DEMO_IMAGE = "asyncdeploy-demo/server:latest"
VERIFY_LABEL = "asyncdeploy-verify"
CONTROL_SOCKET = "/run/asyncdeploy/control.sock"
Mode = Literal["delete", "replace", "delete-all"]


@attrs.frozen(kw_only=True)
class VerifyOptions:
    mode: Mode = "delete"
    port: int = 8080  # the container port the traffic goes to
    warmup_seconds: float = 3.0
    after_seconds: float = 2.0  # traffic on the new instance after a replacement
    grace_period_seconds: int | None = None
    ready_timeout: float = 90.0
    mix: TrafficMix = attrs.field(factory=TrafficMix)


def demo_plan(
    name: str = "demo",
    *,
    image: str = DEMO_IMAGE,
    pause_image: str | None = None,
    grace_period_seconds: int = 30,
    propagation_wait: str = "2s",
    ignore_sigterm: bool = False,
    extra_containers: Sequence[Container] = (),
) -> WorkloadPlan:
    """The demo inference server as a workload: readiness check, pre_stop drain, one port.

    With ``ignore_sigterm`` it is the negative control: no drain hook, SIGTERM ignored.
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
    ``127.0.0.1:5000/pause:3.10``, ``asyncdeploy-demo/server:latest`` →
    ``127.0.0.1:5000/asyncdeploy-demo/server:latest``."""
    first, slash, rest = image.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        image = rest
    return f"{registry.rstrip('/')}/{image}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _instance(plan: WorkloadPlan, name: str, port: int, run: str) -> tuple[WorkloadPlan, int]:
    """The plan under ``name``, its traffic port published on a free loopback port."""
    host_port = _free_port()
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
    return attrs.evolve(plan, name=name[:63], containers=containers, labels=labels), host_port


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
    say = on_status or (lambda _: None)
    run = secrets.token_hex(3)
    names = [plan.name] if options.mode != "delete-all" else [f"{plan.name}-a", f"{plan.name}-b"]
    instances = [_instance(plan, n, options.port, run) for n in names]
    replacement = _instance(plan, f"{plan.name[:58]}-next", options.port, run)
    taken = {w.name for w in await deployer.list()}
    for name in [*names, *([replacement[0].name] if options.mode == "replace" else [])]:
        if name in taken:
            raise WorkloadConflict(
                f"a workload named {name!r} already exists; verify creates and removes its own "
                "workloads and will not touch it: choose another plan name",
                engine=deployer.driver_name,
                status=409,
            )
    router = Router()
    records: list[RequestRecord] = []
    events: list[DrainEvent] = []
    stop = anyio.Event()
    connector = aiohttp.TCPConnector(force_close=True)  # a fresh connection per request
    try:
        async with aiohttp.ClientSession(connector=connector) as session:
            for instance, host_port in instances:
                say(f"creating {instance.name} on {deployer.driver_name}")
                await deployer.create(instance, on_event=on_event)  # pulls what is absent
                await deployer.wait_ready(instance.name, timeout=options.ready_timeout)
                router.add(instance.name, f"http://127.0.0.1:{host_port}")
            async with anyio.create_task_group() as tg:
                tg.start_soon(router.poll, session)

                async def traffic() -> None:
                    await send_traffic(session, router, options.mix, stop, records)
                    tg.cancel_scope.cancel()  # every request ended: stop polling

                tg.start_soon(traffic)
                say(f"sending traffic; disruption ({options.mode}) in {options.warmup_seconds:g} s")
                await anyio.sleep(options.warmup_seconds)
                grace = options.grace_period_seconds
                drain: AbstractAsyncContextManager[ObjectReceiveStream[DrainEvent]]
                if options.mode == "replace":
                    new, new_port = replacement

                    async def route_to_new(status: WorkloadStatus) -> None:
                        router.add(new.name, f"http://127.0.0.1:{new_port}")
                        await anyio.sleep(1)  # the router follows readiness: let it see it
                        say(f"{new.name} ready; draining {names[0]} with requests in flight")

                    say(f"replacing {names[0]} by {new.name} (Deployer.replacing)")
                    drain = _drain_of(
                        deployer.replacing(
                            new,
                            old=[names[0]],
                            new_name=new.name,
                            ready_timeout=options.ready_timeout,
                            grace_period_seconds=grace,
                            on_ready=route_to_new,
                        )
                    )
                elif options.mode == "delete-all":
                    say(f"draining {', '.join(names)} with requests in flight")
                    drain = deployer.terminate_all({VERIFY_LABEL: run}, grace_period_seconds=grace)
                else:
                    say(f"draining {names[0]} with requests in flight")
                    drain = deployer.terminate(names[0], grace_period_seconds=grace)
                await _disrupt(drain, events, on_event)
                if options.mode == "replace":
                    await anyio.sleep(options.after_seconds)
                stop.set()
                say("waiting for the last requests to end")
    finally:
        with anyio.CancelScope(shield=True), anyio.move_on_after(60):
            await deployer.delete_all({VERIFY_LABEL: run}, grace_period_seconds=0)
    started = next((e for e in events if isinstance(e, DrainStarted)), None)
    drain_at = None if started is None else started.deadline - started.grace_period_seconds
    return VerifyReport(
        driver=deployer.driver_name,
        mode=options.mode,
        records=tuple(records),
        events=tuple(events),
        drain_started_at=drain_at,
    )


@asynccontextmanager
async def _drain_of(
    replacing: AbstractAsyncContextManager[Replacement],
) -> AsyncIterator[ObjectReceiveStream[DrainEvent]]:
    async with replacing as replacement:
        yield replacement.events


async def _disrupt(
    drain: AbstractAsyncContextManager[ObjectReceiveStream[DrainEvent]],
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
