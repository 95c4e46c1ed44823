"""A gRPC engine behind the gate (``--upstream-protocol h2c``: HAProxy's ``proto h2``), with the
real gRPC library on both sides: unary and server-streaming calls in flight when the drain
starts run to their end; the engine's readiness is a TCP connect; a call after the window is
refused before the engine sees it, and the drain deadline cuts what is still open.

Before issue 30 item 5 the gate spoke HTTP/1.1 to the engine: a gRPC server answered none of
its requests (every call failed, the gate never relayed a stream to it).
"""

from __future__ import annotations

import threading
import time
from collections.abc import AsyncIterator, Iterator
from concurrent import futures

import anyio
import httpx
import pytest

from asyncdeploy.gate import GateConfig, serve_gate
from asyncdeploy.workload import DrainController, PropagationWindow
from tests.polling import until
from tests.workload.test_gate_proxy import Gate, anyio_backend, until_ready

grpc = pytest.importorskip("grpc", reason="grpcio is in the test dependency group")

__all__ = ["anyio_backend"]

pytestmark = pytest.mark.anyio

UNARY = "/asyncdeploy.test.Engine/Slow"
STREAM = "/asyncdeploy.test.Engine/Tokens"
#: A unary call's work and a stream's tokens (x TOKEN_SECONDS): both outlast the window.
SLOW_SECONDS = 2.0
TOKENS = 20
TOKEN_SECONDS = 0.1


class Engine:
    """A gRPC server without protobuf: bytes in, bytes out (generic handlers)."""

    def __init__(self) -> None:
        self.started = 0
        self.finished = 0
        self._lock = threading.Lock()

    def _count(self, field: str) -> None:
        with self._lock:
            setattr(self, field, getattr(self, field) + 1)

    def slow(self, request: bytes, context: object) -> bytes:
        self._count("started")
        time.sleep(SLOW_SECONDS)
        self._count("finished")
        return b"done:" + request

    def tokens(self, request: bytes, context: object) -> Iterator[bytes]:
        self._count("started")
        for i in range(TOKENS):
            time.sleep(TOKEN_SECONDS)
            yield b"%d" % i
        self._count("finished")


@pytest.fixture
def grpc_engine() -> Iterator[tuple[Engine, int]]:
    engine = Engine()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=32))
    handlers = {
        "Slow": grpc.unary_unary_rpc_method_handler(engine.slow),
        "Tokens": grpc.unary_stream_rpc_method_handler(engine.tokens),
    }
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("asyncdeploy.test.Engine", handlers),)
    )
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield engine, port
    finally:
        server.stop(0).wait()


@pytest.fixture
def drain_timeout() -> float:
    return 30.0


@pytest.fixture
async def gate(grpc_engine: tuple[Engine, int], drain_timeout: float) -> AsyncIterator[Gate]:
    controller = DrainController(
        drain_timeout=drain_timeout,
        propagation=PropagationWindow(max_seconds=0.5, quiet_seconds=0.5),
    )
    config = GateConfig(
        listen_port=0,
        listen_host="127.0.0.1",
        upstream_port=grpc_engine[1],
        upstream_protocol="h2c",
        ready_path=None,
        check_interval=0.1,
    )
    async with anyio.create_task_group() as tg:
        port = await tg.start(serve_gate, config, controller)
        gate = Gate(port, 0, controller)
        gate.port = port  # type: ignore[attr-defined]
        yield gate
        tg.cancel_scope.cancel()


class Outcome:
    """One call's end: OK with what it received, or the gRPC status it failed with."""

    def __init__(self) -> None:
        self.code: object = None
        self.details = ""
        self.received: list[bytes] = []


def _unary(channel: object, outcome: Outcome) -> None:
    call = channel.unary_unary(UNARY)  # type: ignore[attr-defined]
    try:
        outcome.received.append(call(b"x", timeout=60))
        outcome.code = grpc.StatusCode.OK
    except grpc.RpcError as exc:
        outcome.code, outcome.details = exc.code(), exc.details()


def _stream(channel: object, outcome: Outcome) -> None:
    call = channel.unary_stream(STREAM)  # type: ignore[attr-defined]
    try:
        for message in call(b"x", timeout=60):
            outcome.received.append(message)
        outcome.code = grpc.StatusCode.OK
    except grpc.RpcError as exc:
        outcome.code, outcome.details = exc.code(), exc.details()


async def _calls_in_flight(gate: Gate, engine: Engine, count: int) -> tuple[object, list[Outcome]]:
    """``count`` unary calls and ``count`` streams on one channel (one HTTP/2 connection to
    the gate, as gRPC clients hold it), all started at the engine."""
    async with httpx.AsyncClient() as client:
        await until_ready(client, gate)
    channel = grpc.insecure_channel(f"127.0.0.1:{gate.port}")  # type: ignore[attr-defined]
    outcomes = [Outcome() for _ in range(2 * count)]
    return channel, outcomes


async def _run_calls(
    channel: object, outcomes: list[Outcome], during: object
) -> None:
    count = len(outcomes) // 2
    async with anyio.create_task_group() as tg:
        for outcome in outcomes[:count]:
            tg.start_soon(anyio.to_thread.run_sync, _unary, channel, outcome)
        for outcome in outcomes[count:]:
            tg.start_soon(anyio.to_thread.run_sync, _stream, channel, outcome)
        await during()  # type: ignore[operator]


async def test_calls_in_flight_run_to_their_end_through_a_drain(
    gate: Gate, grpc_engine: tuple[Engine, int]
) -> None:
    """Three unary calls and three streams in flight on one channel when the drain starts:
    all end OK and whole, counted in flight until their end; the gate is drained after."""
    engine, _ = grpc_engine
    channel, outcomes = await _calls_in_flight(gate, engine, 3)

    async def drain() -> None:
        await until(lambda: engine.started == 6, timeout=10)
        await until(lambda: gate.controller.in_flight == 6, timeout=5)
        gate.controller.begin_drain()
        await until(lambda: gate.controller.is_drained, timeout=20)

    with channel:  # type: ignore[attr-defined]
        await _run_calls(channel, outcomes, drain)
    assert [o.code for o in outcomes] == [grpc.StatusCode.OK] * 6, [o.details for o in outcomes]
    assert all(o.received == [b"done:x"] for o in outcomes[:3])
    assert all(o.received == [b"%d" % i for i in range(TOKENS)] for o in outcomes[3:])
    assert engine.finished == 6


async def test_a_call_after_the_window_is_refused_before_the_engine(
    gate: Gate, grpc_engine: tuple[Engine, int]
) -> None:
    """Past the window a new call fails UNAVAILABLE (the status gRPC's retry policies and
    balancers take as "try elsewhere") and never reaches the engine."""
    engine, _ = grpc_engine
    channel, outcomes = await _calls_in_flight(gate, engine, 1)
    late = Outcome()

    async def drain() -> None:
        await until(lambda: engine.started == 2, timeout=10)
        gate.controller.begin_drain()
        await gate.controller.wait_window_closed()
        await until(lambda: not gate.controller.accepting, timeout=5)
        await anyio.sleep(0.2)  # the map flipped (watch_window)
        await anyio.to_thread.run_sync(_unary, channel, late)

    with channel:  # type: ignore[attr-defined]
        await _run_calls(channel, outcomes, drain)
    assert [o.code for o in outcomes] == [grpc.StatusCode.OK] * 2
    assert late.code == grpc.StatusCode.UNAVAILABLE, (late.code, late.details)
    assert engine.started == 2


@pytest.mark.parametrize("drain_timeout", [1.0])
async def test_the_deadline_cuts_what_is_still_open(
    gate: Gate, grpc_engine: tuple[Engine, int]
) -> None:
    """The control: with a drain deadline shorter than the calls, they are cut (so the test
    above would see a cut if the gate made one)."""
    engine, _ = grpc_engine
    channel, outcomes = await _calls_in_flight(gate, engine, 2)

    async def drain() -> None:
        await until(lambda: engine.started == 4, timeout=10)
        gate.controller.begin_drain()

    with channel:  # type: ignore[attr-defined]
        await _run_calls(channel, outcomes, drain)
    assert all(o.code != grpc.StatusCode.OK for o in outcomes), [o.code for o in outcomes]
