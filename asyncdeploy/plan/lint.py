"""The termination budget lint: does a plan give its server enough time to drain?

The grace period covers the ``pre_stop`` hook *and* the server's own shutdown (they are not
added): it must hold the traffic-removal propagation wait, the longest request, and a margin
for sidecars, logs and runtime cleanup.

GPU containers (a device or an extended resource count) get three more checks, all warnings:
the margin grows by the time a server takes to free device memory after its drain; ``/dev/shm``
should be sized (the engines' 64 MB default breaks PyTorch data loaders and NCCL); and a
liveness check needs a startup check, or it restarts a server still loading its model.

Known engines (vLLM, SGLang, TGI, Triton, llama.cpp's server: :mod:`asyncdeploy.plan.presets`)
add their own stop behaviour: the budget must also hold the engine's own shutdown; an engine
that aborts in-flight requests on SIGTERM needs a drain before it (a ``gate``); one that
drains on SIGTERM after a preStop drain spends the budget twice; and behind a gate, an engine
listening beyond the workload's loopback can be reached around the gate.
Ports (:mod:`asyncdeploy.plan.lint_ports`): a published port the server is known not to listen on,
and a fixed host port, which keeps a replace from starting the new instance beside the old one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

import attrs

from asyncdeploy.plan import Container, Probe, WorkloadPlan
from asyncdeploy.plan.budget import GPU_RELEASE_SECONDS
from asyncdeploy.plan.gating import GATE_MARGIN
from asyncdeploy.plan.lint_ports import lint_ports, lint_replace_in_place
from asyncdeploy.plan.presets import EnginePreset, find_preset, flag_seconds, is_loopback
from asyncdeploy.plan.propagation import propagation

__all__ = ["DEFAULT_MARGIN_SECONDS", "GPU_RELEASE_SECONDS", "Finding", "lint_plan"]

DEFAULT_MARGIN_SECONDS = 15.0


@attrs.frozen(kw_only=True)
class Finding:
    level: Literal["error", "warning"]
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.level}: {self.path}: {self.message}"


def _same_endpoint(a: Probe, b: Probe) -> bool:
    return (a.exec, a.http, a.tcp) == (b.exec, b.http, b.tcp)


def lint_plan(
    plan: WorkloadPlan,
    *,
    expected_drain_seconds: float | None = None,
    request_timeout_seconds: float | None = None,
    margin_seconds: float = DEFAULT_MARGIN_SECONDS,
    image_ports: Mapping[str, frozenset[int] | None] | None = None,
) -> list[Finding]:
    """Findings about the plan's termination budget, probes and ports; errors first.

    ``image_ports``: the ports each image ``EXPOSE``s, where an engine was asked
    (:mod:`asyncdeploy.plan.lint_ports`)."""
    findings: list[Finding] = []
    grace = plan.termination_grace_period_seconds
    for i, container in enumerate(plan.containers):
        if container.role == "run":
            gpu = container.resources.accelerated
            findings += _lint_container(
                f"containers[{i}]",
                container,
                grace,
                expected_drain_seconds,
                request_timeout_seconds,
                margin_seconds + (GPU_RELEASE_SECONDS if gpu else 0.0),
            )
            if gpu:
                findings += _lint_gpu(plan, f"containers[{i}]", container)
            budget_flagged = any(f.path == "termination_grace_period_seconds" for f in findings)
            findings += _lint_engine(
                f"containers[{i}]",
                container,
                grace,
                expected_drain_seconds,
                margin_seconds,
                budget_flagged=budget_flagged,
            )
    findings += _port_findings(plan, image_ports)
    return sorted(findings, key=lambda f: f.level != "error")


def _port_findings(
    plan: WorkloadPlan, image_ports: Mapping[str, frozenset[int] | None] | None
) -> list[Finding]:
    found = lint_ports(plan, image_ports) + lint_replace_in_place(plan)
    return [Finding(level=level, path=path, message=message) for level, path, message in found]


def _lint_gpu(plan: WorkloadPlan, path: str, container: Container) -> list[Finding]:
    findings = []
    if plan.shm_size is None and not any(m.target == "/dev/shm" for m in container.mounts):
        findings.append(
            Finding(
                level="warning",
                path="shm_size",
                message=f"{path} uses GPUs with the engine's 64 MB /dev/shm: PyTorch data "
                "loaders and NCCL need more; set shm_size (e.g. 8Gi)",
            )
        )
    if container.checks.liveness is not None and container.checks.startup is None:
        findings.append(
            Finding(
                level="warning",
                path=f"{path}.checks.startup",
                message="a GPU server's liveness check without a startup check restarts it "
                "while it is still loading its model",
            )
        )
    return findings


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
    propagation = _propagation(container)
    drain = expected_drain if expected_drain is not None else flag_seconds(hook, "--timeout")
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
                f"and drain; keep {margin:g} s for sidecars, logs and cleanup"
                + (" and releasing its GPUs" if container.resources.accelerated else ""),
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
    if checks.readiness is None and container.gate is None:  # a gate's readiness is the gate's
        findings.append(
            Finding(
                level="warning",
                path=f"{path}.checks.readiness",
                message="no readiness check: traffic cannot be removed before the drain",
            )
        )
    elif (
        checks.readiness is not None
        and checks.liveness is not None
        and _same_endpoint(checks.readiness, checks.liveness)
    ):
        findings.append(
            Finding(
                level="warning",
                path=f"{path}.checks.liveness",
                message="shares its endpoint with readiness: a draining server fails readiness "
                "on purpose and would then be restarted",
            )
        )
    if not hook and container.ports and container.gate is None and not container.pre_stop_http:
        findings.append(
            Finding(
                level="warning",
                path=f"{path}.pre_stop",
                message="no pre_stop hook: the server gets SIGTERM while traffic is still routed",
            )
        )
    return findings


def _propagation(container: Container) -> float:
    window = propagation(container)
    return 0.0 if window is None else window.seconds


def _lint_engine(
    path: str,
    container: Container,
    grace: int,
    expected_drain: float | None,
    margin: float,
    *,
    budget_flagged: bool,
) -> list[Finding]:
    """The known engines' own stop behaviour against the plan's drain and budget."""
    argv = [*(container.command or ()), *(container.args or ())]
    preset = find_preset(container.image, argv)
    if preset is None:
        return []
    findings: list[Finding] = []
    where = "termination_grace_period_seconds"
    findings += _lint_listen(path, container, preset, argv)
    drained_first = bool(container.gate or container.pre_stop or container.pre_stop_http)
    on_sigterm = preset.sigterm_drain(argv)
    behaviour = preset.describe_drain(argv)
    if not drained_first and on_sigterm is None:
        fix = f" or set {preset.flag}" if preset.flag else ""
        findings.append(
            Finding(
                level="warning",
                path=f"{path}.gate",
                message=f"{preset.name} {behaviour} and nothing drains it first: put a gate in "
                f"front of it (gate: {{upstream: <its port>, ready: {{path: /health}}}}){fix}",
            )
        )
    hook = container.pre_stop or ()
    propagation = _propagation(container)
    drain = (
        expected_drain if expected_drain is not None else (flag_seconds(hook, "--timeout") or 0.0)
    )
    own_drain = on_sigterm if not drained_first and on_sigterm not in (None, float("inf")) else 0
    needed = propagation + drain + (own_drain or 0.0)
    # The margin already holds a short exit of the engine's own; a longer one adds to it.
    reserve = max(margin, preset.exit_seconds + 5)
    if needed + reserve > grace and not budget_flagged:
        findings.append(
            Finding(
                level="warning",
                path=where,
                message=f"{grace} s cannot hold {path}'s propagation ({propagation:g} s) + drain "
                f"({drain + (own_drain or 0):g} s) + {preset.name}'s own shutdown "
                f"({preset.exit_seconds:g} s) and a margin ({reserve:g} s in all)",
            )
        )
    if drained_first and on_sigterm is not None and on_sigterm != float("inf"):
        # The hook may use the whole grace period (the gate cuts GATE_MARGIN s before its end);
        # then the engine's own SIGTERM drain is a second wait inside the same budget.
        hook_budget = grace - GATE_MARGIN if container.gate else propagation + drain
        if hook_budget + on_sigterm > grace:
            fix = f"; a short {preset.flag} (a few seconds) is enough" if preset.flag else ""
            findings.append(
                Finding(
                    level="warning",
                    path=where,
                    message=f"{path} is drained by its preStop hook and {preset.name} then "
                    f"{behaviour}: the two drains spend the {grace} s budget twice (after the "
                    f"hook nothing is in flight, so its own wait only risks the SIGKILL){fix}",
                )
            )
    return findings


def _lint_listen(
    path: str, container: Container, preset: EnginePreset, argv: Sequence[str]
) -> list[Finding]:
    """Behind a gate, the engine's own port on an address clients reach bypasses the gate."""
    if container.gate is None:
        return []
    address, said_by = preset.listen_address(argv, container.env)
    if is_loopback(address):
        return []
    return [
        Finding(
            level="warning",
            path=f"{path}.args",
            message=f"{preset.name} listens on {address} ({said_by}): a client that finds its "
            f"port {container.gate.upstream} on the workload's address goes around the gate "
            f"(no drain, not counted); bind it to the workload's loopback: "
            f"{preset.listen_flag} 127.0.0.1",
        )
    ]
