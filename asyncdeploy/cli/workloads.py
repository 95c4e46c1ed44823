"""Commands on workloads: create, delete, delete-all, inspect (list, get: views.py)."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from typing import Protocol, cast

import anyio
import attrs
import click

from asyncdeploy import Deployer
from asyncdeploy._errors import AsyncDeployError, CreateError, EngineTimeout
from asyncdeploy._events import (
    DrainEvent,
    DrainFinished,
    DrainStarted,
    DrainSummary,
    PullFailed,
    PullFinished,
    PullProgress,
    PullStarted,
    event_to_dict,
)
from asyncdeploy._results import ApplyResult, WorkloadStatus
from asyncdeploy._selectors import Selector
from asyncdeploy.cli._common import (
    DURATION,
    EXIT_TEARING_DOWN,
    OUTPUT_FILE,
    PLAN_FILES_HELP,
    WORKLOAD_NAME,
    NamesArgument,
    Settings,
    drain_timeout_option,
    echo_out,
    emit_json,
    grace_option,
    output_option,
    pass_settings,
    read_plan_files,
    run,
    selector_option,
    status_dict,
    strategy_option,
    write_output_file,
)
from asyncdeploy.cli._kube_options import all_namespaces_option
from asyncdeploy.cli._signals import Interrupts
from asyncdeploy.cli._terminal import fold, terminal_width
from asyncdeploy.cli.fleet import ENGINE_HELP as FLEET_HELP
from asyncdeploy.cli.fleet import delete_on_engines
from asyncdeploy.cli.render import EventRenderer, LiveView, PullView, for_stream
from asyncdeploy.plan import WorkloadPlan
from asyncdeploy.replace.events import (
    REPLACE_EVENTS,
    Strategy,
    describe_replace,
    downtime_words,
    replace_event_to_dict,
)

_PULL_EVENTS = (PullStarted, PullProgress, PullFinished, PullFailed)


@click.command()
@click.option("-f", "--file", "plan_files", required=True, multiple=True, help=PLAN_FILES_HELP)
@click.option(
    "--wait",
    is_flag=True,
    help="Return once every run container is ready; why it will not start (an image "
    "that cannot be pulled, no node for it, ...) fails the command at once; a workload this "
    "create made is then drained and removed, one it found unchanged is left as it was.",
)
@click.option(
    "--timeout",
    type=DURATION,
    default="60s",
    show_default=True,
    help="With --wait: how long it may take.",
)
@click.option(
    "--settle",
    type=DURATION,
    default=None,
    help="With --wait, for a container without a readiness check: how long past its start "
    "it must keep running (no exit, no restart) to count as ready [default: 2s; 0: running "
    "is enough].",
)
@click.option(
    "--keep-failed",
    is_flag=True,
    help="With --wait: keep a workload that will not start, to look at it (logs, get, "
    "inspect); delete it afterwards.",
)
@strategy_option
@output_option
@pass_settings
def create(
    settings: Settings,
    plan_files: tuple[str, ...],
    wait: bool,
    timeout: float,
    settle: float | None,
    keep_failed: bool,
    strategy: str,
    output: str,
) -> None:
    """Create a workload from a YAML or JSON plan, as kubectl apply does.

    A no-op when it is unchanged; a changed plan replaces the workload as `replace` would
    (surge where it fits, else recreate), said before anything is touched, the new instance
    ready within --timeout.

    -f may be repeated, name a folder, or be - for stdin; a file may hold several plans
    (---): each is created in turn. Every problem of every plan is reported before anything
    is created (exit 2).

    Images are pulled first, as the plan's pull policies say: progress bars on a terminal,
    a line per pull otherwise, one JSON object per event with --output json.
    """
    options = _CreateOptions(cast(Strategy, strategy), timeout, output)
    for plan in read_plan_files(plan_files):
        _create_one(settings, plan, wait, settle, keep_failed, options)


def _create_one(
    settings: Settings,
    plan: WorkloadPlan,
    wait: bool,
    settle: float | None,
    keep_failed: bool,
    options: _CreateOptions,
) -> None:
    interrupts = Interrupts("cancel", f"create of {plan.name!r}")
    timeout, output = options.ready_timeout, options.output

    async def impl() -> None:
        async with settings.for_plan(plan).open_deployer() as deployer:
            if await deployer.changes(plan):
                interrupts.replaces()  # a signal before the old one's drain stops it
            result = await _create_showing_events(deployer, plan, options, interrupts)
            if result is None:
                return  # a signal stopped it: the guard says how
            interrupts.made()
            if wait and result.action != "replaced":  # a replacement is ready already
                waited = await _wait(deployer, plan, result, timeout, settle, keep_failed)
                result = attrs.evolve(result, status=waited)
            interrupts.settled()  # created: a signal from now on must not claim otherwise
        if output == "json":
            emit_json(
                {
                    "action": result.action,
                    "workload": status_dict(result.status),
                    **({"strategy": result.strategy} if result.strategy else {}),
                    **({"downtime": result.downtime} if result.strategy == "recreate" else {}),
                }
            )
        else:
            ready = ", ready" if wait else ""  # --wait returned: it is (or raised why not)
            echo_out(f"{result.action}: {plan.name} on {result.status.driver}{_how(result)}{ready}")

    run(interrupts.guard, impl)


def _how(result: ApplyResult) -> str:
    """How a changed plan replaced the workload, for the create's last line."""
    if result.strategy == "recreate":
        return f" (recreate: {downtime_words(result.downtime)})"
    if result.strategy == "surge":
        return f" (surge: {result.status.name} ready before the old one was drained)"
    return ""


@attrs.frozen
class _CreateOptions:
    strategy: Strategy
    ready_timeout: float
    output: str


async def _create_showing_events(
    deployer: Deployer, plan: WorkloadPlan, options: _CreateOptions, interrupts: Interrupts
) -> ApplyResult | None:
    """Create, printing its events as they come; None when a signal stopped it.

    A signal stops the create alone (its handle's ``stop()``): the loop that prints goes on
    until the create has ended, so the drain of a workload it replaces (which a cancellation
    never cuts short) is shown to its ``DrainFinished``.
    """
    output = options.output
    bars = PullView(sys.stderr) if output == "text" and sys.stderr.isatty() else None
    lines = EventRenderer(sys.stderr)
    if bars is not None:
        interrupts.notice = bars.note  # a signal's notice above the bars, not through them
    creation = deployer.creating(
        plan,
        strategy=options.strategy,
        ready_timeout=options.ready_timeout,
        before_drain=interrupts.now_draining,
    )
    interrupts.attach(creation)
    async with creation:
        async for event in creation:
            if isinstance(event, REPLACE_EVENTS):
                if output == "json":
                    emit_json(replace_event_to_dict(event))
                else:
                    click.echo(f"create: {describe_replace(event)}", err=True)
                continue
            if isinstance(event, DrainStarted):
                interrupts.drain_began()
            if output == "json":
                emit_json(event_to_dict(event))
            elif bars is not None and isinstance(event, _PULL_EVENTS):
                bars.show(event)
            else:
                if bars is not None:
                    bars.freeze()
                lines.show(event)
            if isinstance(event, DrainFinished):
                interrupts.drain_ended()
    return None if creation.stopped else creation.result


async def _wait(
    deployer: Deployer,
    plan: WorkloadPlan,
    result: ApplyResult,
    timeout: float,
    settle: float | None,
    keep: bool,
) -> WorkloadStatus:
    """Wait until ``plan``'s workload is ready. One that will not start is removed only when this
    create made it (and ``keep`` is not asked), and then drained like any delete (its own
    grace): a wait never deletes what it did not create, and never kills without a drain. Its
    exit code and last log lines are in the ``CreateError``, read before the removal."""
    try:
        return await deployer.wait_ready(plan.name, timeout=timeout, settle_seconds=settle)
    except EngineTimeout:
        # it may be slow, not broken (a model still loading): left running, and said so
        made = "was left as it was" if result.action == "unchanged" else "is left running"
        click.echo(
            f"{plan.name} {made}, not ready after {timeout:g} s: `asyncdeploy get "
            f"{plan.name}` says why, `asyncdeploy delete {plan.name}` removes it",
            err=True,
        )
        raise
    except CreateError:
        if result.action == "unchanged":
            click.echo(f"{plan.name} was left as it was: this create did not make it", err=True)
            raise
        if keep:
            click.echo(f"kept {plan.name}: asyncdeploy delete {plan.name}", err=True)
            raise
        bound = plan.termination_grace_period_seconds + 60
        with anyio.CancelScope(shield=True), anyio.move_on_after(bound):
            try:
                await deployer.delete(plan.name)
            except AsyncDeployError as exc:  # the CreateError is the news
                click.echo(f"removing {plan.name} failed: {exc}", err=True)
            else:
                click.echo(f"drained and removed {plan.name}: it will not start", err=True)
        raise


@click.command()
@click.argument("names", nargs=-1, metavar="NAME", type=WORKLOAD_NAME, cls=NamesArgument)
@selector_option
@click.option(
    "--ignore-not-found",
    is_flag=True,
    help="A name that no workload has is no error (exit 0), as kubectl's flag.",
)
@grace_option
@drain_timeout_option
@click.option(
    "--timeline",
    "timeline_file",
    type=OUTPUT_FILE,
    default=None,
    help="Also write the drain as one self-contained HTML page (its steps on a time axis).",
)
@click.option("--engine", "engines", multiple=True, metavar="ENGINE", help=FLEET_HELP)
@output_option
@pass_settings
def delete(
    settings: Settings,
    names: tuple[str, ...],
    selector: Selector | None,
    ignore_not_found: bool,
    grace_period_seconds: int | None,
    timeline_file: str | None,
    output: str,
    engines: tuple[str, ...],
) -> None:
    """Drain workloads gracefully, then remove them, showing every step.

    delete NAME [NAME...], or delete -l SELECTOR: several are drained at once, under one
    deadline. A name no workload has fails the delete before anything is drained, unless
    --ignore-not-found.
    """
    if bool(names) == (selector is not None):
        raise click.UsageError("delete needs workload names or --selector/-l (not both)")
    if engines:  # several engines under one deadline: cli/fleet.py
        if selector is None or timeline_file or settings != Settings(driver=None):
            raise click.UsageError(
                "--engine: with -l only, and instead of --driver and its options"
            )
        return delete_on_engines(engines, selector, grace_period_seconds, output)
    what = f"delete of {', '.join(map(repr, names))}" if names else "delete"
    interrupts = Interrupts("drain", what)
    written = [True]

    async def impl() -> list[DrainSummary]:
        async with settings.open_deployer() as deployer:
            grace = grace_period_seconds
            if selector is not None:
                drain = deployer.terminate_all(selector, grace_period_seconds=grace)
            elif len(names) == 1 and not ignore_not_found:
                drain = deployer.terminate(names[0], grace_period_seconds=grace)
            else:
                drain = deployer.terminate_many(
                    names, grace_period_seconds=grace, ignore_not_found=ignore_not_found
                )
            interrupts.attach(drain)
            seen: list[DrainEvent] = []
            try:
                summaries = await stream_drain(
                    drain, output, interrupts, seen=seen if timeline_file else None
                )
                if selector is not None and not summaries:
                    click.echo("No resources found", err=True)  # as kubectl: exit 0
            finally:
                if timeline_file is not None and seen:
                    from asyncdeploy.timeline import timeline_html

                    written[0] = await anyio.to_thread.run_sync(
                        write_output_file, timeline_file, timeline_html(seen), "timeline"
                    )
            interrupts.settled()  # drained: a late signal must not claim a kill
            return summaries

    summaries = run(interrupts.guard, impl)
    if not written[0]:
        raise click.exceptions.Exit(1)  # drained and shown; only the page is missing
    _exit_if_tearing_down(summaries)


@click.command("delete-all")
@selector_option
@click.option("--all", "everything", is_flag=True, help="Every workload (instead of --selector).")
@grace_option
@drain_timeout_option
@output_option
@all_namespaces_option
@pass_settings
def delete_all(
    settings: Settings,
    selector: Selector | None,
    everything: bool,
    grace_period_seconds: int | None,
    output: str,
) -> None:
    """Drain every matching workload at once, under one deadline.

    Needs --selector, or --all to drain every workload asyncdeploy manages. On Kubernetes
    it works in one namespace; with -A in every one (the events and tables then name each
    workload namespace/name).
    """
    if (selector is None) == (not everything):
        raise click.UsageError("delete-all needs exactly one of --selector and --all")
    interrupts = Interrupts("drain", "delete-all")

    async def impl() -> list[DrainSummary]:
        async with settings.open_deployer() as deployer:
            drain = deployer.terminate_all(
                selector, grace_period_seconds=grace_period_seconds, all=everything
            )
            interrupts.attach(drain)
            summaries = await stream_drain(drain, output, interrupts)
            if not summaries:
                click.echo("No resources found", err=True)  # as kubectl: exit 0
            interrupts.settled()  # drained: a late signal must not claim a kill
            return summaries

    _exit_if_tearing_down(run(interrupts.guard, impl))


def _exit_if_tearing_down(summaries: list[DrainSummary]) -> None:
    """Exit 4 when a drain succeeded but left a Pod still being torn down at the timeout."""
    left = [s.workload for s in summaries if s.tearing_down]
    if left:
        click.echo(
            f"{', '.join(left)}: every container ended, but the Pod was still being torn down "
            "when the wait ended (it keeps its name until it goes; --timeout waits longer)",
            err=True,
        )
        raise click.exceptions.Exit(EXIT_TEARING_DOWN)


class DrainHandle(Protocol):
    """What the CLI prints a drain from, once entered: a ``Drain``, or a ``Replacement`` (its
    old instances' drain). The handle keeps the summaries; the CLI only reads them."""

    def __aiter__(self) -> AsyncIterator[DrainEvent]: ...

    @property
    def summaries(self) -> tuple[DrainSummary, ...]: ...


async def stream_drain(
    drain: AbstractAsyncContextManager[DrainHandle],
    output: str,
    interrupts: Interrupts | None = None,
    *,
    seen: list[DrainEvent] | None = None,
) -> list[DrainSummary]:
    """Print a drain's events as they come, then the result; return the summaries.

    JSON: one object per event on stdout. Text: on a terminal of 80 columns or more, a live
    per-container view on stderr (state, seconds left); otherwise (no terminal, narrower,
    TERM=dumb) one line per event on stderr. Then a table per workload on stdout, also when the
    drain failed (its ``DrainError`` is raised after the tables): that is when it matters most.
    ``seen`` keeps every event (for ``--timeline``).
    """
    entered: list[DrainHandle] = []  # the handle, once the drain is entered
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
        async with drain as handle, anyio.create_task_group() as tg:
            entered.append(handle)
            if isinstance(renderer, LiveView):
                tg.start_soon(tick, renderer)
            async for event in handle:
                if seen is not None:
                    seen.append(event)
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
            width = terminal_width(sys.stdout)  # on a terminal, a long head line folded
            for summary in (s for handle in entered for s in handle.summaries):
                table = EventRenderer.summary_table(summary).split("\n")
                echo_out("\n".join(fold(line, width) for line in table))
    return [s for handle in entered for s in handle.summaries]


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
