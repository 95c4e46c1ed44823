"""The virtual clock's look at bytes in flight (tests/virtual_clock.py): what it counts as still
on its way, and that the loop it makes keeps virtual time and real sockets."""

from __future__ import annotations

import os
import socket
import time

import anyio
import pytest

from tests import virtual_clock


def test_only_a_tcp_socket_in_its_handshake_or_with_unacknowledged_bytes_is_in_flight() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(listener.getsockname())
    server, _ = listener.accept()
    left, right = socket.socketpair()  # (the loop's self-pipe is such a pair)
    read_end, write_end = os.pipe()
    try:
        pair = [client.fileno(), server.fileno()]
        client.sendall(b"x" * 1000)
        # received once the peer's kernel side took them: at once, or (a loaded machine
        # deferring the loopback's softirq) a little later; unread, they are no longer in flight
        deadline = time.monotonic() + 10
        while virtual_clock._in_flight(pair) and time.monotonic() < deadline:
            time.sleep(0.001)
        assert not virtual_clock._in_flight(pair)
        assert virtual_clock._look(listener.fileno()) is None  # no peer, no queue to ask about
        left.sendall(b"unread")
        assert virtual_clock._look(left.fileno()) is None  # a Unix socket: never waited for
        assert virtual_clock._look(read_end) is None  # not a socket
    finally:
        for s in (listener, client, server, left, right):
            s.close()
        os.close(read_end)
        os.close(write_end)
    assert client.fileno() == -1  # the look detached, never closed, what it looked at


def test_a_connection_still_in_its_handshake_is_in_flight() -> None:
    """A listener whose accept queue is full drops the SYNs past it: those clients stay in
    SYN_SENT (the kernel's answer is on its way, as a deferred loopback one would be)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    clients = [socket.socket() for _ in range(3)]
    try:
        for client in clients:
            client.setblocking(False)
            try:
                client.connect(listener.getsockname())
            except BlockingIOError:
                pass
        looks = [virtual_clock._in_flight([client.fileno()]) for client in clients]
        assert looks[0] is False and looks[-1] is True, looks  # queued; its SYN dropped
    finally:
        for s in (listener, *clients):
            s.close()


@pytest.mark.anyio
async def test_a_round_trip_through_the_loops_own_sockets_takes_no_virtual_time() -> None:
    """On the virtual clock (this file runs on it) a request to a server in the same loop is
    answered before any timer fires, and a 30 s sleep costs nothing."""

    async def answer(stream: anyio.abc.SocketStream) -> None:
        async with stream:
            await stream.send(await stream.receive())

    async with await anyio.create_tcp_listener(local_host="127.0.0.1") as listener:
        port = listener.extra(anyio.abc.SocketAttribute.local_port)
        async with anyio.create_task_group() as tg:
            tg.start_soon(listener.serve, answer)
            started = anyio.current_time()
            with anyio.fail_after(1):  # virtual: a jump past it would fail here
                async with await anyio.connect_tcp("127.0.0.1", port) as stream:
                    await stream.send(b"ping")
                    assert await stream.receive() == b"ping"
            assert anyio.current_time() - started < 1
            await anyio.sleep(30)
            assert anyio.current_time() - started >= 30
            tg.cancel_scope.cancel()


def test_bytes_stuck_in_flight_are_waited_for_once_not_on_every_poll(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Something that stays "in flight" past the wait (a peer that stopped reading) is waited
    for once; the polls after it return at once, until one finds something ready."""
    monkeypatch.setattr(virtual_clock, "IN_FLIGHT_WAIT", 0.05)
    monkeypatch.setattr(virtual_clock, "_in_flight", lambda fds: True)
    answers: list[list[str]] = []
    polls: list[float | None] = []

    def select(timeout: float | None = None) -> list[str]:
        polls.append(timeout)
        return answers.pop(0) if answers else []

    class Selector:
        def get_map(self) -> dict[int, object]:
            return {}

    settled = virtual_clock._settling(select, Selector())
    assert settled(0) == []
    waited = len(polls)
    assert waited > 2  # the first empty poll waited (1 ms polls)
    for _ in range(40):  # looptime's count of empty polls before the clock moves
        assert settled(0) == []
    assert len(polls) == waited + 40  # none of them waited
    answers.append(["ready"])
    assert settled(0) == ["ready"]  # something moved: the next empty poll waits again
    before = len(polls)
    assert settled(0) == []
    assert len(polls) > before + 2
