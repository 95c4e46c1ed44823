"""The gate's data plane: the HAProxy configuration the controller runs (pure translation).

HAProxy (Debian bookworm's 2.6, in the gate image) carries every byte between clients and the
engine; the gate process is its controller (:mod:`._server`). What HAProxy does on its own
and what it asks the controller, in this file's terms:

* ``data`` (the data port): the kit's health paths and metrics go to the controller's
  ``local`` socket (read-only answers); anything else under ``/-/`` is 403; every other request
  is relayed to the ``engine`` backend while the ``admit`` key of the gate's map is ``1`` and
  refused with 503 + ``Retry-After`` otherwise (the controller flips it through the runtime
  API: ``set map``). Past ``max_connections`` a newcomer's request is a 503 and its connection
  closes, as before, while those held are served on;
* ``admin`` (the admin port): a request without the workload's token is a 403 at HAProxy,
  before the controller sees a byte; the rest goes to the controller's ``admin`` socket. Idle
  or token-less connections cost HAProxy a few hundred bytes each and time out after the head
  timeout, so they cannot take the hook's place (its cap is 1,000 connections, not 16);
* ``engine``: a fresh connection to the engine for every request (``http-server-close``; the
  cause: engines such as llama-server close a kept connection right after a streamed answer
  while advertising keep-alive, and a request that met that close could only be failed or
  replayed), retried only on a failed connect or, for idempotent methods and requests that
  carry ``Idempotency-Key``, an empty answer (RFC 9110 section 9.2.2).

The in-flight count is the ``engine`` backend's current sessions (``scur``): a stream is
counted from its admission until its answer left HAProxy's stream (the last byte handed to the
client's connection), a tunnel (WebSocket) until either side closed it.
"""

from __future__ import annotations

from pathlib import Path

import attrs

from ._limits import Connections

__all__ = [
    "ADMIN_BACKEND",
    "BUFFER_SIZE",
    "DATA_FRONTEND",
    "ENGINE_BACKEND",
    "GRPC_HEALTH_PATH",
    "GRPC_WATCH_PATH",
    "KEPT_BACKEND",
    "MAX_REWRITE",
    "WATCH_BACKEND",
    "Plane",
    "engine_backends",
    "engine_down_answer",
    "initial_map",
    "render_config",
]

DATA_FRONTEND = "data"
ENGINE_BACKEND = "engine"
#: The engine again, on kept-alive connections: for requests a retry may repeat (RFC 9110
#: §9.2.2: an idempotent method, or an ``Idempotency-Key``). A connection the engine closed as
#: the next request went out (llama-server closes after each streamed answer) is retried on a
#: fresh one; every other request (a POST without a key) gets a fresh connection of its own in
#: ENGINE_BACKEND, and is never sent twice. HTTP/1.1 engines only: an h2c engine's one
#: connection carries every stream.
KEPT_BACKEND = "engine_kept"
ADMIN_BACKEND = "admin"
#: gRPC's health check (``grpc.health.v1``): from the drain's start an h2c gate answers it
#: itself, ``NOT_SERVING`` (the engine, which knows nothing of the drain, would say SERVING)
GRPC_HEALTH_PATH = "/grpc.health.v1.Health/Check"
#: ...and its Watch, a stream that lasts as long as its client: while serving it reaches the
#: engine through WATCH_BACKEND, which is not work in flight (a Watch held there would keep
#: the drain to its deadline); at the drain's start those streams are shut, and the Watch a
#: client opens again is the gate's own: ``NOT_SERVING``, held open.
GRPC_WATCH_PATH = "/grpc.health.v1.Health/Watch"
WATCH_BACKEND = "engine_watch"
#: HAProxy's buffer (``tune.bufsize``): a request head must fit in it less ``MAX_REWRITE``; a
#: stream holds at most two of them (one each way) plus the connections' own, so it bounds
#: memory per active connection (docs/gate.md). HAProxy's default is 16 KiB.
BUFFER_SIZE = 32 * 1024
MAX_REWRITE = 1024


@attrs.frozen(kw_only=True)
class Plane:
    """What the configuration is made of: ports, sockets, limits and timeouts (seconds)."""

    run_dir: Path
    #: The listening sockets the controller bound, passed to HAProxy as descriptors.
    data_fd: int
    admin_fd: int | None
    upstream_host: str
    upstream_port: int
    #: ``http1`` or ``h2c``: the engine spoken to in HTTP/2 (``proto h2``), gRPC's transport.
    upstream_protocol: str = "http1"
    admin_token: str | None
    connections: Connections
    header_timeout: float
    idle_timeout: float
    engine_timeout: float
    tunnel_timeout: float
    retry_after: int
    local_paths: tuple[str, ...]
    #: After a soft stop (the gate exiting), connections still open are closed after this.
    hard_stop_after: float = 30.0

    @property
    def runtime_socket(self) -> Path:
        return self.run_dir / "runtime.sock"

    @property
    def local_socket(self) -> Path:
        return self.run_dir / "local.sock"

    @property
    def admin_socket(self) -> Path:
        return self.run_dir / "admin.sock"

    @property
    def map_file(self) -> Path:
        return self.run_dir / "gate.map"

    @property
    def engine_down_file(self) -> Path:
        return self.run_dir / "engine-down.http"

    @property
    def config_file(self) -> Path:
        return self.run_dir / "haproxy.cfg"


def _ms(seconds: float) -> str:
    return f"{max(1, round(seconds * 1000))}ms"


def _quoted(text: str) -> str:
    """``text`` as one word of HAProxy's configuration: double quotes, in which a backslash, a
    quote and ``$`` (the start of an environment variable there) are escaped."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$")
    return '"' + escaped + '"'


def _server_proto(plane: Plane) -> str:
    # h2c: HTTP/2 with prior knowledge on the engine connection (an HTTP/1.1 client's request
    # is converted), so a gRPC server is reached as it expects; trailers pass both ways
    return " proto h2" if plane.upstream_protocol == "h2c" else ""


def engine_backends(plane: Plane) -> tuple[str, ...]:
    """The backends that reach the engine: what is in flight is their streams together."""
    return (ENGINE_BACKEND,) if plane.upstream_protocol == "h2c" else (ENGINE_BACKEND, KEPT_BACKEND)


def initial_map() -> str:
    """The map the controller flips: ``admit`` (1: relay, 0: refuse), the kit's ``state``, and
    ``goaway`` (1 once an h2c gate's data frontend was shut: HTTP/2 streams are relayed)."""
    return "admit 0\nstate starting\ngoaway 0\n"


def engine_down_answer() -> str:
    """What a client gets when no connection to the engine could be made (HAProxy's 503)."""
    body = '{"error":"the engine is unreachable"}'
    return (
        "HTTP/1.1 502 Bad Gateway\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\ncache-control: no-cache\r\n\r\n{body}"
    )


_RETRYABLE = (
    "    acl idempotent method GET HEAD OPTIONS TRACE PUT DELETE",
    "    acl keyed req.hdr(idempotency-key) -m found",
)


def _engine_backend(plane: Plane) -> list[str]:
    """A backend's lines to the engine (after its connection mode)."""
    return [
        # each chunk of a streamed answer (a token of an SSE stream) goes out as it comes: at
        # HAProxy's default, small chunks wait for more data (about 100 ms a token, measured)
        "    option http-no-delay",
        # a body is waited for (up to a buffer) before the engine is reached, under the head
        # timeout: a stalled small body is a 408 and never ties an engine thread; one past the
        # buffer that stalls is bounded by the engine timeout (``timeout server``: HAProxy
        # 2.6 applies it, not ``timeout client``, while a body is forwarded)
        "    option http-buffer-request",
        # the engine unreachable is a 502 (as nginx says it), never the 503 of a refusal
        f"    errorfile 503 {plane.engine_down_file}",
        "    retries 2",
        "    retry-on conn-failure empty-response",
        *_RETRYABLE,
        "    http-request disable-l7-retry if !idempotent !keyed",
        f"    server e {plane.upstream_host}:{plane.upstream_port}{_server_proto(plane)}",
    ]


def render_config(plane: Plane) -> str:
    """HAProxy's configuration for ``plane`` (one thread: the gate is one small sidecar)."""
    mapf = plane.map_file
    state = f"str(state),map({mapf},draining)"
    refusal_body = '{"error":"%[' + state + ']","retry_after":' + str(plane.retry_after) + "}"
    local_paths = " ".join(plane.local_paths)
    full_body = _quoted(
        '{"error":"too many connections","retry_after":' + str(plane.retry_after) + "}"
    )
    control_body = _quoted('{"error":"control paths are served on the gate admin port only"}')
    token_body = _quoted('{"error":"no valid admin token"}')
    refusal = (
        "    http-request return status 503 content-type application/json"
        f" lf-string {_quoted(refusal_body)} hdr retry-after {plane.retry_after}"
        " hdr connection close"
    )
    caps = plane.connections
    lines = [
        "global",
        f"    maxconn {plane.connections.total}",
        "    nbthread 1",
        f"    stats socket {plane.runtime_socket} mode 600 level admin",
        "    stats timeout 5s",
        f"    tune.bufsize {BUFFER_SIZE}",
        f"    tune.maxrewrite {MAX_REWRITE}",
        f"    hard-stop-after {_ms(plane.hard_stop_after)}",
        "",
        "defaults",
        "    mode http",
        "    option http-ignore-probes",
        "    option abortonclose",
        "    timeout connect 5s",
        f"    timeout client {_ms(plane.idle_timeout)}",
        f"    timeout http-request {_ms(plane.header_timeout)}",
        f"    timeout http-keep-alive {_ms(plane.idle_timeout)}",
        f"    timeout server {_ms(plane.engine_timeout)}",
        f"    timeout tunnel {_ms(plane.tunnel_timeout)}",
        "    timeout client-fin 1s",
        "    timeout server-fin 1s",
        "",
        f"frontend {DATA_FRONTEND}",
        f"    bind fd@{plane.data_fd}",
        f"    maxconn {caps.data}",
        f"    tcp-request connection reject if {{ fe_conn ge {caps.data} }}",
        # HAProxy 2.6 passes a NUL inside a header value on (found by the framing tests
        # against h11, which refuses it, as strict engines do): refused here
        "    http-request deny deny_status 400 if { req.hdrs,hex -m reg ^(..)*00 }",
        f"    acl local_path path {local_paths}",
        "    acl local_method method GET HEAD POST",
        "    acl control path_beg /-/",
        f"    acl full fe_conn gt {caps.soft}",
        f"    acl admitted str(admit),map({mapf},0) -m str 1",
        (
            "    http-request return status 503 content-type application/json"
            f" string {full_body}"
            f" hdr retry-after {plane.retry_after} hdr connection close if full"
        ),
        (
            "    http-request return status 403 content-type application/json"
            f" string {control_body} if control !local_path"
        ),
        f"    acl goaway_sent str(goaway),map({mapf},0) -m str 1",
        "    acl http2 req.ver 2.0",
        # after an h2c gate's GOAWAY an HTTP/2 stream is one its client sent before it read
        # the GOAWAY (HAProxy 2.6 sends it on a connection's next event, not at once): served
        f"{refusal} if !local_path !admitted !goaway_sent",
        f"{refusal} if !local_path !admitted !http2",
        f"{refusal} if local_path !local_method !admitted",
        # while draining every answer says so: a keep-alive client reconnects (elsewhere)
        f"    http-after-response set-header connection close if {{ {state} -m str draining }}",
        "    use_backend local if local_path local_method",
    ]
    if plane.upstream_protocol == "h2c":
        lines += [
            f"    acl grpc_health path {GRPC_HEALTH_PATH}",
            f"    acl grpc_watch path {GRPC_WATCH_PATH}",
            f"    acl not_serving {state} -m str draining stopped",
            "    use_backend local if grpc_health not_serving or grpc_watch not_serving",
            f"    use_backend {WATCH_BACKEND} if grpc_watch",
        ]
    kept = KEPT_BACKEND in engine_backends(plane)
    if kept:
        lines += [
            *_RETRYABLE,
            f"    use_backend {KEPT_BACKEND} if idempotent or keyed",
        ]
    lines += [
        f"    default_backend {ENGINE_BACKEND}",
        "",
        f"backend {ENGINE_BACKEND}",
        "    option http-server-close",
        *_engine_backend(plane),
    ]
    if kept:
        lines += ["", f"backend {KEPT_BACKEND}", *_engine_backend(plane)]
    if plane.upstream_protocol == "h2c":
        lines += ["", f"backend {WATCH_BACKEND}", *_engine_backend(plane)]
    lines += [
        "",
        "backend local",
        f"    server c unix@{plane.local_socket}",
    ]
    if plane.admin_fd is not None:
        lines += [
            "",
            "frontend admin",
            f"    bind fd@{plane.admin_fd}",
            f"    maxconn {caps.admin}",
        ]
        if plane.admin_token:
            token = _quoted(plane.admin_token)
            lines += [
                f"    acl token_ok url_param(token) -m str -- {token}",
                f"    acl token_ok req.hdr(x-asyncdeploy-token) -m str -- {token}",
                (
                    "    http-request return status 403 content-type application/json"
                    f" string {token_body} hdr connection close if !token_ok"
                ),
            ]
        lines += [
            f"    default_backend {ADMIN_BACKEND}",
            "",
            f"backend {ADMIN_BACKEND}",
            # the drain hook's answer waits for the drain: bounded by its own timeout
            "    timeout server 24h",
            f"    server c unix@{plane.admin_socket}",
        ]
    return "\n".join(lines) + "\n"
