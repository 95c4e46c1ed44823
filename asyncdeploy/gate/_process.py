"""HAProxy as the gate's child: started, watched, soft-stopped (the controller's supervision).

HAProxy runs as one process in the foreground (``-db``), in a session of its own (a terminal's
Ctrl-C reaches the controller, which drains, not HAProxy, which would stop at once). Its exit
ends the gate (the container restarts; a gate whose data plane is gone must not keep answering
its admin port). Not master-worker mode: its point is reloads and reading counters after a
soft stop, and the controller neither reloads (admission is a map entry) nor soft-stops before
the drain is over; the master also re-executes itself, which under a low descriptor limit
fails where one process runs, and costs start time. Its configuration and
map live in a private directory made for the run (mode 0700: the admin token is in the
configuration) and removed after it.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio

from ._haproxy import Plane, engine_down_answer, initial_map, render_config
from ._runtime import Runtime, RuntimeAPIError

__all__ = ["DataPlaneError", "Process", "find_haproxy", "run_dir", "running_haproxy"]

logger = logging.getLogger("asyncdeploy.gate")

#: How long HAProxy may take to listen (it takes ~20 ms; the gate's start to ready is ≤ 1 s).
START_TIMEOUT = 10.0


class DataPlaneError(Exception):
    """HAProxy could not start, or exited while the gate ran."""


def find_haproxy(configured: str | None = None) -> str:
    """The HAProxy binary: ``configured``, else on PATH, else Debian's ``/usr/sbin/haproxy``."""
    for candidate in (configured, shutil.which("haproxy"), "/usr/sbin/haproxy"):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise DataPlaneError(
        "haproxy not found (the gate image has it; elsewhere: apt-get install haproxy, "
        "or --haproxy PATH)"
    )


@asynccontextmanager
async def run_dir() -> AsyncIterator[Path]:
    path = Path(await anyio.to_thread.run_sync(tempfile.mkdtemp, "", "asyncdeploy-gate-"))
    try:
        yield path
    finally:
        await anyio.to_thread.run_sync(lambda: shutil.rmtree(path, ignore_errors=True))


_PR_SET_PDEATHSIG = 1
_LIBC = ctypes.CDLL(None)  # the process's own symbols: libc's prctl (loaded before any fork)


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM when the controller dies (Linux), so a controller
    killed outright never leaves HAProxy holding the ports (in its own session, no terminal
    signal and no container's end reaches it otherwise on a host)."""
    _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


Process = asyncio.subprocess.Process


async def _wait_listening(process: Process, runtime: Runtime) -> None:
    with anyio.fail_after(START_TIMEOUT):
        while True:
            if process.returncode is not None:
                raise DataPlaneError(f"haproxy exited at start with code {process.returncode}")
            try:
                await runtime.command("show info")
                return
            except RuntimeAPIError:
                await anyio.sleep(0.01)


@asynccontextmanager
async def running_haproxy(binary: str, plane: Plane) -> AsyncIterator[tuple[Process, Runtime]]:
    """HAProxy started on ``plane`` and listening; soft-stopped (then killed) on the way out."""
    plane.config_file.write_text(render_config(plane))
    plane.map_file.write_text(initial_map())
    plane.engine_down_file.write_text(engine_down_answer())
    command = [binary, "-db", "-f", str(plane.config_file)]
    fds = [fd for fd in (plane.data_fd, plane.admin_fd) if fd is not None]
    process = await asyncio.create_subprocess_exec(
        *command,
        stdin=subprocess.DEVNULL,
        pass_fds=fds,
        start_new_session=True,
        preexec_fn=_die_with_parent,
    )
    runtime = Runtime(plane.runtime_socket, plane.map_file)
    try:
        await _wait_listening(process, runtime)
        logger.info("haproxy %d serving (configuration: %s)", process.pid, plane.config_file)
        yield process, runtime
    finally:
        with anyio.CancelScope(shield=True):
            await _stop(process, plane.hard_stop_after)


async def _stop(process: Process, hard_stop_after: float) -> None:
    """Soft stop (SIGUSR1: listeners closed, connections served to their end), bounded."""
    if process.returncode is None:
        process.send_signal(signal.SIGUSR1)
        with anyio.move_on_after(hard_stop_after + 2):
            await process.wait()
    if process.returncode is None:
        process.kill()
        await process.wait()
