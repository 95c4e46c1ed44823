"""HTTP and TCP checks and hooks sent from the deployer to a workload's address: the fallback.

Checks and HTTP hooks run inside the workload's network namespace (``_inside``). Where nothing
can run there (no container of the workload with ``python3``, and the engine lacks the gate
image the helper runs), they are sent from here instead, to the pause container's address (its
bridge IP; 127.0.0.1 with ``host_network``), as the kubelet does from the node: that needs the
deployer on the engine's host (a local, rootful engine, whose bridge the host routes); without
an address the driver falls back to the command inside the container.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import anyio

__all__ = ["http_get", "probe_from_here", "tcp_open", "workload_address"]

_MAX_HEAD = 16 * 1024


def workload_address(inspect: Mapping[str, Any]) -> str | None:
    """The address the pause container's network namespace is reached at, None if unknown."""
    if (inspect.get("HostConfig") or {}).get("NetworkMode") == "host":
        return "127.0.0.1"
    settings = inspect.get("NetworkSettings") or {}
    if settings.get("IPAddress"):
        return str(settings["IPAddress"])
    for network in (settings.get("Networks") or {}).values():
        if (network or {}).get("IPAddress"):
            return str(network["IPAddress"])
    return None


async def tcp_open(host: str, port: int, timeout: float) -> bool:
    """Whether a TCP connection opens within ``timeout``."""
    with anyio.move_on_after(timeout):
        try:
            stream = await anyio.connect_tcp(host, port)
        except OSError:
            return False
        await stream.aclose()
        return True
    return False


async def http_get(host: str, port: int, path: str, timeout: float) -> int | None:
    """The status of ``GET path`` (None: no answer within ``timeout``, or no HTTP answer)."""
    request = f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n"
    with anyio.move_on_after(timeout):
        try:
            async with await anyio.connect_tcp(host, port) as stream:
                await stream.send(request.encode("latin-1"))
                head = b""
                while b"\r\n" not in head and len(head) < _MAX_HEAD:
                    head += await stream.receive()
        except (OSError, anyio.EndOfStream, anyio.BrokenResourceError):
            return None
        status = head.split(b"\r\n", 1)[0].split(b" ")
        if len(status) >= 2 and status[0].startswith(b"HTTP/") and status[1].isdigit():
            return int(status[1])
    return None


async def probe_from_here(address: str, target: Mapping[str, Any]) -> bool:
    """A readiness target written by ``_spec.probe_target``: HTTP 200-399 (as the kubelet
    counts it) or a TCP connect, within its timeout."""
    timeout = float(target.get("timeout", 1))
    if "http" in target:
        http = target["http"]
        status = await http_get(address, int(http["port"]), str(http["path"]), timeout)
        return status is not None and 200 <= status < 400
    return await tcp_open(address, int(target["tcp"]), timeout)
