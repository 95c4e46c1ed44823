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
the loop with bytes sent that its peer (a socket of the same loop) has not received yet (sent
and not acknowledged, ``SIOCOUTQ``, and the peer's last receipt older than the last send: a
peer that has them and delays its ACK does not count), or a connection still in its handshake,
and waits for them in real time (a few milliseconds, bounded).
"""

from __future__ import annotations

import asyncio
import fcntl
import socket
import struct
import termios
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import looptime

# The longest one poll waits in real time for bytes in flight: a deferred softirq runs within
# milliseconds even on a loaded machine; past this, the clock may move as looptime wants.
IN_FLIGHT_WAIT = 0.5
_HANDSHAKE = {2, 3}  # TCP_SYN_SENT, TCP_SYN_RECV (linux/tcp_states.h): SIOCOUTQ says 0 then


class _Look(NamedTuple):
    """One TCP socket of the loop, as the kernel sees it now."""

    here: object  # its address
    there: object  # its peer's
    unacked: int  # bytes sent and not yet acknowledged (SIOCOUTQ)
    handshake: bool
    since_sent: int  # ms since it last sent data (tcp_info's last_data_sent)
    since_received: int  # ms since it last received data (last_data_recv)


def _look(fd: int) -> _Look | None:
    """A TCP socket's look, or None (not a TCP socket, or a listening one). The descriptor is
    looked at through a socket object that does not own it (detached after)."""
    try:
        probe = socket.socket(fileno=fd)
    except OSError:
        return None  # not a socket
    try:
        if probe.family not in (socket.AF_INET, socket.AF_INET6):
            return None  # the loop's self-pipe (a Unix socket pair), a Unix socket
        if probe.type != socket.SOCK_STREAM:
            return None
        unacked = struct.unpack("i", fcntl.ioctl(fd, termios.TIOCOUTQ, b"\0" * 4))[0]
        info = probe.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 60)
        here = probe.getsockname()
        there = probe.getpeername() if info[0] not in _HANDSHAKE else None  # (none yet)
    except OSError:
        return None  # a listening socket (no peer, no queue to ask about), or one closing
    finally:
        probe.detach()
    since_sent, _, since_received = struct.unpack_from("III", info, 44)
    return _Look(here, there, unacked, info[0] in _HANDSHAKE, since_sent, since_received)


def _in_flight(fds: list[int]) -> bool:
    """Bytes one of these sockets sent that its peer, also among them, has not received yet (a
    peer that received them and delays its ACK does not count), or a handshake under way."""
    looks = [look for look in map(_look, fds) if look is not None]
    by_address = {look.here: look for look in looks}
    for look in looks:
        if look.handshake:
            return True
        peer = by_address.get(look.there)
        if look.unacked and peer is not None and peer.since_received > look.since_sent:
            return True  # the peer's last data came before this socket's last send
    return False


def _settling(select: Callable[..., Any], selector: Any) -> Callable[..., Any]:
    """``select``, its empty polls made to wait for bytes in flight, once: bytes that have not
    arrived within ``IN_FLIGHT_WAIT`` are not on their way (a peer that stopped reading, a
    handshake nothing answers), and the polls after it do not wait again until one finds
    something ready. (Waiting on every poll, the clock crawled: looptime counts some 40 empty
    polls before it moves, 20 s of real time per step, and a fake-API test spun for minutes.)"""
    stalled = False

    def settled_select(timeout: float | None = None) -> Any:
        nonlocal stalled
        ready = select(timeout=timeout)
        if ready:
            stalled = False
        if ready or timeout != 0 or stalled:
            return ready
        until = time.monotonic() + IN_FLIGHT_WAIT
        while time.monotonic() < until:
            if not _in_flight([key.fd for key in list(selector.get_map().values())]):
                return ready
            ready = select(timeout=0.001)
            if ready:
                return ready
        stalled = True  # still "in flight" after the whole wait: stuck, not on its way
        return ready

    return settled_select


def new_event_loop() -> asyncio.AbstractEventLoop:
    """looptime's loop, its polls made to wait for the loop's own bytes in flight."""
    loop = looptime.new_event_loop()
    name = "_LoopTimeEventLoop__original_select"  # looptime's own poll, which it calls first
    setattr(loop, name, _settling(getattr(loop, name), loop._selector))  # type: ignore[attr-defined]
    return loop
