"""A real LLM server behind the drain gate, on real Docker and Podman (issue 22 item 5).

llama.cpp's ``llama-server`` as published (``ci/build-llama-image.sh``; the model is mounted
read-only) in two gated workloads behind a stock HAProxy that does not retry, with the clients
OpenAI SDK users have (keep-alive pools, HTTP/1.1, streamed and short
``POST /v1/chat/completions``): one workload deleted or replaced loses nothing, and every stream
ends with ``data: [DONE]``. The control, the same engine published without its gate, loses
requests: the test can see a loss. ``tests/engines/chat_clients.py`` has the clients and the run,
``tests/engines/llama.py`` the server.
"""

from __future__ import annotations

import httpx
import pytest
import yaml

from asyncdeploy import Deployer, WorkloadPlan
from asyncdeploy.drivers.engine._netcheck import tcp_open, workload_address
from asyncdeploy.verify._ports import free_port
from tests.engines.chat_clients import assert_nothing_lost, back_to_back, serve_and_disrupt
from tests.engines.conftest import PAUSE, RUN_ID, RUN_LABEL
from tests.engines.llama import (
    ENGINE_PORT,
    GATE_IMAGE,
    GATE_PORT,
    IMAGE,
    MODEL,
    REPO,
    listening_on,
    llama_plan,
    require_image,
)
from tests.engines.test_example_plans import for_this_run

pytestmark = pytest.mark.anyio


def _plans(deployer: Deployer, tag: str, *, gated: bool, count: int) -> list:  # type: ignore[type-arg]
    made = []
    for letter in "abn"[:count]:
        port = free_port()
        plan = llama_plan(
            f"t{RUN_ID}-{tag}-{deployer.driver_name[:3]}-{letter}",
            gated=gated,
            host_port=port,
            labels={RUN_LABEL: RUN_ID},
            extra={"pause_image": PAUSE},
        )
        made.append((plan, port))
    return made


async def test_back_to_back_chat_completions_on_one_kept_alive_connection_through_the_gate(
    deployer: Deployer,
) -> None:
    """Issue 22: an OpenAI client making its calls one after the other reuses its connection.
    llama-server closes its own after every streamed answer, although the answer's headers say
    ``Keep-Alive: timeout=5``; the gate must not pass the next POST to that closed connection.
    60 calls (40 streamed, 20 short) on one connection to the gate: every one whole. On main's
    gate 2 to 5 in 40 calls answered ``502 {"error":"engine unreachable"}`` here."""
    require_image(deployer.driver_name)
    ((plan, port),) = _plans(deployer, "llk", gated=True, count=1)
    await deployer.create(plan)
    await deployer.wait_ready(plan.name, timeout=120)
    outcomes, ports = await back_to_back(f"http://127.0.0.1:{port}", 60)
    assert [o for o in outcomes if o != "ok"] == [], outcomes
    assert len(ports) == 1, ports  # one connection, kept alive and reused


async def test_200_streamed_chat_completions_back_to_back_never_see_a_502(
    deployer: Deployer,
) -> None:
    """Issue 30: llama-server closes its connection after every streamed answer; the gate (on
    HAProxy) gives every request a fresh engine connection and never replays a POST: 200
    streamed POST /v1/chat/completions one after the other on one kept-alive client
    connection, every one whole, no 502."""
    require_image(deployer.driver_name)
    ((plan, port),) = _plans(deployer, "llb", gated=True, count=1)
    await deployer.create(plan)
    await deployer.wait_ready(plan.name, timeout=120)
    outcomes, ports = await back_to_back(f"http://127.0.0.1:{port}", 200, all_streamed=True)
    assert [o for o in outcomes if o != "ok"] == [], outcomes
    assert len(ports) == 1, ports


@pytest.mark.parametrize("mode", ["delete", "replace"])
async def test_keep_alive_chat_clients_lose_nothing_when_a_gated_llama_server_goes(
    deployer: Deployer, mode: str
) -> None:
    """Two gated llama-servers behind HAProxy (checks /ready on the gates, no retry), streamed
    and short chat completions from keep-alive pools; one copy deleted (or replaced by a third,
    ready and in the pool first): not one exchange lost, not one stream without [DONE], the
    drained copy had streams in flight when its drain began, nothing was killed.

    Fails on the gate of main before issue 22's keep-alive fix: llama-server closes its
    connection after every streamed answer (its headers promise keep-alive), the gate reuses
    that upstream connection for the next POST and answers ``502 engine unreachable``."""
    require_image(deployer.driver_name)
    *plans, successor = _plans(deployer, f"ll{mode[0]}", gated=True, count=3)
    served = await serve_and_disrupt(
        deployer, plans, successor if mode == "replace" else None, check_path="/ready"
    )
    assert_nothing_lost(served)


async def test_without_the_gate_the_same_delete_loses_requests(deployer: Deployer) -> None:
    """The control: the same engine published directly (on every interface, checked on its own
    /health by HAProxy and the deployer), the same clients and delete. llama-server stops
    generating at once on SIGTERM and leaves what is in flight hanging until it exits, so
    streams end without [DONE] or are cut, and what HAProxy still sends it fails."""
    require_image(deployer.driver_name)
    plans = _plans(deployer, "lln", gated=False, count=2)
    served = await serve_and_disrupt(deployer, plans, None, check_path="/health")
    lost = served.clients.failures()
    assert lost, served.report()
    # a stream cut before its head names no server (its client never saw HAProxy's header);
    # the delete's losses are those on the drained copy, or unnamed, after the drain began
    assert any(e.server in (served.drained, "") and e.ended > served.drain_started for e in lost), (
        served.report()
    )


@pytest.mark.parametrize("mode", ["delete", "replace"])
async def test_the_openai_sdk_loses_no_call_when_a_gated_llama_server_goes(
    deployer: Deployer, mode: str
) -> None:
    """Issue 30 item 8: the client people use, the OpenAI Python SDK (one ``AsyncOpenAI``, its
    default keep-alive pool, ``max_retries=0``), streamed and short chat completions through a
    stock HAProxy at its defaults (no retry) to two gated llama-servers; one deleted (or replaced
    by a third): 0 failed calls, every stream whole (its last chunk's ``finish_reason``), the
    drained copy streaming when its drain began, nothing killed."""
    require_image(deployer.driver_name)
    *plans, successor = _plans(deployer, f"lo{mode[0]}", gated=True, count=3)
    served = await serve_and_disrupt(
        deployer, plans, successor if mode == "replace" else None, check_path="/ready", sdk=True
    )
    assert_nothing_lost(served)


async def test_without_the_gate_the_openai_sdk_loses_calls(deployer: Deployer) -> None:
    """The control of the test above: the same SDK calls and delete, llama-server published
    directly (checked on its own /health): calls fail."""
    require_image(deployer.driver_name)
    plans = _plans(deployer, "lon", gated=False, count=2)
    served = await serve_and_disrupt(deployer, plans, None, check_path="/health", sdk=True)
    lost = served.clients.failures()
    assert lost, served.report()
    assert any(e.server in (served.drained, "") and e.ended > served.drain_started for e in lost), (
        served.report()
    )


# --- the example plan: the engine's own port on the workload's loopback (issue 22 item 7) ------

EXAMPLE = REPO / "examples" / "plans" / "llama-server.yaml"


def _example(driver: str, host: str | None) -> WorkloadPlan:
    """examples/plans/llama-server.yaml as written, but for the image (the same llama-server,
    built locally: the public one cannot be pulled here), the model (the cached GGUF for the
    example's /srv/models/model.gguf) and what a shared engine needs (a unique name, the run's
    label, an engine-chosen host port); ``host`` replaces the example's ``--host``."""
    name = f"t{RUN_ID}-ex-llama-{driver[:3]}-{host or 'lo'}".replace(".", "")
    document = for_this_run(yaml.safe_load(EXAMPLE.read_text()), name)
    (engine,) = document["containers"]
    engine["image"] = IMAGE
    engine["gate"]["image"] = GATE_IMAGE
    engine["mounts"] = [{"source": str(MODEL.parent), "target": "/models", "read_only": True}]
    args = engine["args"]
    args[args.index("-m") + 1] = f"/models/{MODEL.name}"
    if host is not None:
        args[args.index("--host") + 1] = host
    return WorkloadPlan.from_mapping(document)


@pytest.mark.parametrize("host", [None, "0.0.0.0"], ids=["as-written", "control-0.0.0.0"])
async def test_the_llama_server_example_keeps_the_engine_port_off_the_workloads_address(
    deployer: Deployer, host: str | None
) -> None:
    """The gated example as written: the gate serves on the published port, and llama-server's
    own port listens on the workload's loopback only, so a client that reaches the workload's
    address finds the gate (8000) and nothing on 8001. The control (``--host 0.0.0.0``, what the
    published image does without the flag) shows the check sees an engine port left open."""
    require_image(deployer.driver_name)
    plan = _example(deployer.driver_name, host)
    await deployer.create(plan)
    status = await deployer.wait_ready(plan.name, timeout=120)
    # the IPv4 one: Docker may give the IPv6 binding another host port
    [published_port] = [
        p.host_port for p in status.ports if p.container_port == GATE_PORT and ":" not in p.host_ip
    ]
    async with httpx.AsyncClient(timeout=30) as client:
        answer = await client.post(
            f"http://127.0.0.1:{published_port}/v1/chat/completions",
            json={"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2},
        )
    assert answer.status_code == 200 and answer.json()["object"] == "chat.completion"
    inspected = await deployer.inspect(plan.name)
    address = workload_address(inspected["containers"]["pause"])
    assert address is not None, inspected["containers"]["pause"].get("NetworkSettings")
    pid = inspected["containers"]["engine"]["State"]["Pid"]
    assert await tcp_open(address, GATE_PORT, 5), f"the gate on {address}:{GATE_PORT}"
    listens, reached = listening_on(pid, ENGINE_PORT), await tcp_open(address, ENGINE_PORT, 5)
    if host is None:
        assert (listens, reached) == ({"127.0.0.1"}, False), f"{address}:{ENGINE_PORT}"
    else:
        assert (listens, reached) == ({"0.0.0.0"}, True), f"{address}:{ENGINE_PORT}"
