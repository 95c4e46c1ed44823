"""A demo inference server wired to the drain kit (plain ASGI; needs only uvicorn).

Endpoints: ``GET /short`` (quick JSON), ``GET /long?seconds=S`` (S seconds of "work", then
JSON), ``GET /stream?tokens=N&pace=S`` (SSE: N ``token`` events S seconds apart, then a final
``done`` event), a WebSocket on any path that echoes what it gets (when uvicorn has a WebSocket
library). Every answer carries the request ID (``X-Request-ID`` or a generated one) in a
header, and every SSE frame carries it in its data, so a client can tell a complete stream from
a truncated one. Health endpoints come from :class:`DrainMiddleware`.

Run: ``python -m asyncdeploy.workload.demo --port 8080 --control-socket /run/asyncdeploy/control.sock``.
"""

from __future__ import annotations

import argparse
import logging
import re
import socket
import sys
import uuid
from collections.abc import Iterator, Sequence
from urllib.parse import parse_qs

import anyio

from asyncdeploy.durations import parse_duration

from ._asgi import Message, Receive, Scope, Send, header, json_bytes, send_response
from .errors import WorkloadError
from .middleware import DrainMiddleware, HealthPaths
from .runner import ServeOptions, serve_with_drain
from .state import DrainController, DrainStatistics
from .window import BalancerCheck, PropagationWindow

__all__ = ["DemoApp", "main"]

logger = logging.getLogger("asyncdeploy.workload.demo")

_REQUEST_ID = re.compile(rb"[A-Za-z0-9._:-]{1,128}")
_INSTANCE = socket.gethostname().encode()  # which instance served a request (X-Served-By)


def _request_id(scope: Scope) -> str:
    given = header(scope.get("headers", []), b"x-request-id")
    if given is not None and _REQUEST_ID.fullmatch(given):
        return given.decode()
    return uuid.uuid4().hex


def _query_number(scope: Scope, name: str, default: float, low: float, high: float) -> float:
    values = parse_qs(scope.get("query_string", b"").decode("latin-1")).get(name)
    if not values:
        return default
    value = float(values[0])  # ValueError → 400
    if not low <= value <= high:
        raise ValueError(f"{name} must be within [{low}, {high}]")
    return value


class DemoApp:
    """The inference-server stand-in; wrap it in :class:`DrainMiddleware`."""

    max_seconds = 3600.0
    max_tokens = 100_000

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] == "websocket":
            await self._echo(receive, send)
            return
        if scope["type"] != "http":
            return
        request_id = _request_id(scope)
        id_header = [(b"x-request-id", request_id.encode()), (b"x-served-by", _INSTANCE)]
        route = (scope["method"], scope["path"])
        try:
            if route == ("GET", "/short"):
                await send_response(
                    send,
                    200,
                    json_bytes({"request_id": request_id, "result": "short"}),
                    extra_headers=id_header,
                )
            elif route == ("GET", "/long"):
                seconds = _query_number(scope, "seconds", 5.0, 0.0, self.max_seconds)
                await anyio.sleep(seconds)
                body = json_bytes({"request_id": request_id, "result": "long", "seconds": seconds})
                await send_response(send, 200, body, extra_headers=id_header)
            elif route == ("GET", "/stream"):
                tokens = int(_query_number(scope, "tokens", 20, 0, self.max_tokens))
                pace = _query_number(scope, "pace", 0.1, 0.0, 60.0)
                await self._stream(send, request_id, tokens, pace)
            else:
                body = json_bytes({"request_id": request_id, "error": "not found"})
                await send_response(send, 404, body, extra_headers=id_header)
        except ValueError as exc:
            body = json_bytes({"request_id": request_id, "error": str(exc)})
            await send_response(send, 400, body, extra_headers=id_header)

    async def _stream(self, send: Send, request_id: str, tokens: int, pace: float) -> None:
        headers = [
            (b"content-type", b"text/event-stream"),
            (b"cache-control", b"no-cache"),
            (b"x-accel-buffering", b"no"),
            (b"x-request-id", request_id.encode()),
            (b"x-served-by", _INSTANCE),
        ]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        for index in range(tokens):
            await anyio.sleep(pace)  # "generating" the next token
            data = json_bytes({"request_id": request_id, "index": index, "token": f"tok{index}"})
            frame = b"id: %d\nevent: token\ndata: %s\n\n" % (index, data)
            await send({"type": "http.response.body", "body": frame, "more_body": True})
        done = (
            b"event: done\ndata: "
            + json_bytes({"request_id": request_id, "tokens": tokens})
            + b"\n\n"
        )
        await send({"type": "http.response.body", "body": done, "more_body": False})

    async def _echo(self, receive: Receive, send: Send) -> None:
        """``/ws`` (any path): a WebSocket that echoes every message until the client closes."""
        message = await receive()
        if message["type"] != "websocket.connect":
            return
        await send({"type": "websocket.accept"})
        while True:
            message = await receive()
            if message["type"] == "websocket.disconnect":
                return
            if message.get("bytes") is not None:
                await send({"type": "websocket.send", "bytes": message["bytes"]})
            else:
                await send({"type": "websocket.send", "text": message.get("text") or ""})

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message: Message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m asyncdeploy.workload.demo", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--host", default="0.0.0.0")  # a container listens on all interfaces
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument(
        "--control-socket", default=None, help="Unix socket for drain/status (mode 0600)"
    )
    parser.add_argument(
        "--drain-timeout",
        type=parse_duration,
        default=20.0,
        help="from the drain start until open streams are cut (default 20s; keep it below the grace period)",
    )
    parser.add_argument(
        "--retry-after", type=int, default=5, help="Retry-After of 503 answers, seconds"
    )
    parser.add_argument(
        "--propagation-window",
        type=parse_duration,
        default=PropagationWindow().max_seconds,
        help="the longest new requests are still served after the drain starts "
        "(default 10s; earlier once the balancer has certainly stopped: --balancer-interval)",
    )
    parser.add_argument(
        "--propagation-quiet",
        type=parse_duration,
        default=PropagationWindow().quiet_seconds,
        help="after the evidence that the balancers stopped, the window closes once no new "
        "request came for this long (default 2s)",
    )
    parser.add_argument(
        "--balancer-interval",
        type=parse_duration,
        default=None,
        help="the check interval of the balancer in front (HAProxy's inter): the window may "
        "close once fall x interval (+1 s) passed and a probe saw the drain",
    )
    parser.add_argument(
        "--balancer-fall",
        type=int,
        default=3,
        help="failed checks before that balancer takes the server out (default 3)",
    )
    parser.add_argument(
        "--refuse-at-once",
        action="store_true",
        help="no propagation window: refuse new requests from the drain start "
        "(behind a gateway that retries 503s elsewhere)",
    )
    parser.add_argument(
        "--load-delay", type=parse_duration, default=0.0, help="simulated model load time"
    )
    parser.add_argument(
        "--ignore-sigterm", action="store_true", help="negative control: no drain on SIGTERM"
    )
    parser.add_argument("--log-level", default="info")
    return parser.parse_args(argv)


async def _serve(args: argparse.Namespace) -> DrainStatistics:
    check = None
    if args.balancer_interval is not None:
        check = BalancerCheck(interval=args.balancer_interval, fall=args.balancer_fall)
    window = PropagationWindow(
        max_seconds=0.0 if args.refuse_at_once else args.propagation_window,
        quiet_seconds=args.propagation_quiet,
        balancer=check,
    )
    controller = DrainController(drain_timeout=args.drain_timeout, propagation=window)
    # the demo has no /metrics of its own, so the kit may take that path
    paths = HealthPaths(metrics="/metrics")
    app = DrainMiddleware(DemoApp(), controller, paths=paths, retry_after=args.retry_after)
    options = ServeOptions(
        host=args.host,
        port=args.port,
        control_socket=args.control_socket,
        handle_signals=True,  # this is the entry point
        ignore_sigterm=args.ignore_sigterm,
        log_level=args.log_level,
    )
    async with anyio.create_task_group() as tg:
        await tg.start(serve_with_drain, app, controller, options)
        with anyio.move_on_after(args.load_delay):  # "loading the model"; a drain ends it early
            await controller.draining.wait()
        controller.mark_started()
        logger.info(
            "demo ready (state=%s, ignore_sigterm=%s)", controller.state.value, args.ignore_sigterm
        )
    return controller.statistics()


def _leaves(exc: BaseException) -> Iterator[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            yield from _leaves(inner)
    else:
        yield exc


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: the only place that installs signal handlers and runs an event loop."""
    args = _parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    stats: DrainStatistics | None = None
    try:
        stats = anyio.run(_serve, args, backend="asyncio")
    except* WorkloadError as group:  # uvicorn or the control socket could not start
        for exc in _leaves(group):
            logger.error("%s", exc)
    if stats is None:
        return 3  # uvicorn's STARTUP_FAILURE
    logger.info("exiting: %s", json_bytes(stats.to_dict()).decode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
