"""Nothing on the gate's data port changes its state: the drain and every control are on its
admin port, and there only with the workload's admin token.

Before, ``GET /-/drain?propagation_wait=0&timeout=0`` on the port clients reach drained a
replica for good (every later request a 503, ``/ready`` failing, ``/live`` 200: nothing
restarted it). On asyncio's own loop and on uvloop, as every gate test."""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator

import anyio
import httpx
import pytest

from asyncdeploy.gate import GateConfig, serve_gate
from asyncdeploy.gate.__main__ import _drain
from asyncdeploy.workload import DrainController, DrainState, PropagationWindow
from tests.workload.test_gate_proxy import (
    Gate,
    anyio_backend,
    engine,
    free_port,
    load_seconds,
    raw_exchange,
    until_ready,
)

__all__ = ["anyio_backend", "engine", "load_seconds"]  # fixtures shared with the gate's proxy tests

pytestmark = pytest.mark.anyio
TOKEN = "s3cret-token_for-this-workload"
DRAINS = [
    "/-/drain?propagation_wait=0&timeout=0",
    "/-/drain",
    "/-/status",
    "/-/drain/",
    "/-/DRAIN",
]


@pytest.fixture
async def gate(engine: subprocess.Popen[bytes]) -> AsyncIterator[Gate]:
    controller = DrainController(
        drain_timeout=10, propagation=PropagationWindow(max_seconds=0.5, quiet_seconds=0.2)
    )
    admin_port = free_port()
    config = GateConfig(
        listen_port=0,
        listen_host="127.0.0.1",
        upstream_port=engine.port,  # type: ignore[attr-defined]
        check_interval=0.1,
        admin_port=admin_port,
        admin_host="127.0.0.1",
        admin_token=TOKEN,
    )
    async with anyio.create_task_group() as tg:
        port = await tg.start(serve_gate, config, controller)
        yield Gate(port, admin_port, controller)
        tg.cancel_scope.cancel()


async def test_the_drain_trigger_on_the_data_port_is_refused_and_changes_nothing(
    gate: Gate,
) -> None:
    """GET, HEAD and POST of the kit's control paths on the port clients reach: 403, the
    gate still serving, ready, and relaying."""
    async with httpx.AsyncClient() as client:
        await until_ready(client, gate)
        for method in ("GET", "HEAD", "POST"):
            for path in DRAINS:
                answer = await client.request(method, f"{gate.url}{path}")
                assert answer.status_code in (403, 404), (method, path)
        # pipelined, and with the token: the data port takes no token at all
        flood = b"GET /-/drain?timeout=0&token=%s HTTP/1.1\r\nHost: g\r\n\r\n" % TOKEN.encode()
        last = b"GET /live HTTP/1.1\r\nHost: g\r\nConnection: close\r\n\r\n"
        answers = await raw_exchange(gate, flood * 5 + last)
        assert answers.count(b"HTTP/1.1 403 ") == 5
        assert gate.controller.state is DrainState.SERVING
        assert (await client.get(f"{gate.url}/ready")).status_code == 200
        assert (await client.get(f"{gate.url}/short")).json() == {"ok": True}
        assert (await client.get(f"{gate.url}/-/metrics")).status_code == 200  # read-only


async def test_the_admin_port_refuses_requests_without_the_token(gate: Gate) -> None:
    async with httpx.AsyncClient() as client:
        await until_ready(client, gate)
        for headers, query in [({}, ""), ({"x-asyncdeploy-token": "wrong"}, ""), ({}, "&token=")]:
            answer = await client.get(f"{gate.admin_url}/-/drain?timeout=0{query}", headers=headers)
            assert answer.status_code == 403
        assert await _drain(gate.admin_port, "0s", 1.0, "wrong") == 2
        assert gate.controller.state is DrainState.SERVING
        assert (await client.get(f"{gate.url}/ready")).status_code == 200


async def test_the_admin_port_speaks_the_kits_control_commands(gate: Gate) -> None:
    """``/-/status`` is the kit's ``status`` command; an unknown one is the kit's error; the
    drain hook (token in the query, as the kubelet sends it) drains and answers when done."""
    async with httpx.AsyncClient(headers={"x-asyncdeploy-token": TOKEN}) as client:
        await until_ready(client, gate)
        status = (await client.get(f"{gate.admin_url}/-/status")).json()
        assert status["ok"] is True and status["status"]["state"] == "serving"
        unknown = await client.get(f"{gate.admin_url}/-/reboot")
        assert unknown.status_code == 400 and "unknown command" in unknown.json()["error"]
        assert (await client.get(f"{gate.admin_url}/ready")).status_code == 404
    async with httpx.AsyncClient() as client:
        drained = await client.get(
            f"{gate.admin_url}/-/drain?propagation_wait=0.2s&timeout=10s&token={TOKEN}"
        )
        assert drained.status_code == 200 and drained.json()["drained"] is True
        assert gate.controller.state is DrainState.DRAINING
        assert (await client.get(f"{gate.url}/ready")).status_code == 503
    assert await _drain(gate.admin_port, "0s", 5.0, TOKEN) == 0  # the exec-hook command


async def test_without_a_token_the_admin_port_listens_on_loopback_only(
    engine: subprocess.Popen[bytes],
) -> None:
    """The gate run by hand (no token): its admin port is bound to 127.0.0.1, not 0.0.0.0."""
    admin_port = free_port()
    config = GateConfig(
        listen_port=0,
        listen_host="127.0.0.1",
        upstream_port=engine.port,
        admin_port=admin_port,  # type: ignore[attr-defined]
    )
    async with anyio.create_task_group() as tg:
        await tg.start(serve_gate, config, DrainController())
        listed = await anyio.run_process(["ss", "-Hltn", f"sport = :{admin_port}"])
        listening = listed.stdout.decode()
        assert f"127.0.0.1:{admin_port} " in listening
        assert f"0.0.0.0:{admin_port} " not in listening and f"*:{admin_port} " not in listening
        tg.cancel_scope.cancel()
