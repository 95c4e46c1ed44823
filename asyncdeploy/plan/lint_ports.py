"""Port lint: is a published port one the server listens on, and can the plan be replaced in place?

Pure: what an engine knows of an image (its ``EXPOSE``d ports) comes in as ``image_ports``
(``asyncdeploy lint --inspect-images`` asks the engine; without it only what the plan itself
says is used). Where a server listens is known in two cases:

- the demo server (``python3 -m asyncdeploy.workload.demo``, the CMD of the demo image): its
  ``--port``, 8080 by default;
- an image run with its own command (neither ``command`` nor ``args`` in the plan) whose
  ``EXPOSE``d ports the engine reported.

Every container of a workload shares the pause container's network, so a published port is
fine when any container of the workload is known to listen on it, and is only questioned when
the container that publishes it is known to listen elsewhere.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

from asyncdeploy.plan import Container, WorkloadPlan
from asyncdeploy.plan.gating import gate_listen_port

__all__ = ["DEMO_MODULE", "DEMO_PORT", "lint_ports", "lint_replace_in_place", "listening_ports"]

DEMO_MODULE = "asyncdeploy.workload.demo"
DEMO_PORT = 8080  # the demo server's default --port, and what the demo image's CMD passes
DEMO_IMAGE_REPOSITORY = "asyncdeploy/demo"

Level = Literal["error", "warning"]
PortFinding = tuple[Level, str, str]  # (level, path, message): lint.Finding's fields


def _demo_port(words: Sequence[str]) -> int | None:
    """The port a command line that runs the demo server listens on, None for another command."""
    if DEMO_MODULE not in words:
        return None
    for i, word in enumerate(words):
        value = None
        if word == "--port" and i + 1 < len(words):
            value = words[i + 1]
        elif word.startswith("--port="):
            value = word.partition("=")[2]
        if value is not None:
            return int(value) if value.isdigit() else None
    return DEMO_PORT


def _is_demo_image(image: str) -> bool:
    """``localhost/asyncdeploy/demo`` at any tag, digest or registry (a mirror's copy too)."""
    name = image.split("@", 1)[0]
    if name.rfind(":") > name.rfind("/"):
        name = name[: name.rfind(":")]
    return name == DEMO_IMAGE_REPOSITORY or name.endswith("/" + DEMO_IMAGE_REPOSITORY)


def listening_ports(
    container: Container, image_ports: Mapping[str, frozenset[int] | None]
) -> frozenset[int] | None:
    """The TCP ports ``container``'s server is known to listen on; None when not known."""
    words = [*(container.command or ()), *(container.args or ())]
    if (port := _demo_port(words)) is not None:
        return frozenset({port})
    if container.command is None and container.args is None:
        if _is_demo_image(container.image):
            return frozenset({DEMO_PORT})
        exposed = image_ports.get(container.image)
        if exposed:  # an image that EXPOSEs nothing tells nothing
            return exposed
    return None


def lint_ports(
    plan: WorkloadPlan, image_ports: Mapping[str, frozenset[int] | None] | None = None
) -> list[PortFinding]:
    """A warning for each published TCP port that the container publishing it is known not to
    listen on, and for each HTTP or TCP check aimed at such a port."""
    known = {
        i: listening_ports(c, image_ports or {})
        for i, c in enumerate(plan.containers)
        if c.role == "run"
    }
    # a gate listens on its container's first tcp port, where clients and checks arrive
    gates = frozenset(gate_listen_port(c) for c in plan.containers if c.gate is not None)
    everywhere = gates.union(*(p for p in known.values() if p is not None))
    findings: list[PortFinding] = []
    for i, ports in known.items():
        if ports is None:
            continue
        container = plan.containers[i]
        if container.gate is not None:
            findings += _lint_gated(i, container, ports)
            continue
        listens = ", ".join(map(str, sorted(ports)))
        why = _source(container)
        for j, port in enumerate(container.ports):
            if port.protocol != "tcp" or port.container_port in everywhere:
                continue
            where = f" (host port {port.host_port})" if port.host_port else ""
            findings.append(
                (
                    "warning",
                    f"containers[{i}].ports[{j}].container_port",
                    (
                        f"{container.name} listens on {listens} ({why}), not on "
                        f"{port.container_port}: nothing will answer on this port{where}"
                    ),
                )
            )
        for kind in ("startup", "readiness", "liveness"):
            probe = getattr(container.checks, kind)
            target = None
            if probe is not None and probe.http is not None:
                target = probe.http.port
            elif probe is not None and probe.tcp is not None:
                target = probe.tcp
            if target is not None and target not in everywhere:
                findings.append(
                    (
                        "warning",
                        f"containers[{i}].checks.{kind}",
                        (
                            f"{container.name} listens on {listens} ({why}), not on "
                            f"{target}: the {kind} check will never pass"
                        ),
                    )
                )
    return findings


def _lint_gated(i: int, container: Container, ports: frozenset[int]) -> list[PortFinding]:
    """A gated container's published ports and checks are the gate's; what the engine behind
    it listens on must be the gate's ``upstream``."""
    assert container.gate is not None
    if container.gate.upstream in ports:
        return []
    listens = ", ".join(map(str, sorted(ports)))
    return [
        (
            "warning",
            f"containers[{i}].gate.upstream",
            (
                f"{container.name} listens on {listens} ({_source(container)}), not on "
                f"{container.gate.upstream}: the gate would pass requests to a port nobody answers"
            ),
        )
    ]


def _source(container: Container) -> str:
    words = [*(container.command or ()), *(container.args or ())]
    if _demo_port(words) is not None:
        return "the demo server's --port" if "--port" in " ".join(words) else "the demo default"
    if _is_demo_image(container.image):
        return "the demo image's command"
    return f"{container.image} EXPOSEs it"


def lint_replace_in_place(plan: WorkloadPlan) -> list[PortFinding]:
    """A warning for each fixed host port: the new instance of a replace cannot bind it while
    the old one serves on the same host, so the old one must drain first (downtime)."""
    findings: list[PortFinding] = []
    for i, container in enumerate(plan.containers):
        for j, port in enumerate(container.ports):
            if port.host_port is None:
                continue
            findings.append(
                (
                    "warning",
                    f"containers[{i}].ports[{j}].host_port",
                    (
                        f"fixed host port {port.host_port}: the plan cannot be replaced in "
                        "place on one host (the new instance cannot bind the port beside the "
                        "old one), so a replace drains the old one first, with downtime; leave "
                        "host_port out (the engine picks one, on 127.0.0.1) behind a balancer on "
                        "the engine's host to avoid it"
                    ),
                )
            )
    return findings
