"""A real LLM server behind the drain gate, on real Docker and Podman (issue 22 item 5).

llama.cpp's ``llama-server`` as published (``ci/build-llama-image.sh``; the model is mounted
read-only) in two gated workloads behind a stock HAProxy that does not retry, with the clients
OpenAI SDK users have (keep-alive pools, HTTP/1.1, streamed and short
``POST /v1/chat/completions``): one workload deleted or replaced loses nothing, and every stream
ends with ``data: [DONE]``. The control, the same engine published without its gate, loses
requests: the test can see a loss. ``tests/engines/llama.py`` has the clients and the run.
"""

from __future__ import annotations

import pytest

from asyncdeploy import Deployer
from asyncdeploy.verify._ports import free_port
from tests.engines.conftest import PAUSE, RUN_ID, RUN_LABEL
from tests.engines.llama import (
    assert_nothing_lost,
    back_to_back,
    llama_plan,
    require_image,
    serve_and_disrupt,
)

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
    assert any(e.server == served.drained and e.ended > served.drain_started for e in lost), (
        served.report()
    )
