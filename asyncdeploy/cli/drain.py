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
@click.option(
    "--balancer-interval",
    type=DURATION,
    default=None,
    help="The check interval of the balancer in front (HAProxy's inter), e.g. 2s: the window "
    "may then close once fall x interval (+1 s) passed and a probe saw the drain [default: "
    "not declared, the window runs to its maximum].",
)
@click.option(
    "--balancer-fall",
    type=click.IntRange(1, 1000),
    default=3,
    show_default=True,
    help="Failed checks before that balancer takes a server out.",
)
@click.option(
    "--traffic-left",
    is_flag=True,
    help="Only tell the server that it left every ready endpoint set (what the Kubernetes "
    "driver does on TrafficLeft), and exit.",
)
def drain(
    socket_path: str,
    propagation_wait: float | None,
    timeout: float | None,
    balancer_interval: float | None,
    balancer_fall: int,
    traffic_left: bool,
) -> None:
    """Tell a server to drain, then wait until it has no request in flight (a preStop hook).

    Exit 0 drained, 1 not drained in time.
    """
    from asyncdeploy.workload import BalancerCheck, control_request, run_drain_command

    if traffic_left:
        emit_json(run(control_request, socket_path, "traffic-left"))
        return
    balancer = None
    if balancer_interval is not None:
        if balancer_interval <= 0:
            raise click.BadParameter("must be more than 0", param_hint="--balancer-interval")
        balancer = BalancerCheck(interval=balancer_interval, fall=balancer_fall)
    report = run(run_drain_command, socket_path, propagation_wait, timeout, balancer=balancer)
    emit_json(report.to_dict())
    if not report.drained:
        raise click.exceptions.Exit(EXIT_FAILED)
