"""``replace -f plan.yaml``: a new instance of the plan, and the old one drained (surge, recreate
or auto, which chooses)."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import cast

import click

from asyncdeploy import Deployer, Replacement
from asyncdeploy._events import DrainEvent, PullEvent, event_to_dict
from asyncdeploy.cli._common import (
    DURATION,
    PLAN_FILES_HELP,
    Settings,
    emit_json,
    grace_option,
    output_option,
    pass_settings,
    read_one_plan,
    run,
    status_dict,
    strategy_option,
)
from asyncdeploy.cli._signals import Interrupts
from asyncdeploy.cli.render import EventRenderer
from asyncdeploy.cli.workloads import stream_drain
from asyncdeploy.plan import WorkloadPlan
from asyncdeploy.replace.events import (
    REPLACE_EVENTS,
    ReplaceEvent,
    Strategy,
    describe_replace,
    downtime_words,
    replace_event_to_dict,
)

__all__ = ["replace"]


@click.command()
@click.option("-f", "--file", "plan_file", required=True, help=PLAN_FILES_HELP)
@strategy_option
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
    strategy: str,
    old: tuple[str, ...],
    new_name: str | None,
    timeout: float,
    grace_period_seconds: int | None,
    output: str,
) -> None:
    """Replace a workload: start the plan as a new instance and drain the old instance(s) as
    delete does, the new one ready first (surge) or the old one drained first (recreate).

    A load balancer that follows readiness checks never sees a gap with surge: the new instance
    passes its readiness check before the old one starts draining, and a draining instance fails
    its own readiness check before it stops serving. If the new one never becomes ready it is
    removed and the old one keeps serving (exit 1).

    Ctrl-C or SIGTERM before the old instance's drain begins stops the replace: the new instance
    is removed and the old one keeps serving (exit 130/143). During the drain, the first lets it
    finish and a second kills what remains, as for delete.
    """
    ready_timeout = timeout
    interrupts = Interrupts("replace", f"replace from {plan_file}")

    plan = read_one_plan([plan_file], "replace")

    async def impl() -> None:
        async with settings.for_plan(plan).open_deployer() as deployer:
            await stream_drain(
                _replacing(
                    deployer,
                    plan,
                    cast(Strategy, strategy),
                    old,
                    new_name,
                    ready_timeout,
                    grace_period_seconds,
                    output,
                    interrupts,
                ),
                output,
            )
            interrupts.settled()  # replaced: a late signal must not claim a kill

    run(interrupts.guard, impl)


def _printer(output: str) -> EventRenderer | None:
    return None if output == "json" else EventRenderer(sys.stderr)


@asynccontextmanager
async def _replacing(
    deployer: Deployer,
    plan: WorkloadPlan,
    strategy: Strategy,
    old: tuple[str, ...],
    new_name: str | None,
    ready_timeout: float,
    grace_period_seconds: int | None,
    output: str,
    interrupts: Interrupts,
) -> AsyncIterator[Replacement]:
    """The replacement's drain events, after saying which instance took over."""
    lines = _printer(output)

    def show(event: ReplaceEvent | DrainEvent | PullEvent) -> None:
        if isinstance(event, REPLACE_EVENTS):
            if lines is None:
                emit_json(replace_event_to_dict(event))
            else:
                click.echo(f"replace: {describe_replace(event)}", err=True)
        elif lines is None:
            emit_json(event_to_dict(event))
        else:
            lines.show(event)

    replacement = deployer.replacing(
        plan,
        old=old or None,
        new_name=new_name,
        ready_timeout=ready_timeout,
        grace_period_seconds=grace_period_seconds,
        strategy=strategy,
        before_drain=interrupts.now_draining,
        on_event=show,
    )
    interrupts.attach(replacement)
    async with replacement:
        if output == "json":
            emit_json(
                {
                    "replacement": status_dict(replacement.new),
                    "old": list(replacement.old),
                    "strategy": replacement.strategy,
                    "downtime": replacement.downtime,
                }
            )
        else:
            for summary in replacement.drained:
                click.echo(EventRenderer.summary_table(summary))
            olds = ", ".join(replacement.old) or "nothing (no earlier instance)"
            if replacement.strategy == "recreate":
                click.echo(
                    f"ready: {replacement.new.name}; drained {olds} first "
                    f"(recreate: {downtime_words(replacement.downtime)})",
                    err=True,
                )
            else:
                click.echo(f"ready: {replacement.new.name}; draining {olds}", err=True)
        yield replacement
