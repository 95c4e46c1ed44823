"""``delete -l SELECTOR --engine E --engine F``: one delete across several engines, one deadline.

An engine is named ``docker``, ``podman`` or ``kubernetes``, or ``docker:CONTEXT`` (a docker
context) / ``kubernetes:CONTEXT`` (a kubeconfig context); each name is how its events and
tables are labelled. Every engine is opened first (one that does not answer: exit 3, nothing
drained); then :mod:`asyncdeploy.fleet` drains them together. Events: ``-o json`` one object
per event with its ``engine``; text one line per event on stderr, ``ENGINE: ...``; then a table
per workload on stdout under its engine. An engine whose drain failed does not stop the
others: exit 1 once all have ended.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from asyncdeploy._events import DrainFinished, DrainSummary, event_to_dict
from asyncdeploy._selectors import Selector
from asyncdeploy.cli._common import echo_out, emit_json, run
from asyncdeploy.cli._signals import Interrupts
from asyncdeploy.cli.render import EventRenderer, event_line
from asyncdeploy.fleet import EngineFailed, FleetEvent, open_fleet

__all__ = ["ENGINE_HELP", "delete_on_engines", "engine_options"]

ENGINE_HELP = (
    "With -l: drain on this engine too, under one deadline (repeat it: docker, podman, "
    "kubernetes, docker:CONTEXT for a docker context, kubernetes:CONTEXT for a kubeconfig one)."
)
_CONTEXT_OPTION = {"docker": "docker_context", "kubernetes": "context"}


def engine_options(engine: str) -> dict[str, Any]:
    """``open_deployer``'s arguments for an engine as the command line names it."""
    driver, _, context = engine.partition(":")
    if driver not in ("docker", "podman", "kubernetes"):
        raise click.BadParameter(
            f"{engine!r}: name docker, podman or kubernetes (docker:CONTEXT, kubernetes:CONTEXT)",
            param_hint="--engine",
        )
    if not context:
        return {"driver": driver}
    if driver not in _CONTEXT_OPTION:
        raise click.BadParameter(f"{engine!r}: Podman has no contexts", param_hint="--engine")
    return {"driver": driver, _CONTEXT_OPTION[driver]: context}


def delete_on_engines(
    engines: tuple[str, ...], selector: Selector, grace_period_seconds: int | None, output: str
) -> None:
    """Drain what ``selector`` matches on every engine named (the module docstring)."""
    chosen = {engine: engine_options(engine) for engine in dict.fromkeys(engines)}
    interrupts = Interrupts("drain", "delete")
    summaries: dict[str, list[DrainSummary]] = {engine: [] for engine in chosen}

    async def impl() -> None:
        async with open_fleet(chosen) as fleet:
            drain = fleet.terminate_all(selector, grace_period_seconds=grace_period_seconds)
            interrupts.attach(drain)
            try:
                async with drain:
                    async for item in drain:
                        _show(item, output, summaries)
            finally:
                if output == "text":
                    _tables(summaries)
            if not any(summaries.values()):
                click.echo("No resources found", err=True)  # as kubectl: exit 0
            interrupts.settled()

    run(interrupts.guard, impl)


def _show(item: FleetEvent | EngineFailed, output: str, summaries: dict[str, list[Any]]) -> None:
    if isinstance(item, EngineFailed):
        if output == "json":
            emit_json({"event": "EngineFailed", "engine": item.engine, "error": str(item.error)})
        else:
            click.echo(f"{item.engine}: failed: {item.error}", err=True)
        return
    if isinstance(item.event, DrainFinished):
        summaries[item.engine].append(item.event.summary)
    if output == "json":
        emit_json({"engine": item.engine, **event_to_dict(item.event)})
    else:
        click.echo(f"{item.engine}: {event_line(item.event)}", err=True)
        sys.stderr.flush()


def _tables(summaries: dict[str, list[DrainSummary]]) -> None:
    for engine, drained in summaries.items():
        for summary in drained:
            echo_out(f"[{engine}]\n{EventRenderer.summary_table(summary)}")
