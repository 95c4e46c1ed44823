"""OpenAI-style clients against a real LLM server, and one run: two copies of a plan behind a
stock HAProxy (no retry), one deleted or replaced under the clients' traffic
(``tests/engines/llama.py`` has the server: its image, model and plan).

The clients behave as OpenAI SDK users' do: one pooled ``httpx.AsyncClient`` (what the OpenAI
SDK is built on; HTTP/1.1, connections kept alive and reused) sends streamed
``POST /v1/chat/completions``, and an ``aiohttp.ClientSession`` with its default keep-alive
connector sends short non-streamed ones. Nothing retries, and nothing is allowed to fail: a
request is ``ok`` only as a 200 with its whole answer (a stream: ending with ``data: [DONE]``);
a 502, a 503, a reset, a truncated stream or a timeout is a loss, whoever answered it.

With ``sdk=True`` the clients *are* the OpenAI Python SDK (``openai.AsyncOpenAI``, one client with
its default keep-alive pool, ``max_retries=0`` so that nothing is hidden): streamed and short
``chat.completions.create`` calls; a stream is whole when its last chunk carries a
``finish_reason`` (the SDK ends a stream at ``data: [DONE]`` and raises on a cut or an error).
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

import aiohttp
import anyio
import attrs
import httpx
import openai

from asyncdeploy import Deployer, DrainEvent, WorkloadPlan
from asyncdeploy._events import DrainFinished, DrainStarted
from asyncdeploy.verify.balancer import SERVED_BY_HEADER, ServerState, running_haproxy
from tests.engines.llama import CHECKS

logger = logging.getLogger(__name__)

# Short answers: ~0.3 s alone. On this 2-core machine shared by other runs (load 15-25) an engine
# got 6 % of a core and 32-token streams outlasted a 15 s drain deadline: keep them short.
STREAM_TOKENS = 16
STREAMS = 4  # concurrent streamed chat completions, one pooled client
SHORTS = 2  # concurrent short (non-streamed, 2-token) chat completions, one pooled session


# --- the clients ------------------------------------------------------------------------------


@attrs.frozen
class Exchange:
    kind: str  # "stream" or "short"
    started: float  # wall clock
    ended: float
    ok: bool
    server: str  # the HAProxy server that answered ("" when no answer came)
    detail: str = ""


def _prompt(stream: bool, tokens: int) -> dict[str, Any]:
    return {
        "model": "SmolLM2-135M-Instruct",
        "messages": [{"role": "user", "content": "Name the planets of the solar system."}],
        "max_tokens": tokens,
        "stream": stream,
    }


@attrs.define
class ChatClients:
    """OpenAI-style clients against ``base_url`` until ``stop``; every exchange recorded."""

    base_url: str
    #: the OpenAI SDK for every call (else httpx for streams, aiohttp for short ones)
    sdk: bool = False
    stop: anyio.Event = attrs.field(factory=anyio.Event)
    exchanges: list[Exchange] = attrs.field(factory=list)
    # the server of each stream answering now (its head arrived, its end not yet)
    streaming: dict[int, str] = attrs.field(factory=dict)
    _stream_began: anyio.Event = attrs.field(factory=anyio.Event)

    async def streaming_on(self, server: str, timeout: float = 60) -> None:
        """Return once a stream is being answered by ``server``: a drain begun then has one
        to hold to its last byte."""
        with anyio.fail_after(timeout):
            while server not in self.streaming.values():
                await self._stream_began.wait()

    def _begin_stream(self, key: int, server: str) -> None:
        self.streaming[key] = server
        self._stream_began.set()
        self._stream_began = anyio.Event()

    def failures(self) -> list[Exchange]:
        return [e for e in self.exchanges if not e.ok]

    def counts(self) -> Counter[str]:
        return Counter(f"{e.kind} {'ok' if e.ok else 'lost'}" for e in self.exchanges)

    def _record(self, kind: str, started: float, ok: bool, server: str, detail: str = "") -> None:
        self.exchanges.append(Exchange(kind, started, time.time(), ok, server, detail))

    async def _stream_once(self, client: httpx.AsyncClient) -> None:
        started, server, chunks, done = time.time(), "", 0, False
        try:
            async with client.stream(
                "POST", "/v1/chat/completions", json=_prompt(True, STREAM_TOKENS)
            ) as response:
                server = response.headers.get(SERVED_BY_HEADER, "")
                if response.status_code != 200:
                    body = (await response.aread())[:120].decode(errors="replace")
                    self._record("stream", started, False, server, f"{response.status_code} {body}")
                    return
                self._begin_stream(id(response), server)
                try:
                    async for line in response.aiter_lines():
                        if line == "data: [DONE]":
                            done = True
                        elif line.startswith("data: {"):
                            chunks += 1
                finally:
                    del self.streaming[id(response)]
        except httpx.HTTPError as exc:
            self._record("stream", started, False, server, f"after {chunks} chunks: {exc!r}")
            return
        if not done or chunks == 0:
            self._record("stream", started, False, server, f"{chunks} chunks, no [DONE]")
            return
        self._record("stream", started, True, server)

    async def _short_once(self, session: aiohttp.ClientSession) -> None:
        started, server = time.time(), ""
        try:
            async with session.post(
                f"{self.base_url}/v1/chat/completions", json=_prompt(False, 2)
            ) as response:
                server = response.headers.get(SERVED_BY_HEADER, "")
                body = await response.read()
                if response.status != 200:
                    detail = f"{response.status} {body[:120].decode(errors='replace')}"
                    self._record("short", started, False, server, detail)
                    return
                if json.loads(body).get("object") != "chat.completion":
                    self._record(
                        "short", started, False, server, f"not a chat completion: {body!r}"
                    )
                    return
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            self._record("short", started, False, server, repr(exc))
            return
        self._record("short", started, True, server)

    async def _sdk_stream_once(self, client: openai.AsyncOpenAI) -> None:
        started, server, chunks, finish = time.time(), "", 0, None
        try:
            raw = await client.chat.completions.with_raw_response.create(
                **_prompt(True, STREAM_TOKENS)
            )
            server = raw.headers.get(SERVED_BY_HEADER, "")
            stream = raw.parse()
            self._begin_stream(id(stream), server)
            try:
                async for chunk in stream:
                    chunks += 1
                    if chunk.choices and chunk.choices[0].finish_reason is not None:
                        finish = chunk.choices[0].finish_reason
            finally:
                del self.streaming[id(stream)]
        except openai.APIStatusError as exc:
            server = exc.response.headers.get(SERVED_BY_HEADER, "")
            self._record("stream", started, False, server, f"{exc.status_code} {exc.message}")
            return
        except openai.APIError as exc:
            self._record("stream", started, False, server, f"after {chunks} chunks: {exc!r}")
            return
        if finish is None:
            self._record("stream", started, False, server, f"{chunks} chunks, no finish_reason")
            return
        self._record("stream", started, True, server)

    async def _sdk_short_once(self, client: openai.AsyncOpenAI) -> None:
        started, server = time.time(), ""
        try:
            raw = await client.chat.completions.with_raw_response.create(**_prompt(False, 2))
            server = raw.headers.get(SERVED_BY_HEADER, "")
            completion = raw.parse()
        except openai.APIStatusError as exc:
            server = exc.response.headers.get(SERVED_BY_HEADER, "")
            self._record("short", started, False, server, f"{exc.status_code} {exc.message}")
            return
        except openai.APIError as exc:
            self._record("short", started, False, server, repr(exc))
            return
        if completion.object != "chat.completion" or not completion.choices:
            self._record("short", started, False, server, f"not a chat completion: {completion}")
            return
        self._record("short", started, True, server)

    async def _sdk_calls(self) -> None:
        # what an application does: one client, its default pool (keep-alive), no retry
        async with openai.AsyncOpenAI(
            base_url=f"{self.base_url}/v1", api_key="sk-unused", max_retries=0, timeout=30.0
        ) as client:

            async def streams() -> None:
                while not self.stop.is_set():
                    await self._sdk_stream_once(client)

            async def shorts() -> None:
                while not self.stop.is_set():
                    await self._sdk_short_once(client)
                    await anyio.sleep(0.1)

            async with anyio.create_task_group() as tg:
                for _ in range(STREAMS):
                    tg.start_soon(streams)
                for _ in range(SHORTS):
                    tg.start_soon(shorts)

    async def _streams(self) -> None:
        # the OpenAI SDK's transport: one pooled client for the application, keep-alive
        limits = httpx.Limits(max_connections=STREAMS, max_keepalive_connections=STREAMS)
        async with httpx.AsyncClient(
            base_url=self.base_url, limits=limits, timeout=httpx.Timeout(30.0)
        ) as client:

            async def loop() -> None:
                while not self.stop.is_set():
                    await self._stream_once(client)

            async with anyio.create_task_group() as tg:
                for _ in range(STREAMS):
                    tg.start_soon(loop)

    async def _shorts(self) -> None:
        connector = aiohttp.TCPConnector(limit=SHORTS)  # keep-alive, aiohttp's default
        timeout = aiohttp.ClientTimeout(total=30)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

            async def loop() -> None:
                while not self.stop.is_set():
                    await self._short_once(session)
                    await anyio.sleep(0.1)

            async with anyio.create_task_group() as tg:
                for _ in range(SHORTS):
                    tg.start_soon(loop)

    async def run(self) -> None:
        """Until ``stop``; every request sent has ended when this returns."""
        if self.sdk:
            await self._sdk_calls()
            return
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._streams)
            tg.start_soon(self._shorts)


async def back_to_back(
    base_url: str, count: int, *, all_streamed: bool = False
) -> tuple[list[str], set[object]]:
    """``count`` chat completions one after the other on one kept-alive connection (an OpenAI
    client making its calls in turn), two streamed, one short, and so on: each answer's outcome
    ("ok" or what went wrong), and the client ports the answers came on (one: the connection
    was reused every time). Two tokens each: llama-server closes its connection at a stream's
    end, whatever the stream's length, and a longer one only costs the machine's CPU."""
    outcomes: list[str] = []
    ports: set[object] = set()
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    async with httpx.AsyncClient(base_url=base_url, limits=limits, timeout=30) as client:
        for i in range(count):
            stream = all_streamed or i % 3 != 2
            try:
                async with client.stream(
                    "POST", "/v1/chat/completions", json=_prompt(stream, 2)
                ) as response:
                    ports.add(response.extensions["network_stream"].get_extra_info("client_addr"))
                    lines = [line async for line in response.aiter_lines() if line]
            except httpx.HTTPError as exc:
                outcomes.append(repr(exc))
                continue
            if response.status_code != 200:
                outcomes.append(f"{response.status_code} {' '.join(lines)[:80]}")
            elif stream and (not lines or lines[-1] != "data: [DONE]"):
                outcomes.append(f"stream without [DONE]: {lines[-2:]}")
            elif not stream and json.loads("".join(lines))["object"] != "chat.completion":
                outcomes.append(f"not a chat completion: {lines}")
            else:
                outcomes.append("ok")
    return outcomes, ports


# --- one run: two copies behind HAProxy, one deleted or replaced --------------------------------


@attrs.frozen
class Served:
    """What one run saw: every exchange, the drain's events, HAProxy's server states."""

    clients: ChatClients
    events: tuple[DrainEvent, ...]
    drained: str
    successor: str | None
    drain_started: float
    states: tuple[ServerState, ...]

    def report(self) -> str:
        """Counts, the lost exchanges and HAProxy's view, in seconds from the drain's start."""
        at = self.drain_started
        lost = "\n".join(
            f"  {e.kind} on {e.server or '?'} at {e.started - at:+.2f} s: {e.detail}"
            for e in self.clients.failures()[:20]
        )
        states = ", ".join(f"{s.server} {s.status} {s.at - at:+.2f}" for s in self.states)
        return f"{dict(self.clients.counts())}\nlost:\n{lost}\nhaproxy: {states}"

    def in_flight_at_drain(self) -> list[Exchange]:
        """Exchanges the drained copy was serving when its drain began."""
        return [
            e
            for e in self.clients.exchanges
            if e.server == self.drained and e.started < self.drain_started < e.ended
        ]


async def serve_and_disrupt(
    deployer: Deployer,
    plans: Sequence[tuple[WorkloadPlan, int]],
    successor: tuple[WorkloadPlan, int] | None,
    *,
    check_path: str,
    ready_timeout: float = 120,
    warmup: float = 3.0,
    after: float = 2.0,
    sdk: bool = False,
) -> Served:
    """Create ``plans`` (each with its published port), put them behind HAProxy, send the
    clients through it, then delete the first (``successor`` None) or replace it by
    ``successor`` (ready and in the pool before the old one drains), and keep sending ``after``
    seconds more. ``sdk``: the clients are the OpenAI SDK. Nothing is removed here: the caller's fixture removes what the run left."""
    for plan, _ in plans:
        await deployer.create(plan)
    for plan, _ in plans:
        await deployer.wait_ready(plan.name, timeout=ready_timeout)
    declared = [(p.name, port) for p, port in [*plans, *([successor] if successor else [])]]
    options = attrs.evolve(CHECKS, check_path=check_path)
    drained = plans[0][0].name
    events: list[DrainEvent] = []
    async with running_haproxy(declared, options) as haproxy:
        for plan, _ in plans:
            await haproxy.enable(plan.name, timeout=60)
        clients = ChatClients(haproxy.base_url, sdk=sdk)
        with anyio.fail_after(240):
            async with anyio.create_task_group() as tg:
                tg.start_soon(haproxy.watch)

                async def traffic() -> None:
                    await clients.run()
                    tg.cancel_scope.cancel()  # every request ended: stop watching

                tg.start_soon(traffic)
                await anyio.sleep(warmup)  # connections kept alive and reused before the drain
                if successor is None:
                    await clients.streaming_on(drained)
                    async with deployer.terminate(drained) as stream:
                        events.extend([e async for e in stream])
                else:
                    new, _ = successor

                    async def route_to_new(_: object) -> None:
                        await haproxy.enable(new.name, timeout=60)
                        await clients.streaming_on(drained)  # the old one's drain begins next

                    async with deployer.replacing(
                        new,
                        old=[drained],
                        new_name=new.name,
                        ready_timeout=ready_timeout,
                        on_ready=route_to_new,
                    ) as replacement:
                        assert replacement.strategy == "surge", replacement
                        events.extend([e async for e in replacement.events])
                await anyio.sleep(after)  # the copy left keeps serving
                clients.stop.set()
        states = tuple(haproxy.states)
    started = next(e for e in events if isinstance(e, DrainStarted))
    drain_started = started.deadline - started.grace_period_seconds  # wall clock
    served = Served(
        clients=clients,
        events=tuple(events),
        drained=drained,
        successor=None if successor is None else successor[0].name,
        drain_started=drain_started,
        states=states,
    )
    logger.info(f"{deployer.driver_name}: {served.report()}")
    return served


def assert_nothing_lost(served: Served) -> None:
    """Every exchange whole, both copies served, the drained one with streams in flight when
    its drain began (else the run tested nothing), its drain without a kill."""
    clients = served.clients
    assert clients.failures() == [], served.report()
    counts = clients.counts()
    # a run that did something (under load 20 on the 2 shared cores, 7 streams were seen whole)
    assert counts["stream ok"] >= 5 and counts["short ok"] >= 5, served.report()
    servers = Counter(e.server for e in clients.exchanges)
    assert servers[served.drained] >= 3, (servers, served.report())
    assert len(servers) >= 2, servers
    if served.successor is not None:
        assert servers[served.successor] >= 1, ("the successor took traffic", servers)
    in_flight = served.in_flight_at_drain()
    assert any(e.kind == "stream" for e in in_flight), (
        "the drain must begin with streams in flight on the drained copy",
        served.report(),
    )
    summaries = [e.summary for e in served.events if isinstance(e, DrainFinished)]
    assert summaries, [type(e).__name__ for e in served.events]
    for summary in summaries:
        outcomes = {c.name: c.outcome for c in summary.containers}
        assert "killed" not in outcomes.values(), outcomes
