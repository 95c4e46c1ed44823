"""A gRPC engine behind the gate (``--upstream-protocol h2c``: HAProxy's ``proto h2``), with the
real gRPC library on both sides: unary and server-streaming calls in flight when the drain
starts run to their end; the engine's readiness is a TCP connect; a call after the window is
refused before the engine sees it, and the drain deadline cuts what is still open.

Before issue 30 item 5 the gate spoke HTTP/1.1 to the engine: a gRPC server answered none of
its requests (every call failed, the gate never relayed a stream to it).
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
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

# grpc.health.v1.HealthCheckResponse: status SERVING (1) or NOT_SERVING (2), field 1
SERVING, NOT_SERVING = b"\x08\x01", b"\x08\x02"
HEALTH = "/grpc.health.v1.Health/Check"
WATCH = "/grpc.health.v1.Health/Watch"
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
        self.health_checks = 0
        self.watches = 0
        self._lock = threading.Lock()

    def health(self, request: bytes, context: object) -> bytes:
        """``grpc.health.v1.Health/Check``: SERVING (it knows nothing of a drain)."""
        self._count("health_checks")
        return SERVING

    def watch(self, request: bytes, context: object) -> Iterator[bytes]:
        """``grpc.health.v1.Health/Watch``: SERVING, then nothing more for as long as the
        client holds the stream (the engine knows nothing of a drain)."""
        self._count("watches")
        yield SERVING
        while context.is_active():  # type: ignore[attr-defined]
            time.sleep(0.05)

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


@contextlib.contextmanager
def serving_engine() -> Iterator[tuple[Engine, int]]:
    engine = Engine()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=32))
    handlers = {
        "Slow": grpc.unary_unary_rpc_method_handler(engine.slow),
        "Tokens": grpc.unary_stream_rpc_method_handler(engine.tokens),
    }
    health = {
        "Check": grpc.unary_unary_rpc_method_handler(engine.health),
        "Watch": grpc.unary_stream_rpc_method_handler(engine.watch),
    }
    server.add_generic_rpc_handlers(
        (
            grpc.method_handlers_generic_handler("asyncdeploy.test.Engine", handlers),
            grpc.method_handlers_generic_handler("grpc.health.v1.Health", health),
        )
    )
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield engine, port
    finally:
        server.stop(0).wait()


@pytest.fixture
def grpc_engine() -> Iterator[tuple[Engine, int]]:
    with serving_engine() as served:
        yield served


@pytest.fixture
def drain_timeout() -> float:
    return 30.0


@contextlib.asynccontextmanager
async def serving_gate(
    engine_port: int, drain_timeout: float, window: float = 0.5
) -> AsyncIterator[Gate]:
    controller = DrainController(
        drain_timeout=drain_timeout,
        propagation=PropagationWindow(max_seconds=window, quiet_seconds=window),
    )
    config = GateConfig(
        listen_port=0,
        listen_host="127.0.0.1",
        upstream_port=engine_port,
        upstream_protocol="h2c",
        ready_path=None,
        check_interval=0.1,
    )
    async with anyio.create_task_group() as tg:
        port = await tg.start(serve_gate, config, controller)
        gate = Gate(port, 0, controller)
        gate.port = port  # type: ignore[attr-defined]
        async with httpx.AsyncClient() as client:
            await until_ready(client, gate)
        yield gate
        tg.cancel_scope.cancel()


@pytest.fixture
async def gate(grpc_engine: tuple[Engine, int], drain_timeout: float) -> AsyncIterator[Gate]:
    async with serving_gate(grpc_engine[1], drain_timeout) as gate:
        yield gate


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


def data_port_closed(gate: Gate) -> bool:
    try:
        socket.create_connection(("127.0.0.1", gate.port), timeout=1).close()  # type: ignore[attr-defined]
    except ConnectionRefusedError:
        return True
    return False


def _calls_in_flight(gate: Gate, count: int) -> tuple[object, list[Outcome]]:
    """A channel to the gate (one HTTP/2 connection, as gRPC clients hold it) and room for
    ``count`` unary calls and ``count`` streams."""
    channel = grpc.insecure_channel(f"127.0.0.1:{gate.port}")  # type: ignore[attr-defined]
    return channel, [Outcome() for _ in range(2 * count)]


async def _run_calls(
    channel: object, outcomes: list[Outcome], during: Callable[[], Awaitable[None]]
) -> None:
    count = len(outcomes) // 2
    async with anyio.create_task_group() as tg:
        for outcome in outcomes[:count]:
            tg.start_soon(anyio.to_thread.run_sync, _unary, channel, outcome)
        for outcome in outcomes[count:]:
            tg.start_soon(anyio.to_thread.run_sync, _stream, channel, outcome)
        await during()


async def test_calls_in_flight_run_to_their_end_through_a_drain(
    gate: Gate, grpc_engine: tuple[Engine, int]
) -> None:
    """Three unary calls and three streams in flight on one channel when the drain starts:
    all end OK and whole, counted in flight until their end; the gate is drained after."""
    engine, _ = grpc_engine
    channel, outcomes = _calls_in_flight(gate, 3)

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


async def test_calls_after_the_window_go_elsewhere_without_an_error(
    gate: Gate, grpc_engine: tuple[Engine, int]
) -> None:
    """A client whose channel has two replicas (round robin), one draining: past its window
    the draining gate sends GOAWAY (its data port shut), its calls in flight end OK, and every
    new call ends OK: at the other replica, or at the draining one when its client sent it
    before it read the GOAWAY (HAProxy sends it on the connection's next event). (With a 503
    per new stream instead, as HTTP/1.1 clients get, half of them failed UNAVAILABLE: gRPC
    retries that only under a retry policy.)"""
    engine, _ = grpc_engine
    with serving_engine() as (other_engine, other_port):
        async with serving_gate(other_port, 30.0) as other:
            ports = (gate.port, other.port)  # type: ignore[attr-defined]
            target = "ipv4:" + ",".join(f"127.0.0.1:{port}" for port in ports)
            options = [("grpc.lb_policy_name", "round_robin")]
            with grpc.insecure_channel(target, options=options) as channel:
                outcomes = [Outcome() for _ in range(4)]
                late = [Outcome() for _ in range(4)]

                async def drain() -> None:
                    await until(lambda: engine.started + other_engine.started == 4, timeout=10)
                    gate.controller.begin_drain()
                    await until(lambda: data_port_closed(gate), timeout=10)  # the GOAWAY left
                    await anyio.sleep(0.2)  # and the client read it (loopback)
                    async with anyio.create_task_group() as calls:  # side by side
                        for outcome in late:
                            calls.start_soon(anyio.to_thread.run_sync, _unary, channel, outcome)

                await _run_calls(channel, outcomes, drain)
    assert [o.code for o in outcomes] == [grpc.StatusCode.OK] * 4, [o.details for o in outcomes]
    assert [o.code for o in late] == [grpc.StatusCode.OK] * 4, [o.details for o in late]
    assert engine.finished == engine.started


@pytest.mark.parametrize("drain_timeout", [1.0])
async def test_the_deadline_cuts_what_is_still_open(
    gate: Gate, grpc_engine: tuple[Engine, int]
) -> None:
    """The control: with a drain deadline shorter than the calls, they are cut (so the test
    above would see a cut if the gate made one)."""
    engine, _ = grpc_engine
    channel, outcomes = _calls_in_flight(gate, 2)

    async def drain() -> None:
        await until(lambda: engine.started == 4, timeout=10)
        gate.controller.begin_drain()

    with channel:  # type: ignore[attr-defined]
        await _run_calls(channel, outcomes, drain)
    assert all(o.code != grpc.StatusCode.OK for o in outcomes), [o.code for o in outcomes]


async def test_the_health_check_says_not_serving_from_the_drains_start(
    grpc_engine: tuple[Engine, int],
) -> None:
    """``grpc.health.v1.Health/Check`` reaches the engine while the gate serves (SERVING, the
    engine's own answer); from the drain's start, through the window while calls are still
    admitted, the gate answers it itself: NOT_SERVING, so a health-checking client or
    balancer takes the replica out before its port closes. The engine, which knows nothing of
    the drain, is not asked again."""
    engine, port = grpc_engine
    async with serving_gate(port, 30.0, window=5.0) as gate:
        with grpc.insecure_channel(f"127.0.0.1:{gate.port}") as channel:  # type: ignore[attr-defined]
            check = channel.unary_unary(HEALTH)

            def health() -> bytes:
                return check(b"", timeout=10)  # type: ignore[no-any-return]

            assert await anyio.to_thread.run_sync(health) == SERVING
            asked = engine.health_checks
            assert asked == 1
            gate.controller.begin_drain()

            async def not_serving() -> bool:
                return await anyio.to_thread.run_sync(health) == NOT_SERVING

            await until(not_serving, timeout=5, interval=0.1)
            assert gate.controller.accepting, "still inside the window: calls still admitted"
            for _ in range(3):
                assert await anyio.to_thread.run_sync(health) == NOT_SERVING
            outcome = Outcome()
            await anyio.to_thread.run_sync(_unary, channel, outcome)
            assert outcome.code == grpc.StatusCode.OK, outcome.details
        assert engine.health_checks <= asked + 1  # (one may have crossed the map's flip)


async def test_a_health_watch_ends_at_the_drains_start_and_the_gate_says_not_serving(
    grpc_engine: tuple[Engine, int],
) -> None:
    """``grpc.health.v1.Health/Watch`` (what gRPC's client-side health checking holds open)
    reaches the engine while the gate serves: SERVING. At the drain's start the gate ends that
    stream (the engine would say SERVING for as long as it is held, and a stream held on the
    engine was work in flight: the drain waited for it to its deadline), and the Watch the
    client opens again is the gate's own: NOT_SERVING, held open (a Watch that ends is asked
    again at once). The drain is over as soon as the window is: nothing in flight."""
    engine, port = grpc_engine
    async with serving_gate(port, 30.0, window=0.5) as gate:
        with grpc.insecure_channel(f"127.0.0.1:{gate.port}") as channel:  # type: ignore[attr-defined]
            watch = channel.unary_stream(WATCH)
            before = watch(b"", timeout=60)
            assert await anyio.to_thread.run_sync(next, before) == SERVING
            assert engine.watches == 1

            def the_rest(stream: Iterator[bytes]) -> tuple[list[bytes], object]:
                received: list[bytes] = []
                try:
                    received.extend(stream)
                except grpc.RpcError as exc:
                    return received, exc.code()
                return received, grpc.StatusCode.OK

            gate.controller.begin_drain()
            with anyio.fail_after(10):  # (held to the drain's deadline, 30 s, before)
                received, _ = await anyio.to_thread.run_sync(the_rest, before)
            assert received == [], "the engine's stream said nothing more: it was ended"
            again = watch(b"", timeout=60)
            assert await anyio.to_thread.run_sync(next, again) == NOT_SERVING
            assert engine.watches == 1, "the gate's own Watch: the engine is not asked"
            with anyio.fail_after(10):
                assert await gate.controller.wait_drained(10), "a Watch is not work in flight"
            assert not again.done(), "the gate's Watch stays open"  # type: ignore[attr-defined]
            again.cancel()  # type: ignore[attr-defined]
