"""verify's free ports come from below the kernel's ephemeral range: a port from the range was
taken between verify's look and the engine's bind ("address already in use") on a clean-clone
run, by the source port of some connection or another program's bind to port 0."""

from __future__ import annotations

import socket

import pytest
from hypothesis import given
from hypothesis import strategies as st

from asyncdeploy.verify import _ports
from asyncdeploy.verify._ports import LOWEST, free_port, unclaimed_ports


def test_a_free_port_is_below_this_machines_ephemeral_range_and_bindable() -> None:
    text = _ports._ephemeral_range_text()
    low = int(text.split()[0]) if text else _ports.LINUX_EPHEMERAL_RANGE[0]
    for _ in range(20):
        port = free_port()
        assert LOWEST <= port < low, (port, text)
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", port))  # nothing holds it


def test_a_held_port_is_never_given(monkeypatch: pytest.MonkeyPatch) -> None:
    held = [socket.socket() for _ in range(2)]
    try:
        for sock in held:
            sock.bind(("127.0.0.1", 0))
        taken = [sock.getsockname()[1] for sock in held]
        monkeypatch.setattr(_ports, "unclaimed_ports", lambda _: range(LOWEST, 65536))
        with socket.socket() as spare_socket:
            spare_socket.bind(("127.0.0.1", 0))
            spare = spare_socket.getsockname()[1]
        monkeypatch.setattr(_ports.random, "sample", lambda *_: [*taken, spare])
        assert free_port() == spare
    finally:
        for sock in held:
            sock.close()


@given(low=st.integers(1, 65535), high=st.integers(1, 65535))
def test_the_ports_drawn_from_never_meet_the_ephemeral_range(low: int, high: int) -> None:
    ports = unclaimed_ports(f"{low}\t{high}\n")
    assert not ports or (ports.start == LOWEST and ports.stop == low and len(ports) >= 1000)


@given(st.text(max_size=20))
def test_any_range_text_gives_ports_from_the_lowest_on_or_none(text: str) -> None:
    ports = unclaimed_ports(text)
    assert ports.stop <= 65536 and (not ports or ports.start == LOWEST)


def test_a_port_something_answers_on_is_in_use_and_a_closed_one_refuses() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        assert not _ports._refused(port)
    assert _ports._refused(port)


def test_a_bindable_port_that_answers_is_never_given(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a forwarded port looks like (Docker without its userland proxy, a Kubernetes
    hostPort): nothing holds it here, a connection reaches something."""
    with socket.socket() as first, socket.socket() as second:
        first.bind(("127.0.0.1", 0))
        second.bind(("127.0.0.1", 0))
        forwarded, spare = first.getsockname()[1], second.getsockname()[1]
    monkeypatch.setattr(_ports, "unclaimed_ports", lambda _: range(LOWEST, 65536))
    monkeypatch.setattr(_ports.random, "sample", lambda *_: [forwarded, spare])
    monkeypatch.setattr(_ports, "_refused", lambda port: port != forwarded)
    assert free_port() == spare
