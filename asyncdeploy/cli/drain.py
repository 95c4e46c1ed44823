"""``asyncdeploy drain``: the preStop command that tells a server to drain and waits for it."""

from __future__ import annotations

import click

from asyncdeploy.cli._common import DURATION, EXIT_FAILED, emit_json, run

__all__ = ["drain"]


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
    default=None,
    help="The longest the server keeps serving new requests after the drain starts (it stops "
    "earlier once traffic has left), e.g. 10s [default: the server's own setting; 0 refuses "
    "at once].",
)
@click.option(
    "--timeout", type=DURATION, default=None, help="A bound for the whole command, e.g. 90s."
)
def drain(socket_path: str, propagation_wait: float | None, timeout: float | None) -> None:
    """Tell a server to drain, then wait until it has no request in flight (a preStop hook).

    Exit 0 drained, 1 not drained in time.
    """
    from asyncdeploy.workload import run_drain_command

    report = run(run_drain_command, socket_path, propagation_wait, timeout)
    emit_json(report.to_dict())
    if not report.drained:
        raise click.exceptions.Exit(EXIT_FAILED)
