"""``reconcile``: finish what a deployer that died left half-made or half-drained."""

from __future__ import annotations

import click

from asyncdeploy._reconcile import finishing, left_locks, plan_of_finish, unfinished_workloads
from asyncdeploy._selectors import Selector
from asyncdeploy.cli._common import (
    Settings,
    emit_json,
    grace_option,
    output_option,
    pass_settings,
    run,
    selector_option,
)
from asyncdeploy.cli._signals import Interrupts
from asyncdeploy.cli.workloads import stream_drain
from asyncdeploy.replace._lock import retire_locks

__all__ = ["reconcile"]


@click.command()
@click.option("--dry-run", is_flag=True, help="Say what would be done; touch nothing.")
@click.option(
    "--force",
    is_flag=True,
    help="Also finish workloads whose maker cannot be told dead from here (another host).",
)
@selector_option
@grace_option
@output_option
@pass_settings
def reconcile(
    settings: Settings,
    dry_run: bool,
    force: bool,
    selector: Selector | None,
    grace_period_seconds: int | None,
    output: str,
) -> None:
    """Finish the workloads a killed asyncdeploy left half-made or half-drained (``list`` marks
    them): drain what still runs (hooks, stop signals, the deadline), remove the rest, the pause
    container last, showing every step. Signals as for delete."""
    interrupts = Interrupts("drain", "reconcile")

    async def impl() -> None:
        async with settings.open_deployer() as deployer:
            found = await unfinished_workloads(deployer, selector, force=force)
            # a replace lock left with no plan behind it (a lock carries no selector's labels
            # on every driver: swept only by a reconcile of everything)
            locks = await left_locks(deployer.driver) if selector is None else []
            if not found and not locks:
                click.echo("nothing to reconcile", err=True)
                return
            for plan in locks:
                step = f"remove the replace lock left of {plan} (no instance of it is left)"
                if output == "json":
                    emit_json({"plan": plan, "steps": [step], "dry_run": dry_run})
                else:
                    click.echo(f"{'would' if dry_run else 'will'} {step}", err=True)
            for status in found:
                steps = plan_of_finish(status)
                if output == "json":
                    emit_json(
                        {
                            "workload": status.name,
                            "unfinished": status.unfinished,
                            "steps": steps,
                            "dry_run": dry_run,
                        }
                    )
                else:
                    verb = "would finish" if dry_run else "finishing"
                    click.echo(f"{verb} {status.name}: {status.unfinished}", err=True)
                    for step in steps:
                        click.echo(f"  {step}", err=True)
            if dry_run:
                return
            if locks:
                retired = await retire_locks(deployer.driver, locks)
                for plan in retired:
                    if output != "json":
                        click.echo(f"removed the replace lock left of {plan}", err=True)
            if not found:
                return
            drain = finishing(
                deployer, [s.name for s in found], grace_period_seconds=grace_period_seconds
            )
            interrupts.attach(drain)
            await stream_drain(drain, output)
            interrupts.settled()

    run(interrupts.guard, impl)
