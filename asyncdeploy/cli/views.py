"""Read-only views of workloads, kubectl-style: ``list`` and ``get``, ``-o`` formats, ``-w``."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import anyio
import click

from asyncdeploy._errors import AsyncDeployError, WorkloadNotFound
from asyncdeploy._results import ContainerStatus, WorkloadStatus
from asyncdeploy._selectors import Selector
from asyncdeploy.cli._common import (
    EXIT_INTERRUPTED,
    WORKLOAD_NAME,
    Settings,
    emit_json,
    pass_settings,
    run,
    selector_option,
    status_dict,
)
from asyncdeploy.cli._describe import describe_workload
from asyncdeploy.cli._kube_options import all_namespaces_option
from asyncdeploy.cli._states import age, ready_text, state_text
from asyncdeploy.cli._table import render_table

__all__ = ["get", "list_", "render_table", "show_statuses", "watch_workloads"]

FORMATS = ("text", "json", "yaml", "wide", "name")
WATCH_PERIOD = 1.0  # seconds between two polls of a watch
EVENTS_SHOWN = 10  # the last engine events `get NAME` shows


def _ports(status: WorkloadStatus) -> str:
    return ",".join(str(p) for p in status.ports) or "-"


def _restarts(status: WorkloadStatus) -> str:
    counts = [c.restarts for c in status.containers if c.role != "pause"]
    known = [n for n in counts if n is not None]
    return str(sum(known)) if known else "-"


def _container(c: ContainerStatus, role: bool) -> str:
    """``server:running``; a health state the plan did not ask for (the image's own
    HEALTHCHECK) is shown beside it, not counted in READY."""
    health = f"({c.health})" if c.health and c.state == "running" else ""
    return f"{c.name}{f'({c.role})' if role else ''}:{c.state}{health}"


def _row(status: WorkloadStatus, wide: bool, now: float) -> list[str]:
    # a workload a dead deployer left unfinished says so where its state is (see reconcile)
    row = [status.name, state_text(status, now), ready_text(status), _ports(status)]
    row.append(str(status.grace_period_seconds))
    row.append(age(None if status.created is None else now - status.created))
    if wide:
        containers = " ".join(_container(c, True) for c in status.containers)
        images = " ".join(dict.fromkeys(c.image for c in status.containers if c.role != "pause"))
        # NODE: where the Pod is bound, as kubectl's wide output (none on Docker and Podman)
        node = status.node or "-"
        return [*row, _restarts(status), status.driver, node, containers, images]
    return [*row, ", ".join(_container(c, False) for c in status.containers)]


def _header(wide: bool) -> list[str]:
    base = ["NAME", "STATE", "READY", "PORTS", "GRACE", "AGE"]
    wide_only = ["RESTARTS", "DRIVER", "NODE", "CONTAINERS", "IMAGES"]
    return [*base, *wide_only] if wide else [*base, "CONTAINERS"]


def _key(status: WorkloadStatus) -> tuple[str, str]:
    """A workload's identity in a listing: with ``-A`` one name may be in two namespaces."""
    return status.namespace or "", status.name


def show_statuses(
    found: Sequence[WorkloadStatus],
    output: str,
    *,
    header: bool = True,
    namespaces: bool = False,
    one: bool = False,
) -> None:
    """Print workloads in one of :data:`FORMATS`; ``namespaces`` (``-A``): a NAMESPACE column
    first, as kubectl's, and ``namespace/name`` for ``-o name``; ``one`` (``get NAME``): JSON
    and YAML print the one object, not a list of one."""
    if output in ("json", "yaml"):
        data: Any = [status_dict(s) for s in found]
        if one:
            [data] = data
        if output == "json":
            emit_json(data)
        else:
            import yaml  # on use: the other formats start without it

            click.echo(yaml.safe_dump(data, sort_keys=False), nl=False)
    elif output == "name":
        for status in found:
            click.echo(f"{status.namespace}/{status.name}" if namespaces else status.name)
    else:
        wide, now = output == "wide", time.time()
        head, rows = _header(wide), [_row(s, wide, now) for s in found]
        if namespaces:
            head = ["NAMESPACE", *head]
            rows = [[s.namespace or "-", *row] for s, row in zip(found, rows, strict=True)]
        lines = render_table(head, rows)
        for line in lines if header else lines[1:]:
            click.echo(line)
        left = [s for s in found if s.unfinished]
        if left and header:
            click.echo(
                f"{len(left)} left unfinished by a deployer that died: `asyncdeploy reconcile` "
                "finishes them (--dry-run says how)",
                err=True,
            )


def output_formats(function: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--output",
        "-o",
        type=click.Choice(FORMATS),
        default="text",
        show_default=True,
        help="A table (text, or wide with drivers and images), json, yaml, or names only.",
    )(function)


def watch_option(function: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--watch",
        "-w",
        is_flag=True,
        help="After the listing, print each workload again whenever it changes (Ctrl-C ends).",
    )(function)


async def watch_workloads(
    fetch: Callable[[], Awaitable[list[WorkloadStatus]]],
    output: str,
    *,
    period: float = WATCH_PERIOD,
    namespaces: bool = False,
) -> None:
    """Poll ``fetch`` and print every workload that appeared, changed or went away.

    Polling, not engine events: one loop for Docker, Podman and Kubernetes, and a missed event
    cannot leave the view stale. JSON (and YAML) print one event per change as kubectl's
    ``--output-watch-events``: ``{"type": "ADDED" | "MODIFIED" | "DELETED", "object": ...}``.
    A workload that went away is ``deleted`` (a drain that ended); ``half-drained`` is only
    ever said of one whose drain's owner died. Returns only when cancelled (Ctrl-C).
    """
    seen: dict[tuple[str, str], WorkloadStatus] = {}
    first = True
    said_empty = False
    while True:
        found = await fetch()
        current = {_key(s): s for s in found}
        changed = [s for s in found if seen.get(_key(s)) != s]
        gone = sorted(set(seen) - set(current))
        if changed and output in ("json", "yaml"):
            for status in changed:
                kind = "MODIFIED" if _key(status) in seen else "ADDED"
                _watch_event(kind, status_dict(status), output)
        elif changed:
            show_statuses(
                changed,
                output,
                header=first and output in ("text", "wide"),
                namespaces=namespaces,
            )
        for namespace, name in gone:
            if output in ("json", "yaml"):
                _watch_event("DELETED", status_dict(seen[(namespace, name)]), output)
            elif output in ("text", "wide"):
                row = [name, "deleted", "-", "-", "-", "-", ""]
                head = _header(False)
                if namespaces:
                    head, row = ["NAMESPACE", *head], [namespace, *row]
                click.echo(render_table(head, [row])[1])
            else:
                click.echo(f"{namespace}/{name}" if namespaces else name)
        if first and not found and not said_empty and output in ("text", "wide"):
            click.echo("No resources found", err=True)  # once, as kubectl: then only changes
            said_empty = True
        first = first and not changed
        seen = current
        await anyio.sleep(period)


def _watch_event(kind: str, data: dict[str, Any], output: str) -> None:
    event = {"type": kind, "object": data}
    if output == "json":
        emit_json(event)
    else:
        import yaml  # on use: the other formats start without it

        click.echo(yaml.safe_dump(event, sort_keys=False, explicit_start=True), nl=False)


def _watching(impl: Callable[[], Any]) -> None:
    """Run a watch until Ctrl-C; the interrupt ends it quietly (exit 130, like a shell)."""
    try:
        run(impl)
    except KeyboardInterrupt:
        raise click.exceptions.Exit(EXIT_INTERRUPTED) from None


@click.command("list")
@selector_option
@output_formats
@watch_option
@all_namespaces_option
@pass_settings
def list_(settings: Settings, selector: Selector | None, output: str, watch: bool) -> None:
    """List workloads (containers in plan order)."""
    labels = selector
    everywhere = settings.all_namespaces

    async def impl() -> None:
        async with settings.open_deployer() as deployer:
            if watch:
                await watch_workloads(lambda: deployer.list(labels), output, namespaces=everywhere)
            found = await deployer.list(labels)
        if not found and output in ("text", "wide"):
            click.echo("No resources found", err=True)
            return
        show_statuses(found, output, namespaces=everywhere)

    if watch:
        _watching(impl)
    else:
        run(impl)


@click.command()
@click.argument("name", type=WORKLOAD_NAME)
@output_formats
@watch_option
@pass_settings
def get(settings: Settings, name: str, output: str, watch: bool) -> None:
    """Describe one workload: its containers (in plan order), their state, health, checks and
    restarts, its ports (host -> container) and the engine's last events.

    ``inspect`` shows the engine's raw form."""

    async def impl() -> None:
        async with settings.open_deployer() as deployer:
            if watch:
                await deployer.get(name)  # a clear "not found" before watching

                async def one() -> list[WorkloadStatus]:
                    try:
                        return [await deployer.get(name)]
                    except WorkloadNotFound:
                        return []

                await watch_workloads(one, output)
            status = await deployer.get(name)
            events = None
            if output == "text":
                try:
                    events = await deployer.recent_events(name, limit=EVENTS_SHOWN)
                except AsyncDeployError:
                    pass  # the description stands without them ("the engine did not say")
        if output != "text":
            show_statuses([status], output, one=True)
            return
        for line in describe_workload(status, events):
            click.echo(line)

    if watch:
        _watching(impl)
    else:
        run(impl)
