"""Run the CLI in a real pseudo-terminal of a given size and read back what the screen shows."""

from __future__ import annotations

import fcntl
import os
import struct
import subprocess
import sys
import termios
import time

import pyte


def run_in_pty(
    args: list[str], *, columns: int, lines: int, env: dict[str, str], timeout: float = 90
) -> tuple[int, bytes]:
    """Run ``python -m asyncdeploy ARGS`` on a pty of ``columns`` x ``lines``: (exit code, bytes)."""
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
    try:
        while time.monotonic() < deadline:
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
