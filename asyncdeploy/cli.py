"""The ``asyncdeploy`` command line: thin click commands over the async API.

Exit codes: 0 success, 1 the operation failed, 2 usage (bad arguments or an invalid plan),
3 no engine answers.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, ParamSpec, TypeVar

import anyio
import attrs
import click

from asyncdeploy.deployer import open_deployer
from asyncdeploy.drivers import DRIVERS
from asyncdeploy.drivers.base import WorkloadStatus
from asyncdeploy.errors import (
    AsyncDeployError,
    DriverNotFound,
    EngineUnavailable,
    PlanError,
)
from asyncdeploy.events import DrainEvent, DrainFinished, DrainSummary, event_to_dict
from asyncdeploy.lint import lint_plan
from asyncdeploy.plan import WorkloadPlan
from asyncdeploy.render import EventRenderer, LiveView
from asyncdeploy.workload.durations import parse_duration

__all__ = ["main"]

P = ParamSpec("P")
T = TypeVar("T")

EXIT_FAILED, EXIT_USAGE, EXIT_UNAVAILABLE = 1, 2, 3


class CommandFailed(click.ClickException):
    """An asyncdeploy error, printed as ``Error: ...`` with the exit code it maps to."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code  # type: ignore[misc]


@attrs.frozen
class Settings:
    driver: str | None


pass_settings = click.make_pass_decorator(Settings)


def run(function: Callable[P, Awaitable[T]], *args: P.args, **kwargs: P.kwargs) -> T:
    """Run one command's coroutine, mapping asyncdeploy's errors onto exit codes."""
    try:
        return anyio.run(functools.partial(function, *args, **kwargs))
    except EngineUnavailable as exc:
        raise CommandFailed(str(exc), EXIT_UNAVAILABLE) from exc
    except (PlanError, DriverNotFound) as exc:
        raise CommandFailed(str(exc), EXIT_USAGE) from exc
    except AsyncDeployError as exc:
        raise CommandFailed(str(exc), EXIT_FAILED) from exc


def output_option(function: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--output",
        "-o",
        type=click.Choice(["text", "json"]),
        default="text",
        show_default=True,
        help="Human-readable text, or JSON (one object per event for delete and delete-all).",
    )(function)


def grace_option(function: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--grace-period-seconds",
        type=click.IntRange(min=0),
        default=None,
        help="Override the workload's termination grace period for this delete (0 kills at once).",
    )(function)


def parse_selector(value: str | None) -> dict[str, str]:
    selector: dict[str, str] = {}
    for part in filter(None, (value or "").split(",")):
        key, sep, item = part.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"{part!r} is not key=value", param_hint="--selector")
        selector[key.strip()] = item.strip()
    return selector


def emit_json(data: Any) -> None:
    click.echo(json.dumps(data, sort_keys=False, default=str))


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--driver",
    type=click.Choice(sorted(DRIVERS)),
    envvar="ASYNCDEPLOY_DRIVER",
    default=None,
    help="Engine to use [env ASYNCDEPLOY_DRIVER; default: the first of docker, podman, "
    "kubernetes that answers].",
)
@click.version_option(package_name="asyncdeploy")
@click.pass_context
def main(ctx: click.Context, driver: str | None) -> None:
    """Deploy inference workloads and take them down without losing a request."""
    ctx.obj = Settings(driver=driver)


@click.command()
@click.option("-f", "--file", "plan_file", required=True, type=click.Path(dir_okay=False))
@output_option
@pass_settings
def create(settings: Settings, plan_file: str, output: str) -> None:
    """Create a workload from a YAML or JSON plan (a no-op when it is unchanged)."""

    async def impl() -> None:
        plan = WorkloadPlan.from_file(plan_file)
        async with open_deployer(settings.driver) as deployer:
            result = await deployer.create(plan)
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


@click.command("lint")
@click.argument("plan_file", type=click.Path(dir_okay=False))
@click.option("--expected-drain", default=None, help="How long draining takes, e.g. 30s.")
@click.option("--request-timeout", default=None, help="The longest request, e.g. 60s.")
@click.option(
    "--margin", default="15s", show_default=True, help="Reserve for sidecars and cleanup."
)
@click.option("--strict", is_flag=True, help="Fail on warnings too.")
@output_option
def lint(
    plan_file: str,
    expected_drain: str | None,
    request_timeout: str | None,
    margin: str,
    strict: bool,
    output: str,
) -> None:
    """Check a plan's termination budget and probes (exit 1 on errors)."""
    try:
        plan = WorkloadPlan.from_file(plan_file)
        seconds = {
            name: None if value is None else parse_duration(value)
            for name, value in (("drain", expected_drain), ("timeout", request_timeout))
        }
        margin_seconds = parse_duration(margin)
    except PlanError as exc:
        raise CommandFailed(str(exc), EXIT_USAGE) from exc
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from exc
    findings = lint_plan(
        plan,
        expected_drain_seconds=seconds["drain"],
        request_timeout_seconds=seconds["timeout"],
        margin_seconds=margin_seconds,
    )
    if output == "json":
        emit_json([attrs.asdict(f) for f in findings])
    else:
        for finding in findings:
            click.echo(str(finding))
        if not findings:
            click.echo(f"{plan.name}: the termination budget holds")
    if any(f.level == "error" or strict for f in findings):
        raise click.exceptions.Exit(EXIT_FAILED)


@click.command("drain")
@click.option(
    "--socket",
    "socket_path",
    default="/run/asyncdeploy/control.sock",
    show_default=True,
    help="The server's control socket.",
)
@click.option(
    "--propagation-wait",
    default="10s",
    show_default=True,
    help="How long traffic removal takes to reach every client, e.g. 10s.",
)
@click.option("--timeout", default=None, help="A bound for the whole command, e.g. 90s.")
def drain(socket_path: str, propagation_wait: str, timeout: str | None) -> None:
    """Tell a server to drain, then wait until it has no request in flight (a preStop hook).

    Exit 0 drained, 1 not drained in time.
    """
    from asyncdeploy.workload import run_drain_command

    try:
        wait, bound = parse_duration(propagation_wait), None
        if timeout is not None:
            bound = parse_duration(timeout)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from exc
    report = run(run_drain_command, socket_path, wait, bound)
    emit_json(report.to_dict())
    if not report.drained:
        raise click.exceptions.Exit(EXIT_FAILED)


@click.command("verify")
@click.option(
    "-f", "--file", "plan_file", default=None, help="A plan to verify (default: the demo)."
)
@click.option("--port", default=8080, show_default=True, help="Container port the traffic goes to.")
@click.option(
    "--mode",
    type=click.Choice(["delete", "replace", "delete-all"]),
    default="delete",
    show_default=True,
    help="The disruption performed while traffic flows.",
)
@click.option("--image", default=None, help="Demo server image.")
@click.option("--pause-image", default=None, help="Pause image for the demo plan.")
@click.option("--grace-period-seconds", type=click.IntRange(min=0), default=None)
@click.option("--warmup", default="3s", show_default=True, help="Traffic before the disruption.")
@click.option("--short-rate", default=5.0, show_default=True, help="Short requests per second.")
@click.option("--long-rate", default=1.0, show_default=True, help="Long requests per second.")
@click.option("--stream-rate", default=2.0, show_default=True, help="Streams per second.")
@click.option("--long-seconds", default=3.0, show_default=True)
@click.option("--stream-tokens", default=30, show_default=True)
@click.option("--stream-pace", default=0.1, show_default=True, help="Seconds between tokens.")
@click.option("--client-abort-every", default=0, help="Fault: abandon every Nth stream mid-way.")
@click.option("--ignore-sigterm", is_flag=True, help="Fault: the demo ignores SIGTERM, no drain.")
@click.option("--report", "report_file", default=None, help="Write the JSON report here.")
@output_option
@pass_settings
def verify(
    settings: Settings,
    plan_file: str | None,
    port: int,
    mode: str,
    image: str | None,
    pause_image: str | None,
    grace_period_seconds: int | None,
    warmup: str,
    short_rate: float,
    long_rate: float,
    stream_rate: float,
    long_seconds: float,
    stream_tokens: int,
    stream_pace: float,
    client_abort_every: int,
    ignore_sigterm: bool,
    report_file: str | None,
    output: str,
) -> None:
    """Prove a lossless termination: traffic through a workload while it is disrupted.

    Exits 1 when any request was truncated, lost, failed or duplicated.
    """
    from asyncdeploy.verify import DEMO_IMAGE, TrafficMix, VerifyOptions, demo_plan, run_verify

    mix = TrafficMix(
        short_per_second=short_rate,
        long_per_second=long_rate,
        stream_per_second=stream_rate,
        long_seconds=long_seconds,
        stream_tokens=stream_tokens,
        stream_pace=stream_pace,
        client_abort_every=client_abort_every,
    )
    options = VerifyOptions(
        mode=mode,  # type: ignore[arg-type]
        port=port,
        warmup_seconds=parse_duration(warmup),
        grace_period_seconds=grace_period_seconds,
        mix=mix,
    )

    async def impl() -> bool:
        if plan_file is not None:
            plan = WorkloadPlan.from_file(plan_file)
        else:
            plan = demo_plan(
                image=image or DEMO_IMAGE, pause_image=pause_image, ignore_sigterm=ignore_sigterm
            )
            if ignore_sigterm:
                plan = attrs.evolve(plan, termination_grace_period_seconds=5)
        renderer = EventRenderer(sys.stderr)
        async with open_deployer(settings.driver) as deployer:
            report = await run_verify(
                deployer,
                plan,
                options,
                on_event=renderer.show if output == "text" else None,
                on_status=lambda line: click.echo(f"-- {line}", err=True),
            )
        if report_file is not None:
            await anyio.Path(report_file).write_text(json.dumps(report.to_dict(), default=str))
        if output == "json":
            emit_json(report.to_dict())
        else:
            click.echo(report.text())
        return report.passed

    if not run(impl):
        raise click.exceptions.Exit(EXIT_FAILED)


def status_dict(status: WorkloadStatus) -> dict[str, Any]:
    data = attrs.asdict(status, recurse=True)
    data["labels"] = dict(status.labels)
    data["state"] = status.state
    return data


def _register(group: click.Group, commands: Mapping[str, click.Command]) -> None:
    for name, command in commands.items():
        group.add_command(command, name)


_register(
    main,
    {
        "create": create,
        "delete": delete,
        "delete-all": delete_all,
        "list": list_,
        "get": get,
        "logs": logs,
        "inspect": inspect,
        "lint": lint,
        "verify": verify,
        "drain": drain,
    },
)
