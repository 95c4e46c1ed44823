"""HAProxy's runtime API, as the controller speaks it: one command a connection, on its socket.

What the controller needs of the data plane while it runs: flip admission (``set map``), read
the engine backend's counters (``show stat``) and cut the streams still open at the drain
deadline (``shutdown sessions``). The stats socket stays open for the gate's whole life (the
controller never soft-stops HAProxy before the drain is over), so no master CLI round trip.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import anyio
import attrs

from asyncdeploy.workload._unix import connect_unix

__all__ = ["Counters", "Runtime", "RuntimeAPIError", "parse_backend_counters"]


class RuntimeAPIError(Exception):
    """HAProxy's runtime API answered with an error, or not at all."""


@attrs.frozen
class Counters:
    """A backend's counters, as ``show stat`` gives them."""

    #: Streams on the backend now: admitted and not yet over.
    current: int
    #: Streams the backend ever took (admissions, monotonic).
    total: int
    #: Connection and response errors (a failed connect, an answer cut or invalid: 502s).
    failed: int
    #: Streams the client aborted (it closed before the answer's end).
    client_gone: int = 0


def parse_backend_counters(csv: str, backend: str) -> Counters:
    """The ``BACKEND`` row of ``backend`` in ``show stat``'s CSV (its header names columns)."""
    lines = [line for line in csv.splitlines() if line.strip()]
    if not lines or not lines[0].startswith("# "):
        raise RuntimeAPIError(f"not a stats table: {csv[:80]!r}")
    columns = lines[0][2:].split(",")
    index = {name: i for i, name in enumerate(columns)}
    for line in lines[1:]:
        fields = line.split(",")
        if fields[0] == backend and fields[1] == "BACKEND":
            number = {
                name: int(fields[index[name]] or 0)
                for name in ("scur", "stot", "econ", "eresp", "cli_abrt")
            }
            return Counters(
                current=number["scur"],
                total=number["stot"],
                failed=number["econ"] + number["eresp"],
                client_gone=number["cli_abrt"],
            )
    raise RuntimeAPIError(f"no backend {backend!r} in the stats")


class Runtime:
    """Commands to one HAProxy process through its stats socket (level admin)."""

    def __init__(self, socket: Path, map_file: Path) -> None:
        self.socket = socket
        self.map_file = map_file

    async def command(self, text: str) -> str:
        try:
            async with await connect_unix(str(self.socket)) as stream:
                await stream.send(text.encode() + b"\n")
                chunks: list[bytes] = []
                while True:
                    try:
                        chunks.append(await stream.receive(65536))
                    except (anyio.EndOfStream, anyio.BrokenResourceError):
                        break
        except OSError as exc:
            raise RuntimeAPIError(f"haproxy's runtime socket: {exc}") from exc
        return b"".join(chunks).decode("utf-8", "replace")

    async def set_map(self, key: str, value: str) -> None:
        reply = await self.command(f"set map {self.map_file} {key} {value}")
        if reply.strip():
            raise RuntimeAPIError(f"set map {key} {value}: {reply.strip()}")

    async def counters(self, backends: Sequence[str]) -> Counters:
        """The ``backends``' counters together, from one read (one moment of HAProxy's)."""
        stats = await self.command("show stat -1 2 -1")
        each = [parse_backend_counters(stats, backend) for backend in backends]
        return Counters(
            current=sum(c.current for c in each),
            total=sum(c.total for c in each),
            failed=sum(c.failed for c in each),
            client_gone=sum(c.client_gone for c in each),
        )

    async def stop_frontend(self, frontend: str) -> None:
        """Close ``frontend``'s listener for good (``shutdown frontend``): its HTTP/2 connections
        get a GOAWAY (NO_ERROR, last-stream-id 2^31-1) and end once their streams have; the
        stats socket and the other frontends stay."""
        reply = await self.command(f"shutdown frontend {frontend}")
        if reply.strip():
            raise RuntimeAPIError(f"shutdown frontend {frontend}: {reply.strip()}")

    async def cut(self, backend: str, server: str) -> None:
        await self.command(f"shutdown sessions server {backend}/{server}")
