"""Which strategy a replace takes, and why, said before anything is touched: surge (the new
instance beside the old) where it fits, recreate (the old drained first) where the old holds
what the new needs: a host port bound by number on one host; on Kubernetes auto tries surge and
falls back when the new Pod cannot be scheduled within :data:`SCHEDULE_BOUND`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from asyncdeploy._errors import PlanError
from asyncdeploy.drivers.base import Driver
from asyncdeploy.plan import WorkloadPlan
from asyncdeploy.replace.events import Strategy

__all__ = ["SCHEDULE_BOUND", "choose", "fixed_host_ports", "held_host_ports"]

SCHEDULE_BOUND = 10.0  # Kubernetes auto: how long the scheduler may take to place the new Pod


def fixed_host_ports(plan: WorkloadPlan) -> list[str]:
    """The host ports the plan binds by number (``18000/tcp``): one host holds each once."""
    return sorted(
        {
            f"{port.host_port}/{port.protocol}"
            for container in plan.containers
            for port in container.ports
            if port.host_port
        }
    )


async def held_host_ports(driver: Driver, old: Sequence[str]) -> set[str]:
    """The host ports (``18000/tcp``) the old instances publish on Docker or Podman, read from
    the engine's own description of their containers (``HostConfig.PortBindings``)."""
    held: set[str] = set()
    for name in old:
        details = await driver.inspect(name)
        for container in (details.get("containers") or {}).values():
            bindings = ((container.get("HostConfig") or {}).get("PortBindings")) or {}
            for key, binds in bindings.items():
                protocol = str(key).partition("/")[2] or "tcp"
                for bind in binds or []:
                    if str(bind.get("HostPort") or "").isdigit() and int(bind["HostPort"]):
                        held.add(f"{int(bind['HostPort'])}/{protocol}")
    return held


def choose(
    strategy: Strategy, plan: WorkloadPlan, old: Sequence[str], driver: str, held: set[str]
) -> tuple[Literal["surge", "recreate"], str]:
    """The strategy and why, before anything is touched (Kubernetes' auto decides on its try).
    ``held``: the host ports the old instances publish (one host binds each once)."""
    ports = ", ".join(p for p in fixed_host_ports(plan) if p in held)
    one_host = driver != "kubernetes"
    if strategy == "recreate":
        return "recreate", "asked for"
    if not old:
        return "surge", "no earlier instance to replace"
    if strategy == "surge":
        if ports and one_host:
            raise PlanError(
                "strategy",
                f"surge needs host port {ports} twice at once, and one {driver} host can bind "
                "it only once: use --strategy recreate (or auto, which chooses it)",
            )
        return "surge", "asked for"
    if ports and one_host:
        return "recreate", f"host port {ports} is bound by the old instance on this one host"
    if driver == "kubernetes":
        return "surge", (
            f"the new Pod is tried beside the old; recreate if it cannot be scheduled within "
            f"{SCHEDULE_BOUND:g} s"
        )
    return "surge", "nothing it needs is held by the old instance"
