"""``python3 -m asyncdeploy.workload.drain_cmd``: the preStop hook, without click or engine SDKs.

Tells the server behind ``--socket`` to drain, then waits while it keeps serving new requests
through its propagation window (until the balancer in front has certainly stopped sending:
``--balancer-interval``/``--balancer-fall`` declare its check; at most ``--propagation-wait``,
default: the server's own maximum), then until in-flight reaches zero (``--timeout`` bounds it
all, connecting and every reply included). Prints the report as one JSON line, with the
propagation the server observed. Exit status: 0 drained, 1 not drained in time, 2 the server
could not be reached, did not answer in time, or its socket is not trusted.

``--traffic-left`` instead tells the server that the deployer saw it leave every ready endpoint
set (what the Kubernetes driver runs in the container on ``TrafficLeft``), prints the reply and
exits 0 (2 as above).
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Sequence

import anyio

from asyncdeploy.durations import parse_duration

from ._asgi import json_bytes
from .client import control_request, run_drain_command
from .errors import ControlSocketError
from .window import BalancerCheck

__all__ = ["main"]

DEFAULT_SOCKET = "/run/asyncdeploy/control.sock"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python3 -m asyncdeploy.workload.drain_cmd", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--socket", default=DEFAULT_SOCKET, help=f"control socket (default {DEFAULT_SOCKET})"
    )
    parser.add_argument(
        "--propagation-wait",
        type=parse_duration,
        default=None,
        help="the longest the server keeps serving new requests after the drain starts, "
        "e.g. 10s (default: the server's own setting; 0 refuses at once)",
    )
    parser.add_argument(
        "--timeout", type=parse_duration, default=None, help="bound for the whole command"
    )
    parser.add_argument(
        "--balancer-interval",
        type=parse_duration,
        default=None,
        help="the check interval of the balancer in front, e.g. 2s (HAProxy's inter): the "
        "window may then close once fall x interval (+1 s) passed and a probe saw the drain",
    )
    parser.add_argument(
        "--balancer-fall",
        type=int,
        default=3,
        help="failed checks before that balancer takes a server out (default 3, HAProxy's)",
    )
    parser.add_argument(
        "--traffic-left",
        action="store_true",
        help="only tell the server that it left every ready endpoint set, and exit",
    )
    args = parser.parse_args(argv)
    try:
        if args.traffic_left:
            reply = anyio.run(
                functools.partial(control_request, args.socket, "traffic-left"),
                backend="asyncio",
            )
            sys.stdout.write(json_bytes(reply).decode() + "\n")
            return 0
        balancer = None
        if args.balancer_interval is not None:
            balancer = BalancerCheck(interval=args.balancer_interval, fall=args.balancer_fall)
    except ValueError as exc:
        parser.error(str(exc))
    except ControlSocketError as exc:
        sys.stderr.write(f"drain: {exc}\n")
        return 2
    command = functools.partial(
        run_drain_command, args.socket, args.propagation_wait, args.timeout, balancer=balancer
    )
    try:
        report = anyio.run(command, backend="asyncio")
    except ControlSocketError as exc:
        sys.stderr.write(f"drain: {exc}\n")
        return 2
    sys.stdout.write(json_bytes(report.to_dict()).decode() + "\n")
    return 0 if report.drained else 1


if __name__ == "__main__":
    sys.exit(main())
