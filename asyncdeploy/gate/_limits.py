"""The gate's limits on what a client can hold of it: time and connections.

What a real proxy bounds, with the gate's defaults beside HAProxy's and Envoy's (docs/gate.md
has the table): the time to send a request head, the time a kept-alive connection may idle,
and the number of connections held at once. The bytes held per connection are fixed in
:mod:`._client` (``MAX_QUEUED``, ``MAX_HELD``) and :mod:`._upstream` (``WRITE_HIGH``).
"""

from __future__ import annotations

import resource

import attrs

__all__ = [
    "ADMIN_CONNECTIONS",
    "DESCRIPTOR_RESERVE",
    "HEADER_TIMEOUT",
    "IDLE_TIMEOUT",
    "Limits",
    "default_max_connections",
]

HEADER_TIMEOUT = 10.0
IDLE_TIMEOUT = 120.0

#: Descriptors kept for what is not a client connection: listeners, the health check, the
#: admin port's connections, the loop's own, logging.
DESCRIPTOR_RESERVE = 48
#: The admin port's own cap (the deployer's or the kubelet's hook, a status call or two).
ADMIN_CONNECTIONS = 16


def default_max_connections() -> int:
    """Half the descriptors left after the reserve (each client connection may hold one to the
    engine too), at most 10,000: the cap never lets clients take the descriptors the gate needs
    to answer the ones it holds, to check the engine, or to serve its admin port."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 10_000
    return max(1, min(10_000, (soft - DESCRIPTOR_RESERVE) // 2))


@attrs.frozen(kw_only=True)
class Limits:
    #: From a request head's first byte (a connection's opening, for its first request) to
    #: its end; past it the client gets 408 and the connection closes.
    header_timeout: float = HEADER_TIMEOUT
    #: A kept-alive connection with no request for this long is closed.
    idle_timeout: float = IDLE_TIMEOUT
    #: Client connections held at once; past it a newcomer gets 503 and is closed.
    max_connections: int = attrs.field(factory=default_max_connections)
