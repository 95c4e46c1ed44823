"""The probe a check or HTTP hook runs inside a workload's network namespace (``_inside``).

The program is run here, by this machine's ``python3`` as the helper runs it (isolated, without
site), against real listeners on the loopback: what it prints is what the driver reads.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import pytest
from anyio.abc import SocketStream
from hypothesis import given
from hypothesis import strategies as st

from asyncdeploy.drivers.engine._inside import answer_of, passes, probe_argv
from asyncdeploy.plan import WorkloadPlan, plan_digest

pytestmark = pytest.mark.anyio


async def run_probe(kind: str, port: int, timeout: float, path: str = "/") -> str:
    argv = probe_argv(kind, port, timeout, path)
    assert argv[0] == "python3"
    done = await anyio.run_process([sys.executable, *argv[1:]], check=True)
    return done.stdout.decode()


@asynccontextmanager
async def serve(answer: bytes) -> AsyncIterator[tuple[int, list[bytes]]]:
    received: list[bytes] = []

    async def handle(stream: SocketStream) -> None:
        async with stream:
            try:
                received.append(await stream.receive())
            except anyio.EndOfStream:
                return  # a TCP probe: connected, then closed
            if answer:
                await stream.send(answer)

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, handle)
        yield int(listener.extra(anyio.abc.SocketAttribute.local_port)), received
        tg.cancel_scope.cancel()


@pytest.mark.parametrize(
    ("head", "status"),
    [(b"HTTP/1.1 200 OK\r\n\r\n", 200), (b"HTTP/1.0 503 Busy\r\nRetry-After: 1\r\n\r\n", 503)],
)
async def test_the_probe_reports_the_http_status_and_sends_the_path(
    head: bytes, status: int
) -> None:
    async with serve(head) as (port, received):
        output = await run_probe("http", port, 5, "/-/drain?x=1&token=t")
        assert answer_of(output) == status
        assert received[0].startswith(b"GET /-/drain?x=1&token=t HTTP/1.1\r\n")


async def test_no_http_answer_is_none_and_an_open_port_is_open() -> None:
    async with serve(b"") as (port, _):  # accepts, then closes without a word
        assert answer_of(await run_probe("http", port, 5)) is None
        assert answer_of(await run_probe("tcp", port, 5)) == "open"


async def test_a_closed_port_is_none() -> None:
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = int(listener.extra(anyio.abc.SocketAttribute.local_port))
    await listener.aclose()  # nothing listens there now
    assert answer_of(await run_probe("tcp", port, 2)) is None
    assert answer_of(await run_probe("http", port, 2)) is None


def test_what_passes() -> None:
    assert passes("open") and passes(200) and passes(399) and not passes(400)
    assert not passes(None) and not passes(302, high=300) and passes(204, high=300)


def test_an_unbounded_hook_is_spelled_inf() -> None:
    assert probe_argv("http", 9901, float("inf"), "/x")[-3:] == ["9901", "inf", "/x"]
    assert probe_argv("tcp", 80, 1.5)[-3:] == ["80", "1.5", "/"]


@given(st.text())
def test_any_output_reads_as_an_answer_or_none(output: str) -> None:
    """An exec's output may be anything (a failed exec's message, a shell's noise)."""
    answer = answer_of(output)
    assert answer is None or answer == "open" or isinstance(answer, int)


def test_a_hook_with_the_default_path_has_a_digest() -> None:
    """Its path ("/") is left out of the plan's mapping: the digest once read it anyway."""
    plan = WorkloadPlan.from_mapping(
        {
            "name": "web",
            "containers": [
                {"name": "web", "image": "python", "pre_stop_http": {"port": 8001, "path": "/"}}
            ],
        }
    )
    assert len(plan_digest(plan)) == 16
