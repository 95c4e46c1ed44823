"""Commands on workloads: create, delete, delete-all, list, get, logs, inspect."""

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
    pass_settings,
    run,
    status_dict,
)
from asyncdeploy.deployer import open_deployer
from asyncdeploy.errors import AsyncDeployError, CreateError
from asyncdeploy.events import DrainEvent, DrainFinished, DrainSummary, event_to_dict
from asyncdeploy.plan import WorkloadPlan
from asyncdeploy.render import EventRenderer, LiveView


@click.command()
@click.option("-f", "--file", "plan_file", required=True, type=click.Path(dir_okay=False))
@click.option(
    "--wait",
    "wait_seconds",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Then wait up to this many seconds until it is ready; why it will not start "
    "(an image that cannot be pulled, no node for it, ...) fails the command at once, "
    "and the workload is removed.",
)
@output_option
@pass_settings
def create(settings: Settings, plan_file: str, wait_seconds: float | None, output: str) -> None:
    """Create a workload from a YAML or JSON plan (a no-op when it is unchanged)."""

    async def impl() -> None:
        plan = WorkloadPlan.from_file(plan_file)
        async with open_deployer(settings.driver) as deployer:
            result = await deployer.create(plan)
            if wait_seconds is not None:
                try:
                    ready = await deployer.wait_ready(plan.name, timeout=wait_seconds)
                except CreateError:
                    # it will not start as planned: nothing is left behind (bounded, shielded)
                    with anyio.CancelScope(shield=True), anyio.move_on_after(30):
                        try:
                            await deployer.delete(plan.name, grace_period_seconds=0)
                        except AsyncDeployError as exc:  # the CreateError is the news
                            click.echo(f"removing {plan.name} failed: {exc}", err=True)
                        else:
                            click.echo(f"removed {plan.name}: it will not start", err=True)
                    raise
                result = attrs.evolve(result, status=ready)
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
        async with open_deployer(settings.driver) as deployer:
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
        async with open_deployer(settings.driver) as deployer:
            await stream_drain(
                deployer.terminate_all(labels, grace_period_seconds=grace_period_seconds), output
            )

    run(impl)


async def stream_drain(drain: Any, output: str) -> None:
    """Print a drain's events as they come, then the result.

    JSON: one object per event on stdout. Text: on a terminal, a live per-container view on
    stderr (state, seconds left); otherwise one line per event on stderr. Then a table on stdout.
    """
    summaries: list[DrainSummary] = []
    renderer: EventRenderer | LiveView | None = None
    if output == "text":
        renderer = LiveView(sys.stderr) if sys.stderr.isatty() else EventRenderer(sys.stderr)

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


@click.command("list")
@click.option("--selector", "-l", default=None, help="Only workloads with these labels: k=v,...")
@output_option
@pass_settings
def list_(settings: Settings, selector: str | None, output: str) -> None:
    """List workloads."""
    labels = parse_selector(selector)

    async def impl() -> None:
        async with open_deployer(settings.driver) as deployer:
            found = await deployer.list(labels)
        if output == "json":
            emit_json([status_dict(s) for s in found])
            return
        click.echo(f"{'NAME':<24} {'STATE':<10} {'GRACE':>5} CONTAINERS")
        for status in found:
            names = ", ".join(f"{c.name}:{c.state}" for c in status.containers)
            click.echo(
                f"{status.name:<24} {status.state:<10} {status.grace_period_seconds:>5} {names}"
            )

    run(impl)


@click.command()
@click.argument("name")
@output_option
@pass_settings
def get(settings: Settings, name: str, output: str) -> None:
    """Show one workload and its containers."""

    async def impl() -> None:
        async with open_deployer(settings.driver) as deployer:
            status = await deployer.get(name)
        if output == "json":
            emit_json(status_dict(status))
            return
        click.echo(
            f"{status.name} ({status.driver}): {status.state}, "
            f"grace {status.grace_period_seconds} s"
        )
        for c in status.containers:
            extra = f" exit={c.exit_code}" if c.exit_code is not None else ""
            health = f" health={c.health}" if c.health else ""
            click.echo(f"  {c.role:<8} {c.name:<20} {c.state:<10} {c.image}{extra}{health}")

    run(impl)


@click.command()
@click.argument("name")
@click.option("-f", "--follow", is_flag=True, help="Keep streaming new output.")
@click.option("--container", "-c", default=None, help="Container name (default: the first run).")
@output_option
@pass_settings
def logs(settings: Settings, name: str, follow: bool, container: str | None, output: str) -> None:
    """Print a container's logs."""

    async def impl() -> None:
        async with open_deployer(settings.driver) as deployer:
            async for chunk in deployer.logs(name, container=container, follow=follow):
                if output == "json":
                    emit_json({"workload": name, "container": container, "text": chunk})
                else:
                    click.echo(chunk, nl=False)

    run(impl)


@click.command()
@click.argument("name")
@output_option
@pass_settings
def inspect(settings: Settings, name: str, output: str) -> None:
    """Engine detail of a workload (secret-looking env values masked)."""

    async def impl() -> None:
        async with open_deployer(settings.driver) as deployer:
            details = await deployer.inspect(name)
        click.echo(json.dumps(details, indent=None if output == "json" else 2, default=str))

    run(impl)
