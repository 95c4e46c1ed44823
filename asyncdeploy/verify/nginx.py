"""A real nginx (open source) between verify's clients and the workloads, as users run it.

nginx has no active health check: it sends to every server of its ``upstream`` until a request
fails, then leaves that server alone for ``fail_timeout`` (after ``max_fails`` failures). What
counts as a failure, and whether a failed request is tried on another server, is
``proxy_next_upstream``: by default only a connection error or a timeout, and never a POST that
was sent. So a draining server's ``503`` reaches the client unless the configuration says
otherwise. Two configurations:

- ``lossless`` (what docs/server-kit.md recommends in front of a drain kit or gate):
  ``proxy_next_upstream error timeout http_503 non_idempotent`` (a 503 is a failed attempt,
  tried on another server, POSTs included: a refused request was never processed),
  ``max_fails=1 fail_timeout=10s`` (one refusal takes the server out for 10 s), and kept-alive
  HTTP/1.1 connections to the servers (``keepalive``, ``proxy_http_version 1.1``, an empty
  ``Connection`` header), idle ones closed after 4 s (``keepalive_timeout``: before the
  server's own idle timeout, uvicorn's 5 s, closes them: a request nginx sends on a connection
  the server just closed is an error that counts against ``max_fails``, and took a healthy
  server out while the other drained: 502 "no live upstreams"), with streaming unbuffered;
- ``stock``: nginx's own defaults (HTTP/1.0 to the servers, a connection each, retries of
  connection errors only), the control that shows what they lose.

nginx runs as verify's child process in the foreground (``daemon off``), its configuration, pid
file, logs and temporary files in a temporary directory; every server verify may send to is
declared from the start (a successor that does not run yet refuses connections, which nginx
takes as a failure and tries another server). It is stopped, and the directory removed, on
every way out.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import Literal

import anyio
import anyio.abc
import attrs

from asyncdeploy.verify._ports import free_port
from asyncdeploy.verify.balancer import SERVED_BY_HEADER, STOP_SECONDS, BalancerError

__all__ = ["NGINX_CONFIGS", "Nginx", "NginxConfig", "nginx_config", "running_nginx"]

NginxConfig = Literal["lossless", "stock"]
NGINX_CONFIGS: tuple[NginxConfig, ...] = ("lossless", "stock")

#: What a lossless drain needs of nginx: each line of the recommended ``upstream`` server and
#: ``location``, the ones docs/server-kit.md shows.
LOSSLESS_SERVER = "max_fails=1 fail_timeout=10s"
LOSSLESS_UPSTREAM = ("keepalive 32;", "keepalive_timeout 4s;")
LOSSLESS_LOCATION = (
    "proxy_next_upstream error timeout http_503 non_idempotent;",
    "proxy_http_version 1.1;",
    'proxy_set_header Connection "";',
    "proxy_buffering off;",
)


def nginx_config(
    *,
    frontend_port: int,
    servers: Sequence[tuple[str, int]],
    directory: str,
    config: NginxConfig = "lossless",
) -> str:
    """The whole configuration: one server block on loopback proxying to one upstream."""
    lossless = config == "lossless"
    upstream = [
        f"        server 127.0.0.1:{port}{' ' + LOSSLESS_SERVER if lossless else ''};"
        for _, port in servers
    ]
    upstream += [f"        {line}" for line in (LOSSLESS_UPSTREAM if lossless else ())]
    location = [f"            {line}" for line in (LOSSLESS_LOCATION if lossless else ())]
    # the server that answered, by name: the last of $upstream_addr's addresses (one per try)
    names = [rf'        "~127\.0\.0\.1:{port}$" {name};' for name, port in servers]
    lines = [
        "daemon off;",
        "worker_processes 1;",
        f"pid {directory}/nginx.pid;",
        f"error_log {directory}/error.log warn;",
        "events { worker_connections 1024; }",
        "http {",
        "    access_log off;",
        f"    client_body_temp_path {directory}/body;",
        f"    proxy_temp_path {directory}/proxy;",
        f"    fastcgi_temp_path {directory}/fastcgi;",
        f"    uwsgi_temp_path {directory}/uwsgi;",
        f"    scgi_temp_path {directory}/scgi;",
        "    map $upstream_addr $served_by {",
        "        default $upstream_addr;",
        *names,
        "    }",
        "    upstream workloads {",
        *upstream,
        "    }",
        "    server {",
        f"        listen 127.0.0.1:{frontend_port};",
        "        location / {",
        "            proxy_pass http://workloads;",
        "            proxy_read_timeout 10m;",
        f"            add_header {SERVED_BY_HEADER} $served_by always;",
        *location,
        "        }",
        "    }",
        "}",
    ]
    return "\n".join(lines) + "\n"


@attrs.define
class Nginx:
    """A running nginx: its URL and process."""

    base_url: str
    process: anyio.abc.Process
    directory: Path

    async def log_tail(self, lines: int = 10) -> str:
        try:
            text = await anyio.Path(self.directory / "error.log").read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


@asynccontextmanager
async def running_nginx(
    servers: Sequence[tuple[str, int]],
    config: NginxConfig = "lossless",
    *,
    binary: str = "nginx",
) -> AsyncIterator[Nginx]:
    """nginx in front of ``servers`` (name, loopback port); stopped (SIGQUIT, then SIGKILL to
    its process group after 5 s) and its directory removed on the way out."""
    found = shutil.which(binary) or (shutil.which(binary, path="/usr/sbin:/sbin"))
    if found is None:
        raise BalancerError(
            f"{binary} is not installed (Debian: apt-get install nginx); verify starts it as "
            "its own child process"
        )
    directory = Path(await anyio.to_thread.run_sync(_make_directory))
    try:
        port = await anyio.to_thread.run_sync(free_port)  # it probes: off the loop
        text = nginx_config(
            frontend_port=port, servers=servers, directory=str(directory), config=config
        )
        conf = directory / "nginx.conf"
        await anyio.Path(conf).write_text(text)
        async with await anyio.open_file(directory / "output.log", "wb") as log:
            process = await anyio.open_process(
                [found, "-p", str(directory), "-c", str(conf)],
                stdin=None,
                stdout=log.wrapped,
                stderr=log.wrapped,
                start_new_session=True,  # a Ctrl-C to verify's terminal is verify's to handle
            )
        nginx = Nginx(base_url=f"http://127.0.0.1:{port}", process=process, directory=directory)
        try:
            await _wait_listening(nginx, port)
            yield nginx
        finally:
            with anyio.CancelScope(shield=True):
                await _stop(process)
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(shutil.rmtree, directory, True)


def _make_directory() -> str:
    directory = tempfile.mkdtemp(prefix="asyncdeploy-nginx-", dir="/tmp")
    os.chmod(directory, 0o755)  # workers (nobody, when started as root) buffer bodies here
    for name in ("body", "proxy", "fastcgi", "uwsgi", "scgi"):
        os.mkdir(os.path.join(directory, name), 0o700)
        os.chmod(os.path.join(directory, name), 0o777)
    return directory


async def _wait_listening(nginx: Nginx, port: int, timeout: float = 10.0) -> None:
    with anyio.move_on_after(timeout):
        while nginx.process.returncode is None:
            try:
                stream = await anyio.connect_tcp("127.0.0.1", port)
            except OSError:
                await anyio.sleep(0.05)
                continue
            await stream.aclose()
            return
    output = ""
    with suppress(OSError):
        output = (nginx.directory / "output.log").read_text(errors="replace")[-2000:]
    raise BalancerError(
        f"nginx did not start (exit {nginx.process.returncode}): {output}{await nginx.log_tail()}"
    )


async def _stop(process: anyio.abc.Process) -> None:
    if process.returncode is None:
        process.send_signal(signal.SIGTERM)  # nginx's fast shutdown: it is the last one out
        with anyio.move_on_after(STOP_SECONDS):
            await process.wait()
        if process.returncode is None:
            with suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)  # its workers too
            await process.wait()
    await process.aclose()
