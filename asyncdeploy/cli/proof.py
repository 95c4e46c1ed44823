"""Commands for the termination contract: lint a plan's budget, drain a server, verify."""

from __future__ import annotations

import json
import secrets
import sys

import anyio
import attrs
import click

from asyncdeploy.cli._common import (
    DURATION,
    EXIT_FAILED,
    EXIT_USAGE,
    GRACE_SECONDS,
    CommandFailed,
    FiniteRange,
    Settings,
    emit_json,
    output_option,
    pass_settings,
    run,
)
from asyncdeploy.errors import CreateError, PlanError
from asyncdeploy.lint import lint_plan
from asyncdeploy.plan import WorkloadPlan
from asyncdeploy.render import EventRenderer

RATE = FiniteRange(0, 1000)  # requests per second: finite, and one machine's worth


@click.command("lint")
@click.argument("plan_file", type=click.Path(dir_okay=False))
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
    plan_file: str,
    expected_drain: float | None,
    request_timeout: float | None,
    margin: float,
    strict: bool,
    inspect_images: bool,
    output: str,
) -> None:
    """Check a plan's termination budget, probes and ports (exit 1 on errors).

    A published port the server is known not to listen on (the demo image's 8080, an image's
    EXPOSEd ports with --inspect-images) and a fixed host port (no replace in place) are warned.
    """
    try:
        plan = WorkloadPlan.from_file(plan_file)
    except PlanError as exc:
        raise CommandFailed(str(exc), EXIT_USAGE, exc) from exc
    image_ports = run(_image_ports, plan) if inspect_images else None
    findings = lint_plan(
        plan,
        expected_drain_seconds=expected_drain,
        request_timeout_seconds=request_timeout,
        margin_seconds=margin,
        image_ports=image_ports,
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


async def _image_ports(plan: WorkloadPlan) -> dict[str, frozenset[int] | None]:
    """What the engine knows of the plan's images: the ports each EXPOSEs (None: not local)."""
    settings = click.get_current_context().find_object(Settings) or Settings(driver=None)
    async with settings.open_deployer() as deployer:
        images = dict.fromkeys(c.image for c in plan.containers)
        return {image: await deployer.image_ports(image) for image in images}


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
    type=DURATION,
    default="10s",
    show_default=True,
    help="How long traffic removal takes to reach every client, e.g. 10s.",
)
@click.option(
    "--timeout", type=DURATION, default=None, help="A bound for the whole command, e.g. 90s."
)
def drain(socket_path: str, propagation_wait: float, timeout: float | None) -> None:
    """Tell a server to drain, then wait until it has no request in flight (a preStop hook).

    Exit 0 drained, 1 not drained in time.
    """
    from asyncdeploy.workload import run_drain_command

    report = run(run_drain_command, socket_path, propagation_wait, timeout)
    emit_json(report.to_dict())
    if not report.drained:
        raise click.exceptions.Exit(EXIT_FAILED)


@click.command("verify")
@click.option(
    "-f",
    "--file",
    "plan_file",
    default=None,
    help="A plan to verify [default: the demo server, named asyncdeploy-verify-<random>]; "
    "verify refuses a name that is already taken.",
)
@click.option(
    "--port",
    type=click.IntRange(1, 65535),
    default=8080,
    show_default=True,
    help="Container port the traffic goes to.",
)
@click.option(
    "--mode",
    type=click.Choice(["delete", "replace", "delete-all"]),
    default="delete",
    show_default=True,
    help="The disruption performed while traffic flows.",
)
@click.option("--image", default=None, help="Demo server image.")
@click.option("--pause-image", default=None, help="Pause image for the demo plan.")
@click.option(
    "--registry",
    default=None,
    help="Pull the demo and pause images from this registry (host:port) when the engine lacks "
    "them, e.g. 127.0.0.1:5000: registry.k8s.io/pause:3.10 becomes 127.0.0.1:5000/pause:3.10.",
)
@click.option("--grace-period-seconds", type=GRACE_SECONDS, default=None)
@click.option(
    "--warmup",
    type=DURATION,
    default="3s",
    show_default=True,
    help="Traffic before the disruption.",
)
@click.option(
    "--short-rate", type=RATE, default=5.0, show_default=True, help="Short requests per second."
)
@click.option(
    "--long-rate", type=RATE, default=1.0, show_default=True, help="Long requests per second."
)
@click.option(
    "--stream-rate", type=RATE, default=2.0, show_default=True, help="Streams per second."
)
@click.option("--long-seconds", type=FiniteRange(0, 3600), default=3.0, show_default=True)
@click.option("--stream-tokens", type=click.IntRange(1, 100_000), default=30, show_default=True)
@click.option(
    "--stream-pace",
    type=FiniteRange(0, 60),
    default=0.1,
    show_default=True,
    help="Seconds between tokens.",
)
@click.option(
    "--client-abort-every",
    type=click.IntRange(min=0),
    default=0,
    help="Fault: abandon every Nth stream mid-way.",
)
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
    registry: str | None,
    grace_period_seconds: int | None,
    warmup: float,
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

    Exits 1 when any request was refused at connect, truncated, lost, failed or duplicated.
    """
    from asyncdeploy.plan import DEFAULT_PAUSE_IMAGE

    try:
        from asyncdeploy.verify import (
            DEMO_IMAGE,
            TrafficMix,
            VerifyOptions,
            demo_plan,
            from_registry,
            run_verify,
        )
    except ModuleNotFoundError as exc:  # a core-only install: its traffic client is aiohttp
        raise CommandFailed(
            f"verify needs {exc.name}, which is not installed: pip install "
            "'asyncdeploy[docker]' (or [kubernetes]: either extra brings it)",
            EXIT_USAGE,
        ) from exc

    if registry is not None:
        image = from_registry(image or DEMO_IMAGE, registry)
        pause_image = from_registry(pause_image or DEFAULT_PAUSE_IMAGE, registry)

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
        warmup_seconds=warmup,
        grace_period_seconds=grace_period_seconds,
        mix=mix,
    )

    async def impl() -> bool:
        if plan_file is not None:
            plan = WorkloadPlan.from_file(plan_file)
        else:
            plan = demo_plan(
                # a name of its own: a workload someone else named "demo" is never touched
                f"asyncdeploy-verify-{secrets.token_hex(3)}",
                image=image or DEMO_IMAGE,
                pause_image=pause_image,
                ignore_sigterm=ignore_sigterm,
            )
            if ignore_sigterm:
                plan = attrs.evolve(plan, termination_grace_period_seconds=5)
        renderer = EventRenderer(sys.stderr)
        async with settings.open_deployer() as deployer:
            try:
                report = await run_verify(
                    deployer,
                    plan,
                    options,
                    on_event=renderer.show if output == "text" else None,
                    on_status=lambda line: click.echo(f"-- {line}", err=True),
                )
            except CreateError as exc:
                if registry is not None or plan_file is not None:
                    raise
                raise CreateError(
                    f"{exc}; `asyncdeploy verify --registry HOST:PORT` pulls the demo and pause "
                    "images from a registry of yours"
                ) from exc
        if report_file is not None:
            await anyio.Path(report_file).write_text(json.dumps(report.to_dict(), default=str))
        if output == "json":
            emit_json(report.to_dict())
        else:
            click.echo(report.text())
        return report.passed

    if not run(impl):
        raise click.exceptions.Exit(EXIT_FAILED)


@click.command("schema")
@click.option(
    "--format",
    "format_",
    type=click.Choice(["json", "markdown"]),
    default="json",
    show_default=True,
    help="The JSON Schema of a plan, or the plan reference page.",
)
def schema(format_: str) -> None:
    """Print the plan's JSON Schema (for editors) or its reference page."""
    from asyncdeploy.schema import plan_reference_markdown, plan_schema_json

    click.echo(plan_schema_json() if format_ == "json" else plan_reference_markdown(), nl=False)
