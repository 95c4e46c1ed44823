"""``python3 -m asyncdeploy.gate``: run the gate, or ``... drain`` to drain a running one.

The gate answers SIGTERM/SIGINT by draining (admitted work finishes, bounded by
``--drain-timeout``) and exits 0. ``drain`` calls ``GET /-/drain`` on the admin port on
127.0.0.1 (with the token from ``--admin-token-env``) and prints the report: exit 0 drained,
1 not drained in time, 2 the gate could not be reached or refused the token.
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import sys
from collections.abc import Sequence

import anyio

from asyncdeploy.workload import DrainController, PropagationWindow, parse_duration

from ._http import status_of
from ._limits import (
    ENGINE_TIMEOUT,
    HEADER_TIMEOUT,
    IDLE_TIMEOUT,
    TUNNEL_TIMEOUT,
    Limits,
    default_max_connections,
)
from ._process import DataPlaneError
from ._reader import Reader
from ._server import GateConfig, serve_gate

TOKEN_ENV = "ASYNCDEPLOY_GATE_TOKEN"  # what plan.gating hands the gate its admin token in


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python3 -m asyncdeploy.gate", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--listen", type=int, default=8000, help="port clients reach (default 8000)"
    )
    parser.add_argument("--listen-host", default="0.0.0.0")
    parser.add_argument(
        "--admin-port",
        type=int,
        default=None,
        help="the admin port: the drain hook and the kit's control commands (default: none)",
    )
    parser.add_argument(
        "--admin-host",
        default=None,
        help="where the admin port listens (default: 0.0.0.0 with a token, else 127.0.0.1)",
    )
    parser.add_argument(
        "--admin-token-env",
        default=TOKEN_ENV,
        help=f"the environment variable holding the admin token (default {TOKEN_ENV})",
    )
    parser.add_argument("--upstream", type=int, help="the engine's port on 127.0.0.1")
    parser.add_argument("--upstream-host", default="127.0.0.1")
    parser.add_argument(
        "--upstream-protocol",
        choices=("http1", "h2c"),
        default="http1",
        help="what the engine speaks: HTTP/1.1 (default) or h2c (HTTP/2 without TLS: gRPC)",
    )
    parser.add_argument(
        "--ready-path", default="/health", help="the engine's health path ('' for a TCP check)"
    )
    parser.add_argument("--check-interval", type=parse_duration, default=1.0)
    parser.add_argument(
        "--drain-timeout", type=parse_duration, default=None, help="cut open streams after this"
    )
    parser.add_argument(
        "--propagation-wait",
        type=parse_duration,
        default=10.0,
        help="the longest a drain serves new requests before refusing them (0: refuse at once)",
    )
    parser.add_argument(
        "--loop",
        choices=("auto", "asyncio", "uvloop"),
        default="auto",
        help="the event loop: uvloop when installed (auto, the gate image has it), or asyncio's",
    )
    parser.add_argument(
        "--header-timeout",
        type=parse_duration,
        default=HEADER_TIMEOUT,
        help="a request head not received this long after its first byte gets 408 (default 10s)",
    )
    parser.add_argument(
        "--idle-timeout",
        type=parse_duration,
        default=IDLE_TIMEOUT,
        help="a connection silent this long (idle, a stalled body, an unread answer) is closed"
        " (default 120s)",
    )
    parser.add_argument(
        "--engine-timeout",
        type=parse_duration,
        default=ENGINE_TIMEOUT,
        help="the engine silent this long mid-exchange: 504 or the answer cut (default 600s)",
    )
    parser.add_argument(
        "--tunnel-timeout",
        type=parse_duration,
        default=TUNNEL_TIMEOUT,
        help="a WebSocket silent both ways this long is closed (default 3600s)",
    )
    parser.add_argument(
        "--haproxy", default=None, help="the HAProxy binary (default: on PATH, /usr/sbin/haproxy)"
    )
    parser.add_argument(
        "--max-connections",
        type=int,
        default=None,
        help="client connections held at once, past it 503 (default: half the descriptor limit)",
    )
    parser.add_argument("--log-level", default="INFO")
    sub = parser.add_subparsers(dest="command")
    drain = sub.add_parser("drain", help="drain the gate whose admin port is --port")
    drain.add_argument("--port", type=int, default=9901, help="the admin port (default 9901)")
    drain.add_argument("--propagation-wait", dest="wait", default=None)
    drain.add_argument("--timeout", type=parse_duration, default=None)
    return parser


async def _run(config: GateConfig) -> None:
    window = PropagationWindow(max_seconds=config.propagation_wait)
    controller = DrainController(drain_timeout=config.drain_timeout, propagation=window)
    await serve_gate(config, controller, handle_signals=True)


async def _drain(port: int, wait: str | None, timeout: float | None, token: str | None) -> int:
    query = [f"propagation_wait={wait}"] if wait else []
    if timeout is not None:
        query.append(f"timeout={timeout}")
    target = "/-/drain" + ("?" + "&".join(query) if query else "")
    header = f"X-Asyncdeploy-Token: {token}\r\n" if token else ""
    try:
        async with await anyio.connect_tcp("127.0.0.1", port) as stream:
            await stream.send(
                f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1\r\n{header}"
                "Connection: close\r\n\r\n".encode()
            )
            reader = Reader(stream)
            raw = await reader.head()
            if raw is None:
                raise OSError("the gate closed the connection")
            status = status_of(raw)
            body = reader.take(1 << 20)
            while True:  # Connection: close: the answer ends with the connection
                try:
                    body += await reader.some()
                except (anyio.EndOfStream, anyio.BrokenResourceError):
                    break
    except (OSError, anyio.EndOfStream, anyio.BrokenResourceError, ValueError) as exc:
        sys.stderr.write(f"drain: gate on port {port}: {exc}\n")
        return 2
    if status == 403:
        sys.stderr.write(f"drain: gate on port {port} refused the admin token\n")
        return 2
    sys.stdout.write(body.decode("utf-8", "replace") + "\n")
    return 0 if status == 200 else 1


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    token = os.environ.get(args.admin_token_env) or None
    if args.command == "drain":
        return anyio.run(_drain, args.port, args.wait, args.timeout, token, backend="asyncio")
    if args.upstream is None:
        _parser().error("--upstream is required")
    logging.basicConfig(level=args.log_level, format="%(asctime)s gate %(levelname)s %(message)s")
    config = GateConfig(
        listen_port=args.listen,
        listen_host=args.listen_host,
        upstream_port=args.upstream,
        upstream_host=args.upstream_host,
        upstream_protocol=args.upstream_protocol,
        ready_path=None if args.upstream_protocol == "h2c" else args.ready_path or None,
        check_interval=args.check_interval,
        drain_timeout=args.drain_timeout,
        propagation_wait=args.propagation_wait,
        admin_port=args.admin_port,
        admin_host=args.admin_host,
        admin_token=token,
        haproxy=args.haproxy,
        limits=Limits(
            header_timeout=args.header_timeout,
            idle_timeout=args.idle_timeout,
            engine_timeout=args.engine_timeout,
            tunnel_timeout=args.tunnel_timeout,
            max_connections=args.max_connections or default_max_connections(),
        ),
    )
    try:
        options = loop_options(args.loop)
    except ImportError:
        _parser().error("--loop uvloop: uvloop is not installed (pip install uvloop)")
    code = 0
    try:
        anyio.run(functools.partial(_run, config), backend="asyncio", backend_options=options)
    except* DataPlaneError as group:  # HAProxy failed to start, or exited: no traceback
        for exc in group.exceptions:
            sys.stderr.write(f"gate: {exc}\n")
        code = 1
    return code


def loop_options(choice: str) -> dict[str, bool]:
    """anyio's asyncio options for ``--loop``: uvloop is optional, an import away."""
    if choice == "asyncio":
        return {"use_uvloop": False}
    try:
        import uvloop  # noqa: F401
    except ImportError:
        if choice == "uvloop":
            raise
        return {"use_uvloop": False}
    return {"use_uvloop": True}


if __name__ == "__main__":
    sys.exit(main())
