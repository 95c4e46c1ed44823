"""DrainMiddleware driven in-process, frame by frame."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest

from asyncdeploy.workload import DrainController, DrainMiddleware
from asyncdeploy.workload.demo import DemoApp

pytestmark = pytest.mark.anyio


async def test_new_requests_get_503_retry_after_and_close_while_draining(
    controller: DrainController, exchange: Any
) -> None:
    """A request arriving while draining never reaches the app."""
    calls: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        calls.append(scope["path"])

    middleware = DrainMiddleware(app, controller, retry_after=7)
    controller.begin_drain()
    ex = await exchange(middleware, "/v1/generate").run()
    assert ex.status == 503
    assert ex.headers[b"retry-after"] == b"7"
    assert ex.headers[b"connection"] == b"close"
    assert json.loads(ex.body) == {"error": "draining", "retry_after": 7}
    assert calls == []
    assert controller.statistics().rejected_while_draining == 1
    assert controller.statistics().admitted == 0


async def test_requests_before_serving_get_503_too(exchange: Any) -> None:
    """STARTING refuses work the same way, counted apart."""
    controller = DrainController()
    ex = await exchange(DrainMiddleware(DemoApp(), controller), "/short").run()
    assert ex.status == 503
    assert b"retry-after" in ex.headers
    assert ex.headers[b"connection"] == b"close"
    assert controller.statistics().rejected_while_starting == 1


async def test_stream_admitted_before_the_drain_completes_with_done(
    controller: DrainController, demo: DrainMiddleware, exchange: Any, sse: Any
) -> None:
    """Draining refuses newcomers but lets an open stream finish with its done frame."""
    stream = exchange(demo, "/stream?tokens=5&pace=0.02", headers={"X-Request-ID": "req-42"})
    async with anyio.create_task_group() as tg:
        tg.start_soon(stream.run)
        with anyio.fail_after(2):
            await stream.wait_chunks(2)  # response start + first token
        controller.begin_drain()
        late = await exchange(demo, "/short").run()
        assert late.status == 503
        assert controller.in_flight == 1
    events = sse(stream.body)
    assert [name for name, _ in events] == ["token"] * 5 + ["done"]
    assert {data["request_id"] for _, data in events} == {"req-42"}
    stats = controller.statistics()
    assert (stats.completed, stats.in_flight, stats.drained) == (1, 0, True)


async def test_in_flight_drops_only_after_the_last_frame_send_returned(
    controller: DrainController, demo: DrainMiddleware, exchange: Any
) -> None:
    """Generation has ended while the final write is pending: still in flight."""
    stream = exchange(demo, "/stream?tokens=2&pace=0")
    stream.final_gate = anyio.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(stream.run)
        with anyio.fail_after(2):
            await stream.final_send_entered.wait()
        await anyio.sleep(0.05)
        assert controller.in_flight == 1
        controller.begin_drain()
        assert await controller.wait_drained(0.05) is False
        stream.final_gate.set()
        with anyio.fail_after(2):
            assert await controller.wait_drained() is True
        assert stream.final_send_returned.is_set()
    assert controller.statistics().completed == 1


async def test_client_disconnect_mid_stream_releases_and_cancels(
    controller: DrainController, demo: DrainMiddleware, exchange: Any
) -> None:
    """A client that goes away is released at once and its generation stops."""
    stream = exchange(demo, "/stream?tokens=1000&pace=0.01")
    with anyio.fail_after(2):  # 1000 tokens at 10 ms would take 10 s
        async with anyio.create_task_group() as tg:
            tg.start_soon(stream.run)
            await stream.wait_chunks(3)
            assert controller.in_flight == 1
            stream.disconnect()
            await anyio.sleep(0.05)
            assert controller.in_flight == 0  # released at once, before run() returns
    # run() returned (the task group exited) long before 1000 tokens at 10 ms each
    assert len(stream.chunks) < 50
    assert not stream.complete
    stats = controller.statistics()
    assert (stats.client_disconnected, stats.completed, stats.in_flight) == (1, 0, 0)


async def test_readiness_fails_while_draining_but_liveness_holds(exchange: Any) -> None:
    """/ready follows SERVING only; /live ignores draining; /startup turns on once loaded."""
    controller = DrainController()
    app = DrainMiddleware(DemoApp(), controller)

    async def probe() -> tuple[int, int, int]:
        codes = [
            (await exchange(app, path).run()).status for path in ("/ready", "/live", "/startup")
        ]
        return codes[0], codes[1], codes[2]

    assert await probe() == (503, 200, 503)  # starting
    controller.mark_started()
    assert await probe() == (200, 200, 200)  # serving
    controller.begin_drain()
    assert await probe() == (503, 200, 200)  # draining
    controller.mark_broken("model worker died")
    assert await probe() == (503, 503, 200)
    stats = controller.statistics()
    assert stats.admitted == 0
    assert stats.rejected_while_draining == 0


async def test_drain_deadline_cuts_an_open_stream_with_a_final_event(
    exchange: Any, sse: Any
) -> None:
    """At the deadline the stream gets `event: cut` and a clean end, and is counted."""
    controller = DrainController(drain_timeout=0.2)
    controller.mark_started()
    app = DrainMiddleware(DemoApp(), controller)
    stream = exchange(app, "/stream?tokens=1000&pace=0.01", headers={"X-Request-ID": "cut-me"})
    async with anyio.create_task_group() as tg:
        tg.start_soon(stream.run)
        with anyio.fail_after(2):
            await stream.wait_chunks(2)
        controller.begin_drain()
        with anyio.fail_after(3):
            assert await controller.wait_drained() is True
    events = sse(stream.body)
    assert events[0][0] == "token"
    assert events[-1] == ("cut", {"reason": "drain-deadline", "request_id": "cut-me"})
    assert stream.complete  # ended cleanly (final frame), not torn down
    stats = controller.statistics()
    assert (stats.cut_at_deadline, stats.completed, stats.in_flight) == (1, 0, 0)
    assert stats.drain_duration is not None
    assert 0.15 < stats.drain_duration < 2


async def test_deadline_before_any_byte_answers_a_retryable_503(exchange: Any) -> None:
    """A request still computing at the deadline gets 503 + Retry-After, not a torn socket."""
    controller = DrainController(drain_timeout=0.1)
    controller.mark_started()
    app = DrainMiddleware(DemoApp(), controller, retry_after=3)
    slow = exchange(app, "/long?seconds=30")
    async with anyio.create_task_group() as tg:
        tg.start_soon(slow.run)
        await anyio.sleep(0.02)
        controller.begin_drain()
    assert slow.status == 503
    assert slow.headers[b"retry-after"] == b"3"
    assert json.loads(slow.body)["error"] == "drain-deadline"
    assert controller.statistics().cut_at_deadline == 1


async def test_responses_started_during_drain_close_the_connection(
    controller: DrainController, demo: DrainMiddleware, exchange: Any
) -> None:
    """Admitted before, answered during the drain: Connection: close sends keep-alive clients away."""
    slow = exchange(demo, "/long?seconds=0.1")
    async with anyio.create_task_group() as tg:
        tg.start_soon(slow.run)
        await anyio.sleep(0.02)
        controller.begin_drain()
    assert slow.status == 200
    assert slow.headers[b"connection"] == b"close"


async def test_app_errors_propagate_and_count_as_failed(
    controller: DrainController, exchange: Any
) -> None:
    """The server still sees the app's exception; the request is released as failed."""

    async def broken(scope: Any, receive: Any, send: Any) -> None:
        raise RuntimeError("model exploded")

    with pytest.raises(RuntimeError, match="model exploded"):
        await exchange(DrainMiddleware(broken, controller), "/x").run()
    stats = controller.statistics()
    assert (stats.failed, stats.in_flight) == (1, 0)


async def test_lifespan_passes_through(controller: DrainController) -> None:
    """Lifespan messages reach the app unchanged and count as no work."""
    inbox = [{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}]
    outbox: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return inbox.pop(0)

    async def send(message: dict[str, Any]) -> None:
        outbox.append(message)

    await DrainMiddleware(DemoApp(), controller)({"type": "lifespan"}, receive, send)
    assert [m["type"] for m in outbox] == [
        "lifespan.startup.complete",
        "lifespan.shutdown.complete",
    ]
    assert controller.statistics().admitted == 0


async def test_outcomes_add_up(
    controller: DrainController, demo: DrainMiddleware, exchange: Any
) -> None:
    """admitted == completed + cut + disconnected + failed + in_flight."""
    for _ in range(3):
        await exchange(demo, "/short").run()
    stats = controller.statistics()
    ended = stats.completed + stats.cut_at_deadline + stats.client_disconnected + stats.failed
    assert stats.admitted == ended + stats.in_flight == 3
