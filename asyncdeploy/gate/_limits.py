"""The gate's limits on what a client can hold of it: time and connections.

HAProxy enforces them (:mod:`._haproxy` maps each onto its setting; docs/gate.md has the table
beside HAProxy's and Envoy's defaults): the time to send a request head, the time a connection
may stay silent (idle between requests, or mid-exchange: a stalled body, an answer not read),
the time the engine may stay silent, a tunnel's silence, and the connections held at once. The
bytes held per connection are HAProxy's buffers (``_haproxy.BUFFER_SIZE``).
"""

from __future__ import annotations

import resource

import attrs

__all__ = [
    "ADMIN_CONNECTIONS",
    "DESCRIPTOR_RESERVE",
    "ENGINE_TIMEOUT",
    "HEADER_TIMEOUT",
    "IDLE_TIMEOUT",
    "OVERFLOW",
    "TUNNEL_TIMEOUT",
    "Connections",
    "Limits",
    "connections",
    "default_max_connections",
]

HEADER_TIMEOUT = 10.0
IDLE_TIMEOUT = 120.0
#: The engine's silence: a model may think long before its first byte (a long prompt, a queue).
ENGINE_TIMEOUT = 600.0
#: A WebSocket's (any upgraded tunnel's) silence both ways.
TUNNEL_TIMEOUT = 3600.0

#: Descriptors kept for what is not a client connection: listeners, the health check, the
#: admin port's connections, the runtime API, logging.
DESCRIPTOR_RESERVE = 48
#: The admin port's connection cap: far above what idle token-less connections can hold
#: before the head timeout closes them, far below the descriptor limit.
ADMIN_CONNECTIONS = 1000
#: Connections past the data port's cap that HAProxy still accepts, to answer them 503.
OVERFLOW = 64


def _descriptors() -> int:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return 1 << 20 if soft == resource.RLIM_INFINITY else int(soft)


def default_max_connections() -> int:
    """Half the descriptors left after the reserve (each client connection may hold one to the
    engine too), at most 10,000."""
    spare = _descriptors() - DESCRIPTOR_RESERVE - 2 * (ADMIN_CONNECTIONS + OVERFLOW)
    return max(1, min(10_000, spare // 2))


@attrs.frozen
class Connections:
    """HAProxy's connection caps, within what the descriptor limit allows (two a connection:
    the client's and the engine's; HAProxy refuses to start past it)."""

    #: Past it, a request is answered 503 and its connection closed (``gate.max_connections``).
    soft: int
    #: The data port's own cap (``maxconn``): its last slot accepts and closes at once, so a
    #: flood of connections never waits in the backlog behind the ones held.
    data: int
    #: The admin port's cap: the data port can never take its slots.
    admin: int
    #: The process's (``global maxconn``).
    total: int


def connections(max_connections: int) -> Connections:
    total = min(
        max_connections + OVERFLOW + ADMIN_CONNECTIONS, (_descriptors() - DESCRIPTOR_RESERVE) // 2
    )
    total = max(4, total)
    admin = min(ADMIN_CONNECTIONS, max(2, total // 4))
    data = max(2, min(max_connections + OVERFLOW, total - admin))
    return Connections(soft=max_connections, data=data, admin=admin, total=total)


@attrs.frozen(kw_only=True)
class Limits:
    #: From a request's first byte (a connection's opening, for its first request) to the end
    #: of its head (HAProxy's ``timeout http-request``); past it 408 and close.
    header_timeout: float = HEADER_TIMEOUT
    #: A connection silent this long is closed: idle between requests (``timeout
    #: http-keep-alive``) or mid-exchange, a body that stopped coming or an answer the client
    #: stopped reading (``timeout client``). Never while bytes flow.
    idle_timeout: float = IDLE_TIMEOUT
    #: The engine silent this long mid-exchange (``timeout server``): 504, or the answer cut.
    engine_timeout: float = ENGINE_TIMEOUT
    #: An upgraded connection (WebSocket) silent both ways this long (``timeout tunnel``).
    tunnel_timeout: float = TUNNEL_TIMEOUT
    #: Client connections held at once; past it a newcomer gets 503 and is closed.
    max_connections: int = attrs.field(factory=default_max_connections)
