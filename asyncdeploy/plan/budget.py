"""The termination budget of a plan, line by line: what each run container's drain spends of
the one grace period, and where each number comes from. Pure: what ``asyncdeploy lint``
prints before its findings (:mod:`asyncdeploy.plan.lint` judges the same numbers)."""

from __future__ import annotations

import attrs

from asyncdeploy.plan import Container, WorkloadPlan
from asyncdeploy.plan.gating import GATE_MARGIN
from asyncdeploy.plan.presets import find_preset, flag_seconds
from asyncdeploy.plan.propagation import propagation

__all__ = ["Budget", "BudgetLine", "budget_text", "termination_budget"]

GPU_RELEASE_SECONDS = 10.0  # freeing a model's device memory after the drain (CUDA teardown)


@attrs.frozen(kw_only=True)
class BudgetLine:
    """One part of a container's budget: what, how long, and where the number comes from."""

    what: str
    seconds: float
    source: str


@attrs.frozen(kw_only=True)
class Budget:
    """What one run container's drain needs of the workload's grace period."""

    container: str
    grace: int
    lines: tuple[BudgetLine, ...]

    @property
    def total(self) -> float:
        return sum(line.seconds for line in self.lines)

    @property
    def holds(self) -> bool:
        return self.total <= self.grace


def termination_budget(
    plan: WorkloadPlan,
    *,
    expected_drain_seconds: float | None = None,
    request_timeout_seconds: float | None = None,
    margin_seconds: float,
) -> list[Budget]:
    """Each run container's budget: its propagation wait, its drain (or the longest request,
    when longer), an engine's own shutdown, GPUs to free, and the margin."""
    return [
        _budget(plan, c, expected_drain_seconds, request_timeout_seconds, margin_seconds)
        for c in plan.run_containers
    ]


def _budget(
    plan: WorkloadPlan,
    container: Container,
    expected_drain: float | None,
    request_timeout: float | None,
    margin: float,
) -> Budget:
    hook = container.pre_stop or ()
    lines = []
    window = propagation(container)
    if window is None:
        lines.append(
            BudgetLine(
                what="propagation wait", seconds=0.0, source="none: traffic may still arrive"
            )
        )
    else:
        lines.append(
            BudgetLine(what="propagation wait", seconds=window.seconds, source=window.source)
        )
    if expected_drain is not None:
        drain, source = expected_drain, "--expected-drain"
    elif (timeout := flag_seconds(hook, "--timeout")) is not None:
        drain, source = timeout, "pre_stop --timeout"
    elif container.gate is not None:
        cut = max(1, plan.termination_grace_period_seconds - GATE_MARGIN)
        drain, source = 0.0, f"not known: --expected-drain (cut at {cut} s)"
    else:
        drain, source = 0.0, "not known: --expected-drain"
    if request_timeout is not None and request_timeout > drain:
        drain, source = request_timeout, "the longest request (--request-timeout)"
    lines.append(BudgetLine(what="drain", seconds=drain, source=source))
    argv = [*(container.command or ()), *(container.args or ())]
    preset = find_preset(container.image, argv)
    if preset is not None:
        own = preset.sigterm_drain(argv)
        drained_first = bool(container.gate or container.pre_stop or container.pre_stop_http)
        if not drained_first and own not in (None, float("inf")):
            lines.append(
                BudgetLine(
                    what=f"{preset.name}'s drain",
                    seconds=own or 0.0,
                    source=preset.flag or "on SIGTERM",
                )
            )
        lines.append(
            BudgetLine(
                what=f"{preset.name}'s exit", seconds=preset.exit_seconds, source="its shutdown"
            )
        )
    if container.resources.accelerated:
        lines.append(
            BudgetLine(what="GPU release", seconds=GPU_RELEASE_SECONDS, source="device memory")
        )
    lines.append(BudgetLine(what="margin", seconds=margin, source="sidecars, logs (--margin)"))
    return Budget(
        container=container.name, grace=plan.termination_grace_period_seconds, lines=tuple(lines)
    )


def budget_text(plan: WorkloadPlan, budgets: list[Budget]) -> list[str]:
    """The budgets as lines under 80 columns."""
    out = [f"{plan.name}: termination budget, grace {plan.termination_grace_period_seconds} s"]
    width = min(16, max([len(b.container) for b in budgets] + [6]))
    for budget in budgets:
        for i, line in enumerate(budget.lines):
            name = budget.container[:width] if i == 0 else ""
            out.append(f"  {name:<{width}} {line.what:<16} {line.seconds:>4g} s  {line.source}")
        spare = budget.grace - budget.total
        verdict = f"holds, {spare:g} s to spare" if budget.holds else f"short by {-spare:g} s"
        out.append(f"  {'':<{width}} {'total':<16} {budget.total:>4g} s  {verdict}")
    return [line[:79] for line in out]
