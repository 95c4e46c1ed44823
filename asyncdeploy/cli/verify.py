"""``asyncdeploy verify``: traffic through workloads while one is disrupted, every request counted."""

from __future__ import annotations

import json
import secrets
import shutil
import sys
from typing import TYPE_CHECKING, Any

import anyio
import attrs
import click

from asyncdeploy._errors import CreateError
from asyncdeploy.cli._common import (
    DURATION,
    EXIT_FAILED,
    EXIT_USAGE,
    GRACE_SECONDS,
    OUTPUT_FILE,
    CommandFailed,
    FiniteRange,
    Settings,
    emit_json,
    output_option,
    pass_settings,
    read_one_plan,
    run,
    write_output_file,
)
from asyncdeploy.cli.render import EventRenderer
from asyncdeploy.plan import WorkloadPlan

if TYPE_CHECKING:  # the verify package needs aiohttp: imported when the command runs
    from asyncdeploy.verify import VerifyOptions, VerifyReport
    from asyncdeploy.verify.requests import RequestSpec

__all__ = ["verify"]

RATE = FiniteRange(0, 1000)  # requests per second: finite, and one machine's worth


def _need_verify() -> None:
    """A core-only install has no aiohttp (verify's traffic client): say which extra brings it."""
    try:
        import asyncdeploy.verify  # noqa: F401
    except ModuleNotFoundError as exc:
        raise CommandFailed(
            f"verify needs {exc.name}, which is not installed: pip install "
            "'asyncdeploy[docker]' (or [kubernetes]: either extra brings it)",
            EXIT_USAGE,
        ) from exc


def _request_lines(ctx: click.Context, param: click.Parameter, lines: tuple[str, ...]) -> Any:
    _need_verify()
    from asyncdeploy.verify.requests import RequestSpecError, parse_request

    try:
        return tuple(parse_request(line).with_body() for line in lines)
    except RequestSpecError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None


def _requests_file(ctx: click.Context, param: click.Parameter, path: str | None) -> Any:
    _need_verify()
    from asyncdeploy.verify.requests import RequestSpecError, load_requests_file

    if path is None:
        return ()
    try:
        return load_requests_file(path)
    except RequestSpecError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None


@attrs.frozen(kw_only=True)
class _Given:
    """Every option of the command, as click parsed it: one value, built once from its
    params, from which the verify options and the plan are made."""

    plan_file: str | None
    port: int
    mode: str
    image: str | None
    pause_image: str | None
    registry: str | None
    grace_period_seconds: int | None
    warmup: float
    short_rate: float
    long_rate: float
    stream_rate: float
    long_seconds: float
    stream_tokens: int
    stream_pace: float
    client_abort_every: int
    ignore_sigterm: bool
    propagation_wait: float | None
    report_file: str | None
    output: str
    request: tuple[RequestSpec, ...]
    requests_file: tuple[RequestSpec, ...]
    balancer: str | None
    check_interval: float
    fall: int
    rise: int
    check_timeout: float | None
    connection: str
    nginx_config: str
    instances: int | None
    wrk_connections: int

    def check_tools(self) -> None:
        """The programs asked for are installed (else exit 2, saying how to get them)."""
        if self.wrk_connections and shutil.which("wrk") is None:
            raise CommandFailed(
                "--wrk: wrk is not installed (Debian: apt-get install wrk)", EXIT_USAGE
            )
        if self.balancer in ("haproxy", "nginx") and not (
            shutil.which(self.balancer) or shutil.which(self.balancer, path="/usr/sbin:/sbin")
        ):
            raise CommandFailed(
                f"--balancer {self.balancer}: {self.balancer} is not installed "
                f"(Debian: apt-get install {self.balancer})",
                EXIT_USAGE,
            )

    def options(self) -> VerifyOptions:
        """What verify does (exit 2 for a combination it refuses)."""
        from asyncdeploy.verify import TrafficMix, VerifyOptions

        mix = TrafficMix(
            short_per_second=self.short_rate,
            long_per_second=self.long_rate,
            stream_per_second=self.stream_rate,
            long_seconds=self.long_seconds,
            stream_tokens=self.stream_tokens,
            stream_pace=self.stream_pace,
            client_abort_every=self.client_abort_every,
        )
        try:
            return VerifyOptions(
                mode=self.mode,  # type: ignore[arg-type]
                port=self.port,
                warmup_seconds=self.warmup,
                grace_period_seconds=self.grace_period_seconds,
                mix=mix,
                requests=(*self.request, *self.requests_file) or None,
                balancer=self.balancer,  # type: ignore[arg-type]
                balancer_options=self.balancer_options(),
                instances=self.instances,
                wrk_connections=self.wrk_connections,
                connection=self.connection,  # type: ignore[arg-type]
                nginx_config=self.nginx_config,  # type: ignore[arg-type]
            )
        except ValueError as exc:
            raise CommandFailed(str(exc), EXIT_USAGE) from None

    def balancer_options(self) -> Any:
        from asyncdeploy.verify import BalancerOptions

        return BalancerOptions(
            check_interval=self.check_interval,
            fall=self.fall,
            rise=self.rise,
            check_timeout=self.check_timeout,
        )

    def demo_window(self) -> tuple[str, Any]:
        """The demo's --propagation-wait, and the balancer check its drain declares: behind
        verify's router (which retries a 503) a short window; behind a balancer the kit's own
        maximum (10 s), HAProxy's check declared so that the window closes once it is out."""
        if self.propagation_wait is not None:
            wait = f"{self.propagation_wait:g}s"
        else:
            wait = "2s" if self.balancer is None else "10s"
        return wait, self.balancer_options() if self.balancer == "haproxy" else None

    def plan(self) -> WorkloadPlan:
        """The plan file's, or the demo server's under a name of its own."""
        from asyncdeploy.plan import DEFAULT_PAUSE_IMAGE
        from asyncdeploy.verify import DEMO_IMAGE, demo_plan, from_registry

        if self.plan_file is not None:
            return read_one_plan([self.plan_file], "verify")
        image, pause_image = self.image, self.pause_image
        if self.registry is not None:
            image = from_registry(image or DEMO_IMAGE, self.registry)
            pause_image = from_registry(pause_image or DEFAULT_PAUSE_IMAGE, self.registry)
        wait, check = self.demo_window()
        plan = demo_plan(
            # a name of its own: a workload someone else named "demo" is never touched
            f"asyncdeploy-verify-{secrets.token_hex(3)}",
            image=image or DEMO_IMAGE,
            pause_image=pause_image,
            ignore_sigterm=self.ignore_sigterm,
            propagation_wait=wait,
            balancer_check=check,
        )
        if self.ignore_sigterm:
            plan = attrs.evolve(plan, termination_grace_period_seconds=5)
        if self.balancer == "service":  # the demo behind a Service of its own
            from asyncdeploy.plan import Service, ServicePort

            plan = attrs.evolve(
                plan, service=Service(ports=(ServicePort(port=80, target_port=8080),))
            )
        return plan


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
@click.option(
    "--request",
    multiple=True,
    callback=_request_lines,
    help="A request to send, repeatable: '[METHOD] /PATH [body=@FILE|body=TEXT] "
    "[header=NAME:VALUE] [stream] [until=TEXT] [rate=N] [expect=CODE] [name=NAME]' "
    "[default: the demo server's /short, /long and /stream].",
)
@click.option(
    "--requests",
    "requests_file",
    default=None,
    callback=_requests_file,
    help="A YAML or JSON list of requests (lines as for --request, or mappings).",
)
@click.option(
    "--balancer",
    type=click.Choice(["haproxy", "nginx", "service"]),
    default=None,
    help="Send the traffic through a real load balancer that verify starts (HAProxy at its "
    "default check settings, no retry; nginx as --nginx-config says), or (Kubernetes) through "
    "the plan's Service, each request routed to its ready endpoints as kube-proxy does: every "
    "503 a client sees is a failure [default: verify's own router].",
)
@click.option(
    "--nginx-config",
    type=click.Choice(["lossless", "stock"]),
    default="lossless",
    show_default=True,
    help="With --balancer nginx: the configuration docs/server-kit.md recommends for lossless "
    "drains (proxy_next_upstream error timeout http_503 non_idempotent, max_fails=1 "
    "fail_timeout=10s, kept-alive upstream connections idle at most 4 s), or nginx's own "
    "defaults.",
)
@click.option(
    "--check-interval",
    type=DURATION,
    default="2s",
    show_default=True,
    help="The balancer's health-check interval (the 'LB delay'; HAProxy's default inter).",
)
@click.option(
    "--fall",
    type=click.IntRange(1, 100),
    default=3,
    show_default=True,
    help="Failed checks before the balancer takes an instance out (HAProxy's default).",
)
@click.option(
    "--rise",
    type=click.IntRange(1, 100),
    default=2,
    show_default=True,
    help="Passed checks before the balancer puts an instance back (HAProxy's default).",
)
@click.option(
    "--check-timeout",
    type=DURATION,
    default=None,
    help="How long one health check may take [default: HAProxy's, the check interval].",
)
@click.option(
    "--instances",
    type=click.IntRange(1, 9),
    default=None,
    help="Copies of the plan taking traffic [default: 2 with --balancer or delete-all, else 1].",
)
@click.option(
    "--wrk",
    "wrk_connections",
    type=click.IntRange(0, 64),
    default=0,
    help="Also load the balancer with wrk on N keep-alive connections; its own count of "
    "non-2xx answers and socket errors must be zero too.",
)
@click.option(
    "--connection",
    type=click.Choice(["keep-alive", "close"]),
    default="keep-alive",
    show_default=True,
    help="The clients' habit: keep-alive reuses a pool of HTTP/1.1 connections per kind of "
    "request, as the OpenAI SDK, httpx and aiohttp do; close opens one per request.",
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
    "--short-rate", type=RATE, default=5.0, show_default=True, help="Demo: short requests/s."
)
@click.option(
    "--long-rate", type=RATE, default=1.0, show_default=True, help="Demo: long requests/s."
)
@click.option("--stream-rate", type=RATE, default=2.0, show_default=True, help="Demo: streams/s.")
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
@click.option(
    "--propagation-wait",
    type=DURATION,
    default=None,
    help="Demo: the longest it serves new requests after its drain starts [default: 2s behind "
    "verify's router, which retries a 503; 10s behind a balancer, with HAProxy's check declared "
    "so it closes once HAProxy has taken it out]; shorter than the balancer's check interval x "
    "fall is the 'LB delay' fault.",
)
@click.option(
    "--report",
    "report_file",
    type=OUTPUT_FILE,
    default=None,
    help="Write the report here: a self-contained HTML page (every request on a time axis, the "
    "drain's steps, the summary) when the name ends in .html, else JSON.",
)
@output_option
@pass_settings
def verify(settings: Settings, /, **params: Any) -> None:
    """Prove a lossless termination: traffic through a workload while it is disrupted.

    Exits 1 when any request was refused (503, or at connect), truncated, lost, failed or
    duplicated; 2 on bad input or when the balancer asked for is not installed.
    """
    _need_verify()
    given = _Given(**params)
    given.check_tools()
    if not run(_verify, settings, given, given.options()):
        raise click.exceptions.Exit(EXIT_FAILED)


async def _verify(settings: Settings, given: _Given, options: VerifyOptions) -> bool:
    from asyncdeploy.verify import run_verify

    plan = given.plan()
    renderer = EventRenderer(sys.stderr)
    if given.balancer == "service":
        from asyncdeploy.verify.service import service_route

        try:
            service_route(plan, given.port)
        except ValueError as exc:
            raise CommandFailed(str(exc), EXIT_USAGE) from None
    async with settings.for_plan(plan).open_deployer() as deployer:
        if given.balancer == "service" and deployer.driver_name != "kubernetes":
            raise CommandFailed(
                "--balancer service is for Kubernetes (--driver kubernetes): a Service routes "
                "to its Pods",
                EXIT_USAGE,
            )
        try:
            report = await run_verify(
                deployer,
                plan,
                options,
                on_event=renderer.show if given.output == "text" else None,
                on_status=lambda line: click.echo(f"-- {line}", err=True),
            )
        except CreateError as exc:
            if given.registry is not None or given.plan_file is not None:
                raise
            raise CreateError(
                f"{exc}; `asyncdeploy verify --registry HOST:PORT` pulls the demo and pause "
                "images from a registry of yours"
            ) from exc
    if given.output == "json":
        emit_json(report.to_dict())
    else:
        click.echo(report.text())
    if given.report_file is not None and not await _write_report(report, given.report_file):
        raise click.exceptions.Exit(EXIT_FAILED)  # the result is shown; the page is not written
    return report.passed


async def _write_report(report: VerifyReport, path: str) -> bool:
    """A self-contained HTML page for a name ending in .html (or .htm), else JSON."""
    if path.lower().endswith((".html", ".htm")):
        from asyncdeploy.verify.html import report_html

        text = report_html(report)
    else:
        text = json.dumps(report.to_dict(), default=str)
    return await anyio.to_thread.run_sync(write_output_file, path, text, "report")
