"""``python3 -m asyncdeploy.workload.drain_cmd``: the preStop hook, without click or engine SDKs.

Tells the server behind ``--socket`` to drain, then waits while it keeps serving new requests
through its propagation window (until traffic has visibly left, at most ``--propagation-wait``;
default: the server's own maximum), then until in-flight reaches zero (``--timeout`` bounds it
all, connecting and every reply included). Prints the report as one JSON line, with the
propagation the server observed. Exit status: 0 drained, 1 not drained in time, 2 the server
could not be reached, did not answer in time, or its socket is not trusted.
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Sequence

import anyio

from asyncdeploy.durations import parse_duration

from ._asgi import json_bytes
from .client import run_drain_command
from .errors import ControlSocketError

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
    args = parser.parse_args(argv)
    command = functools.partial(run_drain_command, args.socket, args.propagation_wait, args.timeout)
    try:
        report = anyio.run(command, backend="asyncio")
    except ControlSocketError as exc:
        sys.stderr.write(f"drain: {exc}\n")
        return 2
    sys.stdout.write(json_bytes(report.to_dict()).decode() + "\n")
    return 0 if report.drained else 1


if __name__ == "__main__":
    sys.exit(main())
