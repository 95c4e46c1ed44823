"""A real HAProxy between verify's clients and the workloads, as users run it.

Stock settings: round robin, an HTTP health check (``GET /ready``) every ``check_interval`` with
``fall``/``rise`` (by default HAProxy's own: ``inter 2s fall 3 rise 2``), and no retry of any kind (``retries 0``, no ``retry-on``, no ``redispatch``):
whatever a workload answers while it drains, a client sees. HAProxy runs as verify's child process
(``-db``: in the foreground, never as a service), its configuration and runtime socket in a
temporary directory; both go on every way out, cancellation included.

A workload joins the pool when it is ready (the server is declared in maintenance and enabled
through the runtime socket, as service discovery would add it); it leaves only by failing its
health check — verify never tells HAProxy that a drain starts.
"""

from __future__ import annotations

import shutil
import signal
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import anyio.abc
import attrs

from asyncdeploy._errors import AsyncDeployError
from asyncdeploy.verify._ports import free_port
from asyncdeploy.workload._unix import connect_unix

__all__ = [
    "BACKEND",
    "SERVED_BY_HEADER",
    "BalancerError",
    "BalancerOptions",
    "HAProxy",
    "ServerState",
    "haproxy_config",
    "parse_show_stat",
    "running_haproxy",
]

BACKEND = "workloads"
SERVED_BY_HEADER = "X-Asyncdeploy-Server"  # HAProxy names the server that answered
STOP_SECONDS = 5.0


class BalancerError(AsyncDeployError):
    """The load balancer (or wrk beside it) could not be started or does not answer."""


@attrs.frozen(kw_only=True)
class BalancerOptions:
    """The health check every balancer has; the interval is the "LB delay" of the article.
    The defaults are HAProxy's own (``inter 2s``, ``fall 3``, ``rise 2``): what a user gets."""

    check_interval: float = attrs.field(default=2.0, validator=attrs.validators.gt(0))
    fall: int = attrs.field(default=3, validator=attrs.validators.ge(1))
    rise: int = attrs.field(default=2, validator=attrs.validators.ge(1))
    check_path: str | None = None  # None: the plan's readiness path on the traffic port
    # how long one check may take; None: HAProxy's own default (the interval)
    check_timeout: float | None = attrs.field(
        default=None, validator=attrs.validators.optional(attrs.validators.gt(0))
    )
    binary: str = "haproxy"


@attrs.frozen
class ServerState:
    """A server's state as HAProxy reported it at ``at`` (wall clock): UP, DOWN, MAINT, ..."""

    at: float
    server: str
    status: str


def _ms(seconds: float) -> str:
    return f"{max(1, round(seconds * 1000))}ms"


def haproxy_config(
    *,
    frontend_port: int,
    servers: Sequence[tuple[str, int]],
    runtime_socket: str,
    options: BalancerOptions,
) -> str:
    """The configuration: one frontend on loopback, one backend with every server in
    maintenance until :meth:`HAProxy.enable` adds it."""
    check = f"check inter {_ms(options.check_interval)} fall {options.fall} rise {options.rise} disabled"
    lines = [
        "global",
        f"    stats socket {runtime_socket} mode 600 level admin",
        "",
        "defaults",
        "    mode http",
        "    retries 0",  # not even a connect retry: every failure reaches the client
        "    timeout connect 5s",
        "    timeout client 10m",
        "    timeout server 10m",
        *([f"    timeout check {_ms(options.check_timeout)}"] if options.check_timeout else []),
        "",
        "frontend verify",
        f"    bind 127.0.0.1:{frontend_port}",
        f"    default_backend {BACKEND}",
        "",
        f"backend {BACKEND}",
        "    balance roundrobin",
        "    option httpchk",
        f"    http-check send meth GET uri {options.check_path or '/ready'}",
        f"    http-response set-header {SERVED_BY_HEADER} %s",
    ]
    lines += [f"    server {name} 127.0.0.1:{port} {check}" for name, port in servers]
    return "\n".join(lines) + "\n"


def parse_show_stat(csv: str) -> dict[str, str]:
    """Server name → status from the runtime API's ``show stat`` (CSV, ``# pxname,svname,...``)."""
    lines = [line for line in csv.splitlines() if line.strip()]
    if not lines or not lines[0].startswith("# "):
        return {}
    columns = lines[0][2:].split(",")
    try:
        px, sv, st = columns.index("pxname"), columns.index("svname"), columns.index("status")
    except ValueError:
        return {}
    states = {}
    for line in lines[1:]:
        cells = line.split(",")
        if len(cells) > max(px, sv, st) and cells[px] == BACKEND and cells[sv] != "BACKEND":
            states[cells[sv]] = cells[st]
    return states


@attrs.define
class HAProxy:
    """A running HAProxy: its URL, its runtime socket, and every server state change seen."""

    base_url: str
    runtime_socket: str
    process: anyio.abc.Process
    log_file: Path
    states: list[ServerState] = attrs.field(factory=list)

    async def command(self, line: str) -> str:
        """One runtime API command, its whole answer."""
        with anyio.fail_after(5):
            async with await connect_unix(self.runtime_socket) as stream:
                await stream.send(line.encode() + b"\n")
                chunks = []
                while True:
                    try:
                        chunks.append(await stream.receive())
                    except anyio.EndOfStream:
                        break
        return b"".join(chunks).decode(errors="replace")

    async def server_states(self) -> dict[str, str]:
        return parse_show_stat(await self.command("show stat"))

    def status_of(self, server: str) -> str | None:
        return next((s.status for s in reversed(self.states) if s.server == server), None)

    async def enable(self, server: str, timeout: float = 30.0) -> None:
        """Put a ready workload into the pool; return once HAProxy's own check says UP."""
        await self.command(f"enable server {BACKEND}/{server}")
        with anyio.move_on_after(timeout):
            while True:
                if (await self.observe()).get(server) == "UP":
                    return
                await anyio.sleep(0.05)
        raise BalancerError(
            f"haproxy did not see {server} pass its health check within {timeout:g} s"
        )

    async def observe(self) -> dict[str, str]:
        """The servers' states now; a change since the last look is recorded."""
        try:
            current = await self.server_states()
        except (OSError, TimeoutError, anyio.BrokenResourceError):
            return {}
        now = time.time()
        for server, status in current.items():
            if self.status_of(server) != status:
                self.states.append(ServerState(at=now, server=server, status=status))
        return current

    async def watch(self, period: float = 0.05) -> None:
        """Record every server state change until cancelled."""
        while True:
            await self.observe()
            await anyio.sleep(period)

    async def log_tail(self, lines: int = 10) -> str:
        try:
            text = await anyio.Path(self.log_file).read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


@asynccontextmanager
async def running_haproxy(
    servers: Sequence[tuple[str, int]], options: BalancerOptions | None = None
) -> AsyncIterator[HAProxy]:
    """HAProxy in front of ``servers`` (name, loopback port), all in maintenance until enabled;
    stopped (SIGTERM, then SIGKILL after 5 s) and its directory removed on the way out."""
    options = options or BalancerOptions()
    binary = shutil.which(options.binary)
    if binary is None:
        raise BalancerError(
            f"{options.binary} is not installed (Debian: apt-get install haproxy); "
            "verify starts it as its own child process"
        )
    directory = Path(await anyio.to_thread.run_sync(_make_directory))
    try:
        socket_path = str(directory / "admin.sock")
        port = await anyio.to_thread.run_sync(free_port)  # it probes: off the loop
        config = directory / "haproxy.cfg"
        text = haproxy_config(
            frontend_port=port, servers=servers, runtime_socket=socket_path, options=options
        )
        await anyio.Path(config).write_text(text)
        log_file = directory / "haproxy.log"
        async with await anyio.open_file(log_file, "wb") as log:
            process = await anyio.open_process(
                [binary, "-db", "-f", str(config)],
                stdin=None,
                stdout=log.wrapped,
                stderr=log.wrapped,
                start_new_session=True,  # a Ctrl-C to verify's terminal is verify's to handle
            )
        haproxy = HAProxy(
            base_url=f"http://127.0.0.1:{port}",
            runtime_socket=socket_path,
            process=process,
            log_file=log_file,
        )
        try:
            await _wait_started(haproxy)
            yield haproxy  # the caller runs watch() in a task group of its own
        finally:
            with anyio.CancelScope(shield=True):
                await _stop(process)
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(shutil.rmtree, directory, True)


def _make_directory() -> str:
    # short: the runtime socket's path must fit in sun_path (108 bytes)
    return tempfile.mkdtemp(prefix="asyncdeploy-haproxy-", dir="/tmp")


async def _wait_started(haproxy: HAProxy, timeout: float = 10.0) -> None:
    with anyio.move_on_after(timeout):
        while haproxy.process.returncode is None:
            try:
                await haproxy.server_states()
                return
            except (OSError, TimeoutError, anyio.BrokenResourceError):
                await anyio.sleep(0.05)
    raise BalancerError(
        f"haproxy did not start (exit {haproxy.process.returncode}): {await haproxy.log_tail()}"
    )


async def _stop(process: anyio.abc.Process) -> None:
    if process.returncode is None:
        process.send_signal(signal.SIGTERM)  # HAProxy's hard stop: it is the last one out
        with anyio.move_on_after(STOP_SECONDS):
            await process.wait()
        if process.returncode is None:
            process.kill()
            await process.wait()
    await process.aclose()
