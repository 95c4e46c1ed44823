"""Commands on workloads: create, delete, delete-all, inspect (list, get: views.py)."""

from __future__ import annotations

import json
import sys
from typing import Any

import anyio
import attrs
import click

from asyncdeploy.cli._common import (
    DURATION,
    WORKLOAD_NAME,
    Settings,
    emit_json,
    grace_option,
    output_option,
    pass_settings,
    run,
    selector_option,
    status_dict,
)
from asyncdeploy.cli._signals import Interrupts
from asyncdeploy.errors import AsyncDeployError, CreateError
from asyncdeploy.events import DrainEvent, DrainFinished, DrainSummary, Event, event_to_dict
from asyncdeploy.plan import WorkloadPlan
from asyncdeploy.pull_events import PullFailed, PullFinished, PullProgress, PullStarted
from asyncdeploy.render import EventRenderer, LiveView, PullView, for_stream
from asyncdeploy.selectors import Selector

_PULL_EVENTS = (PullStarted, PullProgress, PullFinished, PullFailed)


@click.command()
@click.option("-f", "--file", "plan_file", required=True, type=click.Path(dir_okay=False))
@click.option(
    "--wait",
    is_flag=True,
    help="Return once every run container is ready; why it will not start (an image "
    "that cannot be pulled, no node for it, ...) fails the command at once, and the workload is "
    "removed.",
)
@click.option(
    "--timeout",
    type=DURATION,
    default="60s",
    show_default=True,
    help="With --wait: how long it may take.",
)
@click.option(
    "--keep-failed",
    is_flag=True,
    help="With --wait: keep a workload that will not start, to look at it (logs, get, "
    "inspect); delete it afterwards.",
)
@output_option
@pass_settings
def create(
    settings: Settings, plan_file: str, wait: bool, timeout: float, keep_failed: bool, output: str
) -> None:
    """Create a workload from a YAML or JSON plan (a no-op when it is unchanged).

    Images are pulled first, as the plan's pull policies say: progress bars on a terminal,
    a line per pull otherwise, one JSON object per event with --output json.
    """
    interrupts = Interrupts("cancel", f"create from {plan_file}")

    async def impl() -> None:
        plan = WorkloadPlan.from_file(plan_file)
        bars = PullView(sys.stderr) if output == "text" and sys.stderr.isatty() else None
        lines = EventRenderer(sys.stderr)
        async with settings.open_deployer() as deployer:
            async with deployer.creating(plan) as events:
                event: Event
                async for event in events:
                    if output == "json":
                        emit_json(event_to_dict(event))
                    elif bars is not None and isinstance(event, _PULL_EVENTS):
                        bars.show(event)
                    else:
                        lines.show(event)
            result = events.result
            if wait:
                try:
                    ready = await deployer.wait_ready(plan.name, timeout=timeout)
                except CreateError:
                    # it will not start as planned. Its exit code and logs are in the error,
                    # read before this removal; nothing is left behind (bounded, shielded)
                    if keep_failed:
                        click.echo(f"kept {plan.name}: asyncdeploy delete {plan.name}", err=True)
                        raise
                    with anyio.CancelScope(shield=True), anyio.move_on_after(30):
                        try:
                            await deployer.delete(plan.name, grace_period_seconds=0)
                        except AsyncDeployError as exc:  # the CreateError is the news
                            click.echo(f"removing {plan.name} failed: {exc}", err=True)
                        else:
                            click.echo(f"removed {plan.name}: it will not start", err=True)
                    raise
                result = attrs.evolve(result, status=ready)
            interrupts.settled = True  # created: a signal from now on must not claim otherwise
        if output == "json":
            emit_json({"action": result.action, "workload": status_dict(result.status)})
        else:
            click.echo(f"{result.action}: {plan.name} on {result.status.driver}")

    run(interrupts.guard, impl)


@click.command()
@click.argument("name", type=WORKLOAD_NAME)
@grace_option
@output_option
@pass_settings
def delete(settings: Settings, name: str, grace_period_seconds: int | None, output: str) -> None:
    """Drain a workload gracefully, then remove it, showing every step."""

    interrupts = Interrupts("drain", f"delete of {name!r}")

    async def impl() -> None:
        async with settings.open_deployer() as deployer:
            drain = deployer.terminate(
                name, grace_period_seconds=grace_period_seconds, kill_now=interrupts.kill_now
            )
            await stream_drain(drain, output, interrupts)
            interrupts.settled = True  # drained: a late signal must not claim a kill

    run(interrupts.guard, impl)


@click.command("delete-all")
@selector_option
@click.option("--all", "everything", is_flag=True, help="Every workload (instead of --selector).")
@grace_option
@output_option
@pass_settings
def delete_all(
    settings: Settings,
    selector: Selector | None,
    everything: bool,
    grace_period_seconds: int | None,
    output: str,
) -> None:
    """Drain every matching workload at once, under one deadline.

    Needs --selector, or --all to drain every workload asyncdeploy manages.
    """
    if (selector is None) == (not everything):
        raise click.UsageError("delete-all needs exactly one of --selector and --all")
    interrupts = Interrupts("drain", "delete-all")

    async def impl() -> None:
        async with settings.open_deployer() as deployer:
            drain = deployer.terminate_all(
                selector, grace_period_seconds=grace_period_seconds, kill_now=interrupts.kill_now
            )
            if not await stream_drain(drain, output, interrupts):
                click.echo("No resources found", err=True)  # as kubectl: exit 0
            interrupts.settled = True  # drained: a late signal must not claim a kill

    run(interrupts.guard, impl)


async def stream_drain(
    drain: Any, output: str, interrupts: Interrupts | None = None
) -> list[DrainSummary]:
    """Print a drain's events as they come, then the result; return the summaries.

    JSON: one object per event on stdout. Text: on a terminal of 80 columns or more, a live
    per-container view on stderr (state, seconds left); otherwise (no terminal, narrower,
    TERM=dumb) one line per event on stderr. Then a table per workload on stdout, also when the
    drain failed (its ``DrainError`` is raised after the tables): that is when it matters most.
    """
    summaries: list[DrainSummary] = []
    renderer: EventRenderer | LiveView | None = None
    if output == "text":
        renderer = for_stream(sys.stderr)
        if interrupts is not None:
            interrupts.notice = renderer.note  # a signal's notice above the live table

    async def tick(view: LiveView) -> None:
        while True:
            await anyio.sleep(0.25)
            view.redraw()

    try:
        async with drain as events, anyio.create_task_group() as tg:
            if isinstance(renderer, LiveView):
                tg.start_soon(tick, renderer)
            event: DrainEvent
            async for event in events:
                if isinstance(event, DrainFinished):
                    summaries.append(event.summary)
                if renderer is None:
                    emit_json(event_to_dict(event))
                else:
                    renderer.show(event)
            tg.cancel_scope.cancel()
    finally:
        if interrupts is not None:
            interrupts.notice = None
        if renderer is not None:
            renderer.close()
            for summary in summaries:
                click.echo(EventRenderer.summary_table(summary))
    return summaries


@click.command()
@click.argument("name", type=WORKLOAD_NAME)
@output_option
@pass_settings
def inspect(settings: Settings, name: str, output: str) -> None:
    """Engine detail of a workload (secret-looking env values masked)."""

    async def impl() -> None:
        async with settings.open_deployer() as deployer:
            details = await deployer.inspect(name)
        click.echo(json.dumps(details, indent=None if output == "json" else 2, default=str))

    run(impl)
