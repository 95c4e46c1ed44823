"""Run the CLI in a real pseudo-terminal of a given size and read back what the screen shows."""

from __future__ import annotations

import fcntl
import os
import select
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Sequence

import pyte


def run_in_pty(
    args: list[str],
    *,
    columns: int,
    lines: int,
    env: dict[str, str],
    timeout: float = 90,
    signals: Sequence[tuple[float, int]] = (),
    signals_after: bytes = b"",
    keys: Sequence[tuple[bytes, bytes]] = (),
) -> tuple[int, bytes]:
    """Run ``python -m asyncdeploy ARGS`` on a pty of ``columns`` x ``lines``: (exit code, bytes).

    ``signals``: ``(seconds, signal number)`` to send the process, in order, the seconds counted
    from when the output first holds ``signals_after`` (from the start when empty). ``keys``:
    ``(prompt, typed)``, in order: ``typed`` is written to the terminal once the output since
    the last keys holds ``prompt``."""
    leader, follower = os.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", lines, columns, 0, 0))
    process = subprocess.Popen(
        [sys.executable, "-m", "asyncdeploy", *args],
        stdin=follower,
        stdout=follower,
        stderr=follower,
        env=env,
        close_fds=True,
    )
    os.close(follower)
    output = bytearray()
    deadline = time.monotonic() + timeout
    started = time.monotonic() if not signals_after else None
    pending = list(signals)
    typing = list(keys)
    typed_at = 0  # where the output stood when the last keys were typed
    try:
        while time.monotonic() < deadline:
            if typing and typing[0][0] in output[typed_at:]:
                typed_at = len(output)
                os.write(leader, typing.pop(0)[1])
            if started is None and signals_after in output:
                started = time.monotonic()
            while pending and started is not None and time.monotonic() - started >= pending[0][0]:
                process.send_signal(pending.pop(0)[1])
            if not select.select([leader], [], [], 0.05)[0]:
                continue
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            output += chunk
        return process.wait(timeout=max(1.0, deadline - time.monotonic())), bytes(output)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        os.close(leader)


def screen_of(output: bytes, *, columns: int, lines: int) -> list[str]:
    """The screen a VT100-compatible terminal of this size shows after ``output``."""
    screen = pyte.Screen(columns, lines)
    stream = pyte.ByteStream(screen)
    stream.feed(output.replace(b"\n", b"\r\n") if b"\r\n" not in output else output)
    return [line.rstrip() for line in screen.display]
