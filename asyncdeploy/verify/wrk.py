"""wrk (Debian's package) as a second, independent client behind the balancer.

verify's own clients give every request an ID and an outcome; wrk gives raw keep-alive load
and counts for itself what a user's load test would see: non-2xx/3xx answers and socket errors
(connect, read, write, timeout). It runs as verify's child process for as long as the traffic
does; SIGINT makes it stop and print its summary.
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
from collections.abc import Callable

import anyio
import anyio.abc
import attrs

from asyncdeploy.verify.balancer import BalancerError

__all__ = ["WrkResult", "parse_wrk_output", "run_wrk"]

_REQUESTS = re.compile(r"^\s*(\d+) requests in ", re.MULTILINE)
_NON_2XX = re.compile(r"^\s*Non-2xx or 3xx responses: (\d+)", re.MULTILINE)
_SOCKET = re.compile(
    r"^\s*Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", re.MULTILINE
)


@attrs.frozen(kw_only=True)
class WrkResult:
    connections: int
    requests: int
    non_2xx: int = 0
    connect_errors: int = 0
    read_errors: int = 0
    write_errors: int = 0
    timeouts: int = 0

    @property
    def failures(self) -> int:
        return (
            self.non_2xx
            + self.connect_errors
            + self.read_errors
            + self.write_errors
            + self.timeouts
        )

    def text(self) -> str:
        return (
            f"wrk ({self.connections} connections): {self.requests} requests, "
            f"non-2xx/3xx {self.non_2xx}, socket errors: connect {self.connect_errors}, "
            f"read {self.read_errors}, write {self.write_errors}, timeout {self.timeouts}"
        )


def parse_wrk_output(text: str, connections: int) -> WrkResult:
    """wrk's summary → counts; a summary without its request line is an error."""
    requests = _REQUESTS.search(text)
    if requests is None:
        raise BalancerError(f"wrk printed no summary: {text.strip()[-500:]!r}")
    non_2xx = _NON_2XX.search(text)
    socket = _SOCKET.search(text)
    errors = [int(n) for n in socket.groups()] if socket else [0, 0, 0, 0]
    return WrkResult(
        connections=connections,
        requests=int(requests.group(1)),
        non_2xx=int(non_2xx.group(1)) if non_2xx else 0,
        connect_errors=errors[0],
        read_errors=errors[1],
        write_errors=errors[2],
        timeouts=errors[3],
    )


async def run_wrk(
    url: str,
    connections: int,
    stop: anyio.Event,
    on_result: Callable[[WrkResult], None],
    binary: str = "wrk",
) -> None:
    """Load ``url`` on ``connections`` keep-alive connections until ``stop``; hand the counts
    to ``on_result``. The process is stopped (SIGINT, then SIGKILL) on every way out."""
    found = shutil.which(binary)
    if found is None:
        raise BalancerError(f"{binary} is not installed (Debian: apt-get install wrk)")
    process = await anyio.open_process(
        [found, "-t1", f"-c{connections}", "-d3600s", "--timeout", "30s", url],
        stdin=None,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    output = bytearray()
    try:
        async with anyio.create_task_group() as tg:

            async def read() -> None:
                assert process.stdout is not None
                async for chunk in process.stdout:
                    output.extend(chunk)

            tg.start_soon(read)
            await stop.wait()
            process.send_signal(signal.SIGINT)  # wrk's own stop: it prints its summary
            with anyio.move_on_after(10):
                await process.wait()
            if process.returncode is None:
                process.kill()  # its stdout closes: read() ends
                await process.wait()
    finally:
        with anyio.CancelScope(shield=True):
            if process.returncode is None:
                process.kill()
                await process.wait()
            await process.aclose()
    on_result(parse_wrk_output(output.decode(errors="replace"), connections))
