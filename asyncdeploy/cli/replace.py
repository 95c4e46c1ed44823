"""``replace -f plan.yaml``: a zero-downtime replacement (new instance ready, then the old drained)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import click
from anyio.abc import ObjectReceiveStream

from asyncdeploy import Deployer, Replacement
from asyncdeploy.cli._common import (
    DURATION,
    Settings,
    emit_json,
    grace_option,
    output_option,
    pass_settings,
    run,
    status_dict,
)
from asyncdeploy.cli.workloads import stream_drain
from asyncdeploy.events import DrainEvent
from asyncdeploy.plan import WorkloadPlan

__all__ = ["replace"]


@click.command()
@click.option("-f", "--file", "plan_file", required=True, type=click.Path(dir_okay=False))
@click.option(
    "--old",
    "old",
    multiple=True,
    help="A workload to drain once the new one is ready (repeatable) "
    "[default: the plan's name and its earlier instances].",
)
@click.option(
    "--name", "new_name", default=None, help="The new instance's name [default: NAME-xxxxxx]."
)
@click.option(
    "--timeout",
    type=DURATION,
    default="60s",
    show_default=True,
    help="How long the new one may take to be ready.",
)
@grace_option
@output_option
@pass_settings
def replace(
    settings: Settings,
    plan_file: str,
    old: tuple[str, ...],
    new_name: str | None,
    timeout: float,
    grace_period_seconds: int | None,
    output: str,
) -> None:
    """Replace a workload without downtime: start the plan under a new name, wait until it is
    ready, then drain the old instance(s) as delete does.

    A load balancer that follows readiness checks never sees a gap: the new instance passes its
    readiness check before the old one starts draining, and a draining instance fails its own
    readiness check before it stops serving. If the new one never becomes ready it is removed
    and the old one keeps serving (exit 1).
    """
    ready_timeout = timeout

    async def impl() -> None:
        plan = WorkloadPlan.from_file(plan_file)
        async with settings.for_plan(plan).open_deployer() as deployer:
            await stream_drain(
                _replacing(
                    deployer, plan, old, new_name, ready_timeout, grace_period_seconds, output
                ),
                output,
            )

    run(impl)


@asynccontextmanager
async def _replacing(
    deployer: Deployer,
    plan: WorkloadPlan,
    old: tuple[str, ...],
    new_name: str | None,
    ready_timeout: float,
    grace_period_seconds: int | None,
    output: str,
) -> AsyncIterator[ObjectReceiveStream[DrainEvent]]:
    """The replacement's drain events, after saying which instance took over."""
    replacement: Replacement
    async with deployer.replacing(
        plan,
        old=old or None,
        new_name=new_name,
        ready_timeout=ready_timeout,
        grace_period_seconds=grace_period_seconds,
    ) as replacement:
        if output == "json":
            emit_json({"replacement": status_dict(replacement.new), "old": list(replacement.old)})
        else:
            olds = ", ".join(replacement.old) or "nothing (no earlier instance)"
            click.echo(f"ready: {replacement.new.name}; draining {olds}", err=True)
        yield replacement.events
