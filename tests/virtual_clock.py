"""Virtual time that waits for bytes still in the kernel: looptime's loop, whose clock does not
jump while a TCP segment between two of the loop's own sockets is on its way.

looptime moves the clock to the next timer once the loop has polled its sockets (a select with
timeout 0) some 40 times and found nothing. Between two sockets of the same loop (a client and
the fake Kubernetes API server, say) the bytes a task wrote are usually readable at once, but
not always: the loopback device hands them over in a softirq, which a loaded machine defers to
``ksoftirqd``, so for a few milliseconds the write is done and nothing is readable. The clock
then jumped (to a request's 5 s timeout, or past a drain's deadline) while the answer was on its
way: a fake-API test failed only on a loaded machine, with a drain that gave up early or took
seconds it never waited. Here an empty poll looks, before it counts as idle, for a TCP socket of
the loop with bytes sent and not yet acknowledged (``SIOCOUTQ``: on loopback the ACK comes once
the peer's kernel side took them) or a connection still in its handshake, and waits for them in
real time (a few milliseconds, bounded).
"""

from __future__ import annotations

import asyncio
import fcntl
import socket
import struct
import termios
import time
from collections.abc import Callable
from typing import Any

import looptime

# The longest one poll waits in real time for bytes in flight: a deferred softirq runs within
# milliseconds even on a loaded machine; past this, the clock may move as looptime wants.
IN_FLIGHT_WAIT = 0.5
_HANDSHAKE = {2, 3}  # TCP_SYN_SENT, TCP_SYN_RECV (linux/tcp_states.h): SIOCOUTQ says 0 then


def _in_flight(fd: int) -> bool:
    """A TCP socket with bytes sent and not yet acknowledged, or still in its handshake. The
    descriptor is looked at through a socket object that does not own it (detached after)."""
    try:
        probe = socket.socket(fileno=fd)
    except OSError:
        return False  # not a socket
    try:
        if probe.family not in (socket.AF_INET, socket.AF_INET6):
            return False  # the loop's self-pipe (a Unix socket pair), a Unix socket
        if probe.type != socket.SOCK_STREAM:
            return False
        unacked = struct.unpack("i", fcntl.ioctl(fd, termios.TIOCOUTQ, b"\0" * 4))[0]
        state = probe.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)[0]
    except OSError:
        return False  # a listening socket (no queue to ask about), or one closing
    finally:
        probe.detach()
    return unacked > 0 or state in _HANDSHAKE


def _settling(select: Callable[..., Any], selector: Any) -> Callable[..., Any]:
    def settled_select(timeout: float | None = None) -> Any:
        ready = select(timeout=timeout)
        if ready or timeout != 0:
            return ready
        until = time.monotonic() + IN_FLIGHT_WAIT
        while time.monotonic() < until:
            if not any(_in_flight(key.fd) for key in list(selector.get_map().values())):
                break
            ready = select(timeout=0.001)
            if ready:
                break
        return ready

    return settled_select


def new_event_loop() -> asyncio.AbstractEventLoop:
    """looptime's loop, its polls made to wait for the loop's own bytes in flight."""
    loop = looptime.new_event_loop()
    name = "_LoopTimeEventLoop__original_select"  # looptime's own poll, which it calls first
    setattr(loop, name, _settling(getattr(loop, name), loop._selector))  # type: ignore[attr-defined]
    return loop
