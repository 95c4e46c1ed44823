"""Where verify's traffic enters: its own router, a real HAProxy or nginx in front of the
workloads, or a Kubernetes Service (:mod:`.service`)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any, Protocol

import aiohttp
import anyio
import attrs

from asyncdeploy.plan import WorkloadPlan
from asyncdeploy.verify.balancer import BalancerOptions, HAProxy, ServerState, running_haproxy
from asyncdeploy.verify.nginx import NginxConfig, running_nginx
from asyncdeploy.verify.service import opened_service_front, service_route
from asyncdeploy.verify.traffic import Endpoint, Router, SingleEndpoint, Target

__all__ = ["Front", "HAProxyFront", "NginxFront", "RouterFront", "opened_front"]


class Front(Protocol):
    """The traffic's way in: a target to send to, and a way to add a ready workload."""

    @property
    def target(self) -> Target: ...

    @property
    def retries(self) -> int | None:
        """None: the mix's own; 0: whatever the front answers, the client keeps."""
        ...

    @property
    def name(self) -> str | None:
        """ "haproxy", "service", or None for verify's router."""
        ...

    async def add(self, workload: str, host_port: int) -> None: ...

    async def follow(self, session: aiohttp.ClientSession) -> None:
        """Keep the front current until cancelled."""
        ...

    def states(self) -> tuple[ServerState, ...]: ...


@attrs.define
class RouterFront:
    router: Router
    retries: int | None = None
    name: str | None = None

    @property
    def target(self) -> Target:
        return self.router

    async def add(self, workload: str, host_port: int) -> None:
        self.router.add(workload, f"http://127.0.0.1:{host_port}")

    async def follow(self, session: aiohttp.ClientSession) -> None:
        await self.router.poll(session)

    def states(self) -> tuple[ServerState, ...]:
        return ()


@attrs.define
class HAProxyFront:
    haproxy: HAProxy
    target: Target
    retries: int | None = 0  # the balancer is not asked to retry, and neither is the client
    name: str | None = "haproxy"

    async def add(self, workload: str, host_port: int) -> None:
        await self.haproxy.enable(workload)

    async def follow(self, session: aiohttp.ClientSession) -> None:
        await self.haproxy.watch()  # HAProxy follows readiness by its own health check: record it

    def states(self) -> tuple[ServerState, ...]:
        return tuple(self.haproxy.states)


@attrs.define
class NginxFront:
    """nginx knows every server from its start and has no active check: it sends to each
    until a request to it fails (see :mod:`.nginx`); there is nothing to add or follow."""

    target: Target
    retries: int | None = 0  # whatever nginx answers, the client keeps
    name: str | None = "nginx"

    async def add(self, workload: str, host_port: int) -> None:
        return None

    async def follow(self, session: aiohttp.ClientSession) -> None:
        await anyio.sleep_forever()

    def states(self) -> tuple[ServerState, ...]:
        return ()  # open-source nginx does not tell its servers' state


@asynccontextmanager
async def opened_front(
    balancer: str | None,
    servers: Sequence[tuple[str, int]],
    options: BalancerOptions,
    ready_path: str,
    *,
    plan: WorkloadPlan | None = None,
    port: int = 8080,
    driver: Any = None,
    nginx_config: NginxConfig = "lossless",
) -> AsyncIterator[Front]:
    """Verify's router (``balancer`` None), HAProxy or nginx (``nginx_config``) with every
    possible server declared, or (``service``) the plan's Kubernetes Service on ``driver``,
    routed as kube-proxy does."""
    if balancer is None:
        yield RouterFront(Router(ready_path=ready_path))
        return
    if balancer == "service":
        assert plan is not None
        async with opened_service_front(driver, service_route(plan, port)) as front:
            yield front
        return
    if balancer == "nginx":
        async with running_nginx(servers, nginx_config) as nginx:
            endpoint = Endpoint(name="nginx", base_url=nginx.base_url, ready=True)
            yield NginxFront(SingleEndpoint(endpoint))
        return
    async with running_haproxy(servers, options) as haproxy:
        endpoint = Endpoint(name="haproxy", base_url=haproxy.base_url, ready=True)
        yield HAProxyFront(haproxy, SingleEndpoint(endpoint))
