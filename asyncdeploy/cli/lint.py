"""``asyncdeploy lint``: a plan's termination budget, probes and ports, before anything runs."""

from __future__ import annotations

import sys

import attrs
import click

from asyncdeploy.cli._common import (
    DURATION,
    EXIT_FAILED,
    Settings,
    echo_out,
    emit_json,
    output_option,
    read_plan_files,
    run,
)
from asyncdeploy.cli._terminal import fold, terminal_width
from asyncdeploy.plan import WorkloadPlan
from asyncdeploy.plan.lint import lint_plan

__all__ = ["lint"]


@click.command("lint")
@click.argument("plan_files", nargs=-1, required=True)
@click.option(
    "--expected-drain", type=DURATION, default=None, help="How long draining takes, e.g. 30s."
)
@click.option(
    "--request-timeout", type=DURATION, default=None, help="The longest request, e.g. 60s."
)
@click.option(
    "--margin",
    type=DURATION,
    default="15s",
    show_default=True,
    help="Reserve for sidecars and cleanup.",
)
@click.option("--strict", is_flag=True, help="Fail on warnings too.")
@click.option(
    "--inspect-images",
    is_flag=True,
    help="Ask the engine (--driver, or the first that answers) which ports each local image "
    "EXPOSEs, to check the published ports against them (exit 3 when no engine answers).",
)
@output_option
def lint(
    plan_files: tuple[str, ...],
    expected_drain: float | None,
    request_timeout: float | None,
    margin: float,
    strict: bool,
    inspect_images: bool,
    output: str,
) -> None:
    """Check a plan's termination budget, probes and ports (exit 1 on errors).

    PLAN: files, folders or - (stdin), as create -f reads them. For each plan, the budget line
    by line (each run container's propagation wait, drain, an engine's own shutdown, GPUs to
    free and the margin, against the grace period), then the findings. A published port the
    server is known not to listen on (the demo image's 8080, an image's EXPOSEd ports with
    --inspect-images, a gate's upstream) and a fixed host port (no replace in place) are warned.
    """
    from asyncdeploy.plan.budget import budget_text, termination_budget

    failed = False
    for plan in read_plan_files(plan_files):
        image_ports = run(_image_ports, plan) if inspect_images else None
        findings = lint_plan(
            plan,
            expected_drain_seconds=expected_drain,
            request_timeout_seconds=request_timeout,
            margin_seconds=margin,
            image_ports=image_ports,
        )
        budgets = termination_budget(
            plan,
            expected_drain_seconds=expected_drain,
            request_timeout_seconds=request_timeout,
            margin_seconds=margin,
        )
        if output == "json":
            emit_json(
                {
                    "plan": plan.name,
                    "budget": [
                        {**attrs.asdict(b), "total": b.total, "holds": b.holds} for b in budgets
                    ],
                    "findings": [attrs.asdict(f) for f in findings],
                }
            )
        else:
            for line in budget_text(plan, budgets):
                echo_out(line)
            width = terminal_width(sys.stdout)
            for finding in findings:
                echo_out(fold(str(finding), width))
            if not findings:
                echo_out(f"{plan.name}: the termination budget holds")
        failed |= any(f.level == "error" or strict for f in findings)
    if failed:
        raise click.exceptions.Exit(EXIT_FAILED)


async def _image_ports(plan: WorkloadPlan) -> dict[str, frozenset[int] | None]:
    """What the engine knows of the plan's images: the ports each EXPOSEs (None: not local)."""
    settings = click.get_current_context().find_object(Settings) or Settings(driver=None)
    async with settings.open_deployer() as deployer:
        images = dict.fromkeys(c.image for c in plan.containers)
        return {image: await deployer.image_ports(image) for image in images}
