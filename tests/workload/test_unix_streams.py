"""asyncdeploy's Unix-socket streams survive a read cancelled as data arrives.

anyio's own Unix streams (``anyio.connect_unix``, ``anyio.create_unix_listener``) wait on the raw
socket with a reader callback that sets a future; when the read is cancelled in the loop
iteration where the data arrives, that callback raises InvalidStateError into the loop's
exception handler. A test run under anyio's plugin fails on it (seen in CI: the engine-hang
test's fault proxy cut a connection as the engine answered); an application embedding the gate
or verify gets it in its log. Every Unix stream asyncdeploy opens comes from
``asyncdeploy.workload._unix``, which wraps the raw socket in a transport instead.
"""

from __future__ import annotations

import asyncio
import re
import socket
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import SocketStream

import asyncdeploy
from asyncdeploy.workload._unix import accept_stream, bind_private, connect_unix

pytestmark = pytest.mark.anyio


async def _cancelled_as_data_arrives(stream: SocketStream, peer: socket.socket) -> list[Any]:
    """Cancel a pending read in the very iteration where its data becomes readable; return
    what reached the loop's exception handler."""
    loop = asyncio.get_running_loop()
    errors: list[Any] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: errors.append(context))
    try:
        scope = anyio.CancelScope()

        async def read() -> None:
            with scope:
                await stream.receive()

        async with anyio.create_task_group() as tg:
            tg.start_soon(read)
            await anyio.sleep(0.05)  # the read waits on the socket

            def poke() -> None:
                peer.send(b"x")  # readable at the next select...
                loop.call_soon(scope.cancel)  # ...where the cancel runs first

            loop.call_soon(poke)
            await anyio.sleep(0.05)
        await anyio.sleep(0.05)  # any late callback runs
    finally:
        loop.set_exception_handler(previous)
    return errors


async def test_a_connected_stream_takes_a_cancel_as_data_arrives(tmp_path: Path) -> None:
    path = str(tmp_path / "s.sock")
    listening, _ = bind_private(path)
    with listening:
        stream = await connect_unix(path)
        peer, _ = listening.accept()
        with peer:
            async with stream:
                assert await _cancelled_as_data_arrives(stream, peer) == []
                assert await stream.receive() == b"x"  # the data is still there to read


async def test_an_accepted_stream_takes_a_cancel_as_data_arrives(tmp_path: Path) -> None:
    path = str(tmp_path / "s.sock")
    listening, _ = bind_private(path)
    with listening, socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as peer:
        peer.connect(path)
        async with await accept_stream(listening) as stream:
            assert await _cancelled_as_data_arrives(stream, peer) == []
            assert await stream.receive() == b"x"


def test_no_module_opens_anyios_own_unix_streams() -> None:
    """One home for Unix streams: a new ``anyio.connect_unix`` elsewhere brings the race back."""
    root = Path(asyncdeploy.__file__).parent
    home = root / "workload" / "_unix.py"
    opened = re.compile(r"anyio\.(connect_unix|create_unix_listener)\(|UNIXSocketStream")
    found = [
        f"{path.relative_to(root)}:{number}"
        for path in sorted(root.rglob("*.py"))
        if path != home
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if opened.search(line)
    ]
    assert found == []
