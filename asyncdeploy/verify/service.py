"""Verify through a Kubernetes Service: each request routed as kube-proxy routes a connection.

A ClusterIP is routed by kube-proxy (or a CNI that does its job) on each node, from the
Service's EndpointSlices. Where the cluster runs no such proxy (the project's one-node test
cluster has none), or its Service range must not be sent traffic from here, verify does that
part itself: it follows the same EndpointSlices through the API and sends each request, on a
connection of its own, to one *ready* endpoint chosen at random (kube-proxy's iptables mode; a
round robin shared by all the request kinds could send every stream to the same instance); with
none ready, to one still *serving* while terminating (kube-proxy's fallback); with none at all,
to a port that refuses the connection, as kube-proxy rejects it (the request counts as
``unavailable``). An endpoint is reached at the loopback host port verify published for its Pod.
No retry: whatever the endpoint answers, the client keeps (a 503 is a failure). So what decides
where traffic goes is what the cluster's endpointslice controller makes of the Pods' readiness
and deletion, not verify's own readiness polling.
"""

from __future__ import annotations

import random
import socket
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import aiohttp
import anyio
import attrs

from asyncdeploy.plan import WorkloadPlan
from asyncdeploy.verify.balancer import ServerState
from asyncdeploy.verify.traffic import Endpoint

if TYPE_CHECKING:
    from asyncdeploy.drivers.kubernetes import EndpointState

__all__ = ["ServiceFront", "ServiceTarget", "opened_service_front", "service_route"]

#: How long an added workload may take to show as a ready endpoint of the Service.
ENDPOINT_TIMEOUT = 60.0


def service_route(plan: WorkloadPlan, port: int) -> str:
    """The plan's Service name, checked to send the traffic port (``ValueError`` otherwise)."""
    if plan.service is None:
        raise ValueError(
            "--balancer service needs a plan with a `service:` (Kubernetes): "
            f"plan {plan.name!r} asks for none"
        )
    targets = [p.target_port or p.port for p in plan.service.ports]
    if port not in targets:
        raise ValueError(
            f"--balancer service: the Service of {plan.name!r} sends to port(s) "
            f"{', '.join(map(str, targets))}, not to the traffic port {port} (--port)"
        )
    from asyncdeploy.drivers.kubernetes import service_name

    return service_name(plan)


@attrs.define
class ServiceTarget:
    """The Service's endpoints as kube-proxy would choose among them."""

    refused_url: str  # a bound, never listening, loopback port: a connection there is refused
    ports: dict[str, int] = attrs.field(factory=dict)  # Pod name -> its loopback host port
    endpoints: dict[str, EndpointState] = attrs.field(factory=dict)
    states: list[ServerState] = attrs.field(factory=list)
    _random: random.Random = attrs.field(factory=random.Random)

    def pick(self, avoid: str | None = None) -> Endpoint | None:
        known = {n: s for n, s in self.endpoints.items() if n in self.ports}
        chosen = sorted(n for n, s in known.items() if s.ready)
        if not chosen:
            chosen = sorted(n for n, s in known.items() if s.serving)
        if not chosen:
            return Endpoint(name="no endpoint", base_url=self.refused_url)
        name = self._random.choice(chosen)
        return Endpoint(name=name, base_url=f"http://127.0.0.1:{self.ports[name]}", ready=True)

    def update(self, endpoints: dict[str, EndpointState]) -> None:
        """The slices changed: record each known Pod's change of state (for the report)."""
        now = time.time()
        for name in sorted(set(self.ports) & (set(endpoints) | set(self.endpoints))):
            before, after = _status(self.endpoints.get(name)), _status(endpoints.get(name))
            if before != after:
                self.states.append(ServerState(at=now, server=name, status=after))
        self.endpoints = endpoints


def _status(state: EndpointState | None) -> str:
    if state is None:
        return "DOWN (not an endpoint)"
    if state.ready:
        return "READY"
    if state.terminating:
        return "DOWN (terminating, still serving)" if state.serving else "DOWN (terminating)"
    return "DOWN (not ready)"


@attrs.define
class ServiceFront:
    """``Front`` for a Service: the target follows its EndpointSlices."""

    driver: Any  # a KubernetesDriver (imported lazily: Kubernetes is an extra)
    service: str
    target: ServiceTarget
    retries: int | None = 0  # kube-proxy never retries, and neither does the client
    name: str | None = "service"
    _seen: anyio.Event = attrs.field(factory=anyio.Event)

    async def add(self, workload: str, host_port: int) -> None:
        """Route to ``workload`` once the Service lists its Pod as a ready endpoint."""
        self.target.ports[workload] = host_port
        with anyio.fail_after(ENDPOINT_TIMEOUT):
            while not _ready(self.target.endpoints, workload):
                await self._seen.wait()

    async def follow(self, session: aiohttp.ClientSession) -> None:
        await anyio.sleep_forever()  # the slices are followed from the front's opening on

    async def run(self) -> None:
        from asyncdeploy.drivers.kubernetes import follow_service

        await follow_service(self.driver.api, self.driver.namespace, self.service, self.saw)

    def saw(self, endpoints: dict[str, EndpointState]) -> None:
        """The slices changed: route by them, and wake every ``add`` waiting (then a fresh
        event for the next change: one replaced by each waiter would strand the others)."""
        self.target.update(endpoints)
        seen, self._seen = self._seen, anyio.Event()
        seen.set()

    def states(self) -> tuple[ServerState, ...]:
        return tuple(self.target.states)


def _ready(endpoints: dict[str, EndpointState], name: str) -> bool:
    state = endpoints.get(name)
    return state is not None and state.ready


@asynccontextmanager
async def opened_service_front(driver: Any, service: str) -> AsyncIterator[ServiceFront]:
    """A front on the Service ``service`` of ``driver``'s namespace, following its slices."""
    if getattr(driver, "name", None) != "kubernetes":
        raise ValueError("--balancer service is for Kubernetes (a Service routes to its Pods)")
    with socket.socket() as refusing:  # bound, never listening: connections are refused
        refusing.bind(("127.0.0.1", 0))
        target = ServiceTarget(refused_url=f"http://127.0.0.1:{refusing.getsockname()[1]}")
        front = ServiceFront(driver, service, target)
        async with anyio.create_task_group() as tg:
            tg.start_soon(front.run)
            yield front
            tg.cancel_scope.cancel()
