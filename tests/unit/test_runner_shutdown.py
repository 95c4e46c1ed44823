"""The kit's server at its exit: a closed connection whose bytes stopped moving is aborted, one
still read (however slowly) is waited for, one still serving is uvicorn's to end.

Transports stand in for asyncio's (the real one is held by a client that stops reading in
tests/workload/test_truncation.py); the clock is virtual."""

from __future__ import annotations

import types

import anyio
import pytest

from asyncdeploy.workload.runner import _STALLED_AFTER, _abort_stalled

pytestmark = pytest.mark.anyio


class Transport:
    def __init__(self, *, closing: bool, unsent: int) -> None:
        self.closing, self.unsent, self.aborted = closing, unsent, False

    def is_closing(self) -> bool:
        return self.closing

    def get_write_buffer_size(self) -> int:
        return self.unsent

    def abort(self) -> None:
        self.aborted = True


class Connection:  # hashable, as uvicorn's protocols are (its state keeps them in a set)
    def __init__(self, transport: Transport) -> None:
        self.transport = transport


async def test_only_a_closed_connection_whose_bytes_stopped_moving_is_aborted() -> None:
    stalled = Transport(closing=True, unsent=65536)
    read_slowly = Transport(closing=True, unsent=1_000_000)
    serving = Transport(closing=False, unsent=65536)
    flushed = Transport(closing=True, unsent=0)
    state = types.SimpleNamespace(connections={Connection(t) for t in (stalled, read_slowly, serving, flushed)})  # fmt: skip

    async def a_slow_reader() -> None:
        while True:  # a few bytes read every half second, for longer than the stall bound
            await anyio.sleep(_STALLED_AFTER / 2)
            read_slowly.unsent -= 10

    with anyio.move_on_after(_STALLED_AFTER * 5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(a_slow_reader)
            await _abort_stalled(state)  # type: ignore[arg-type]
    assert stalled.aborted
    assert not read_slowly.aborted and not serving.aborted and not flushed.aborted


async def test_a_connection_is_not_aborted_before_its_bytes_have_stood_still_long_enough() -> None:
    stalled = Transport(closing=True, unsent=65536)
    state = types.SimpleNamespace(connections={Connection(stalled)})
    with anyio.move_on_after(_STALLED_AFTER * 0.8):
        await _abort_stalled(state)  # type: ignore[arg-type]
    assert not stalled.aborted
