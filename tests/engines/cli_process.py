"""A real ``asyncdeploy`` CLI process, in its own process group, for the signal tests."""

from __future__ import annotations

import json
import os
import signal
import sys
from typing import Any

import anyio
import attrs
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream


@attrs.define
class CLIProcess:
    process: Process
    stdout: BufferedByteReceiveStream
    lines: list[dict[str, Any]] = attrs.field(factory=list)
    stderr_read: bytearray = attrs.field(factory=bytearray)  # what :meth:`said` has read

    async def next_event(self, event: str, *, timeout: float = 30) -> dict[str, Any]:
        """Read JSON lines until one of type ``event`` (kept in ``lines``)."""
        with anyio.fail_after(timeout):
            while True:
                line = json.loads(await self.stdout.receive_until(b"\n", 1 << 20))
                self.lines.append(line)
                if line.get("event") == event:
                    return line

    def send(self, signum: signal.Signals) -> None:
        os.killpg(self.process.pid, signum)

    async def said(self, text: bytes, *, timeout: float = 30) -> None:
        """Read stderr until ``text`` (kept for :meth:`finish`). Before a second signal: two
        sent before the process ran are one to the kernel (a pending signal is not queued),
        which a loaded machine showed, and the drain then ran to its deadline."""
        assert self.process.stderr is not None
        with anyio.fail_after(timeout):
            while text not in self.stderr_read:
                self.stderr_read += await self.process.stderr.receive()

    async def finish(self, *, timeout: float = 90) -> tuple[int, str]:
        """Wait for the exit; return the exit code and stderr (stdout lines go to ``lines``)."""
        with anyio.fail_after(timeout):
            rest = bytearray(self.stdout.buffer)
            assert self.process.stdout is not None and self.process.stderr is not None
            async for chunk in self.process.stdout:
                rest += chunk
            read = bytes(self.stderr_read)
            stderr = (read + b"".join([chunk async for chunk in self.process.stderr])).decode()
            code = await self.process.wait()
        text = rest.decode().splitlines()
        self.lines += [json.loads(line) for line in text if line.startswith("{")]
        return code, stderr


async def start_cli(driver: str, *args: str) -> CLIProcess:
    process = await anyio.open_process(
        [sys.executable, "-m", "asyncdeploy", "--driver", driver, *args],
        start_new_session=True,  # its own process group: the signals reach it alone
    )
    assert process.stdout is not None
    return CLIProcess(process, BufferedByteReceiveStream(process.stdout))
