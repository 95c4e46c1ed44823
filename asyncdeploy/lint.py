"""The termination budget lint: does a plan give its server enough time to drain?

The grace period covers the ``pre_stop`` hook *and* the server's own shutdown (they are not
added): it must hold the traffic-removal propagation wait, the longest request, and a margin
for sidecars, logs and runtime cleanup.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import attrs

from asyncdeploy.durations import parse_duration
from asyncdeploy.plan import Container, Probe, WorkloadPlan

__all__ = ["DEFAULT_MARGIN_SECONDS", "Finding", "lint_plan"]

DEFAULT_MARGIN_SECONDS = 15.0


@attrs.frozen(kw_only=True)
class Finding:
    level: Literal["error", "warning"]
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.level}: {self.path}: {self.message}"


def _flag(command: Sequence[str], name: str) -> float | None:
    """The value of ``--name V`` or ``--name=V`` in a command, in seconds."""
    for i, word in enumerate(command):
        if word == name and i + 1 < len(command):
            return parse_duration(command[i + 1])
        if word.startswith(f"{name}="):
            return parse_duration(word.partition("=")[2])
    return None


def _same_endpoint(a: Probe, b: Probe) -> bool:
    return (a.exec, a.http, a.tcp) == (b.exec, b.http, b.tcp)


def lint_plan(
    plan: WorkloadPlan,
    *,
    expected_drain_seconds: float | None = None,
    request_timeout_seconds: float | None = None,
    margin_seconds: float = DEFAULT_MARGIN_SECONDS,
) -> list[Finding]:
    """Findings about the plan's termination budget and probes; errors first."""
    findings: list[Finding] = []
    grace = plan.termination_grace_period_seconds
    for i, container in enumerate(plan.containers):
        if container.role == "run":
            findings += _lint_container(
                f"containers[{i}]",
                container,
                grace,
                expected_drain_seconds,
                request_timeout_seconds,
                margin_seconds,
            )
    return sorted(findings, key=lambda f: f.level != "error")


def _lint_container(
    path: str,
    container: Container,
    grace: int,
    expected_drain: float | None,
    request_timeout: float | None,
    margin: float,
) -> list[Finding]:
    findings = []
    hook = container.pre_stop or ()
    propagation = _flag(hook, "--propagation-wait") or 0.0
    drain = expected_drain if expected_drain is not None else _flag(hook, "--timeout")
    needed = propagation + (drain or 0.0)
    where = "termination_grace_period_seconds"
    if needed > grace:
        findings.append(
            Finding(
                level="error",
                path=where,
                message=f"{grace} s cannot hold {path}'s propagation wait ({propagation:g} s) "
                f"plus its drain ({drain or 0:g} s): requests will be killed",
            )
        )
    elif needed + margin > grace:
        findings.append(
            Finding(
                level="warning",
                path=where,
                message=f"{grace} s leaves {grace - needed:g} s after {path}'s propagation wait "
                f"and drain; keep {margin:g} s for sidecars, logs and cleanup",
            )
        )
    if request_timeout is not None and request_timeout + propagation >= grace:
        findings.append(
            Finding(
                level="error",
                path=where,
                message=f"a request may take {request_timeout:g} s: with the {propagation:g} s "
                f"propagation wait it reaches the {grace} s grace period and will be killed",
            )
        )
    checks = container.checks
    if checks.readiness is None:
        findings.append(
            Finding(
                level="warning",
                path=f"{path}.checks.readiness",
                message="no readiness check: traffic cannot be removed before the drain",
            )
        )
    elif checks.liveness is not None and _same_endpoint(checks.readiness, checks.liveness):
        findings.append(
            Finding(
                level="warning",
                path=f"{path}.checks.liveness",
                message="shares its endpoint with readiness: a draining server fails readiness "
                "on purpose and would then be restarted",
            )
        )
    if not hook and container.ports:
        findings.append(
            Finding(
                level="warning",
                path=f"{path}.pre_stop",
                message="no pre_stop hook: the server gets SIGTERM while traffic is still routed",
            )
        )
    return findings
