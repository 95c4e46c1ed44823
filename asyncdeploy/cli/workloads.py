"""Commands on workloads: create, delete, delete-all, inspect (list, get: views.py)."""

from __future__ import annotations

import json
import sys
from typing import Any

import anyio
import attrs
import click

from asyncdeploy.cli._common import (
    Settings,
    emit_json,
    grace_option,
    output_option,
    parse_selector,
    parse_timeout,
    pass_settings,
    run,
    status_dict,
)
from asyncdeploy.events import DrainEvent, DrainFinished, DrainSummary, event_to_dict
from asyncdeploy.plan import WorkloadPlan
from asyncdeploy.render import EventRenderer, LiveView, for_stream


@click.command()
@click.option("-f", "--file", "plan_file", required=True, type=click.Path(dir_okay=False))
@click.option("--wait", is_flag=True, help="Return once every run container is ready.")
@click.option(
    "--timeout", default="60s", show_default=True, help="With --wait: how long it may take."
)
@output_option
@pass_settings
def create(settings: Settings, plan_file: str, wait: bool, timeout: str, output: str) -> None:
    """Create a workload from a YAML or JSON plan (a no-op when it is unchanged)."""
    ready_timeout = parse_timeout(timeout)

    async def impl() -> None:
        plan = WorkloadPlan.from_file(plan_file)
        async with settings.open_deployer() as deployer:
            result = await deployer.create(plan)
            if wait:
                result = attrs.evolve(
                    result, status=await deployer.wait_ready(plan.name, timeout=ready_timeout)
                )
        if output == "json":
            emit_json({"action": result.action, "workload": status_dict(result.status)})
        else:
            click.echo(f"{result.action}: {plan.name} on {result.status.driver}")

    run(impl)


@click.command()
@click.argument("name")
@grace_option
@output_option
@pass_settings
def delete(settings: Settings, name: str, grace_period_seconds: int | None, output: str) -> None:
    """Drain a workload gracefully, then remove it, showing every step."""

    async def impl() -> None:
        async with settings.open_deployer() as deployer:
            await stream_drain(
                deployer.terminate(name, grace_period_seconds=grace_period_seconds), output
            )

    run(impl)


@click.command("delete-all")
@click.option("--selector", "-l", default=None, help="Only workloads with these labels: k=v,...")
@grace_option
@output_option
@pass_settings
def delete_all(
    settings: Settings, selector: str | None, grace_period_seconds: int | None, output: str
) -> None:
    """Drain every matching workload at once, under one deadline."""
    labels = parse_selector(selector)

    async def impl() -> None:
        async with settings.open_deployer() as deployer:
            if not await deployer.list(labels):
                click.echo("No resources found", err=True)  # as kubectl: exit 0
                return
            await stream_drain(
                deployer.terminate_all(labels, grace_period_seconds=grace_period_seconds), output
            )

    run(impl)


async def stream_drain(drain: Any, output: str) -> None:
    """Print a drain's events as they come, then the result.

    JSON: one object per event on stdout. Text: on a terminal of 80 columns or more, a live
    per-container view on stderr (state, seconds left); otherwise (no terminal, narrower,
    TERM=dumb) one line per event on stderr. Then a table on stdout.
    """
    summaries: list[DrainSummary] = []
    renderer: EventRenderer | LiveView | None = None
    if output == "text":
        renderer = for_stream(sys.stderr)

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
        if renderer is not None:
            renderer.close()
    for summary in summaries if renderer is not None else ():
        click.echo(EventRenderer.summary_table(summary))


@click.command()
@click.argument("name")
@output_option
@pass_settings
def inspect(settings: Settings, name: str, output: str) -> None:
    """Engine detail of a workload (secret-looking env values masked)."""

    async def impl() -> None:
        async with settings.open_deployer() as deployer:
            details = await deployer.inspect(name)
        click.echo(json.dumps(details, indent=None if output == "json" else 2, default=str))

    run(impl)
