"""The second Docker daemon the remote-engine and fleet tests run against (``ci/remote-docker.sh``):
on TCP with TLS, in its own network namespace, its containers' addresses unreachable from here.

Without it the tests skip, naming the script; with ``remote-docker`` in
``ASYNCDEPLOY_REQUIRE_ENGINES`` (CI) they fail instead.
"""

from __future__ import annotations

import errno
import os
import shutil
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import attrs
import httpx
import pytest

from asyncdeploy import WorkloadPlan
from tests.engines.conftest import PAUSE, RUN_ID, RUN_LABEL, required_engines

HOST_VARIABLE = "ASYNCDEPLOY_TEST_REMOTE_DOCKER_HOST"
CERTS_VARIABLE = "ASYNCDEPLOY_TEST_REMOTE_DOCKER_CERT_PATH"
DEMO = "localhost/asyncdeploy/demo:latest"


@attrs.frozen
class Remote:
    host: str  # tcp://ADDRESS:2376
    certs: str  # ca.pem, cert.pem, key.pem

    @property
    def address(self) -> str:
        """The daemon host's address: where its published ports are reached from here."""
        return str(urlsplit(self.host).hostname)

    def environment(self) -> dict[str, str]:
        """Docker's own variables naming it."""
        return {"DOCKER_HOST": self.host, "DOCKER_TLS_VERIFY": "1", "DOCKER_CERT_PATH": self.certs}


def remote_daemon() -> Remote:
    host, certs = os.environ.get(HOST_VARIABLE), os.environ.get(CERTS_VARIABLE)
    if not host or not certs:
        why = f"no remote Docker daemon ({HOST_VARIABLE}): run `bash ci/remote-docker.sh`"
        if "remote-docker" in required_engines():
            pytest.fail(why)
        pytest.skip(why)
    return Remote(host=host, certs=certs)


def demo_plan(name: str, remote: Remote, **fields: Any) -> WorkloadPlan:
    """The kit's demo server, published on the daemon host's address (an engine-picked port),
    ready when ``/ready`` answers inside the container: an exec check, which the engine runs,
    so no connection from here to the container's address is needed."""
    ready = "import urllib.request as u; u.urlopen('http://127.0.0.1:8080/ready', timeout=2)"
    return WorkloadPlan.from_mapping(
        {
            "name": name,
            "labels": {RUN_LABEL: RUN_ID},
            "pause_image": PAUSE,
            "termination_grace_period_seconds": 20,
            "containers": [
                {
                    "name": "server",
                    "image": DEMO,
                    # new requests get 503 from the stop signal on, those in flight finish
                    "command": [
                        *("python3", "-m", "asyncdeploy.workload.demo", "--port", "8080"),
                        "--refuse-at-once",
                    ],
                    "ports": [{"container_port": 8080, "host_ip": remote.address}],
                    "checks": {
                        "readiness": {"exec": ["python3", "-c", ready], "period_seconds": 1}
                    },
                }
            ],
            **fields,
        }
    )


class Traffic:
    """Clients of the demo server, each until its first refusal (a 503 with Retry-After, or a
    refused connection), or until the workload was signalled (``signalled``): as a balancer
    that takes the server out then, none sends a request once its answer came after the stop
    signal; anything else that is not a whole 200 is a loss."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.counts: Counter[str] = Counter()
        self.lost: list[str] = []
        self.signalled = False

    def _count(self, outcome: str, detail: str = "") -> bool:
        self.counts[outcome] += 1
        if outcome == "lost":
            self.lost.append(detail)
        return outcome == "ok"

    async def one(self, client: httpx.AsyncClient, path: str) -> bool:
        try:
            response = await client.get(f"{self.base}{path}")
        except httpx.ConnectError as exc:
            refused = _refused(exc)
            return self._count("refused" if refused else "lost", f"{path}: {exc!r}")
        except httpx.HTTPError as exc:
            return self._count("lost", f"{path}: {exc!r}")
        if response.status_code == 503 and "retry-after" in response.headers:
            return self._count("refused")
        if response.status_code != 200:
            return self._count("lost", f"{path}: {response.status_code} {response.text[:80]}")
        return self._count("ok")

    async def loop(self, path: str) -> None:
        async with httpx.AsyncClient(timeout=httpx.Timeout(30.0)) as client:
            while not self.signalled:
                if not await self.one(client, path):
                    return
                await anyio.sleep(0.05)


def _refused(exc: BaseException) -> bool:
    cause: BaseException | None = exc
    while cause is not None:
        if (
            isinstance(cause, ConnectionRefusedError)
            or getattr(cause, "errno", 0) == errno.ECONNREFUSED
        ):
            return True
        cause = cause.__cause__ or cause.__context__
    return False


def published(ports: Any, container_port: int) -> int:
    return next(int(p.host_port) for p in ports if p.container_port == container_port)


def without(environ: Mapping[str, str], *names: str) -> dict[str, str]:
    return {k: v for k, v in environ.items() if k not in names}


async def docker_context(
    remote: Remote, home: Path, name: str = "far"
) -> tuple[str, dict[str, str]]:
    """A docker context ``name`` for the remote daemon, made by the real docker CLI under
    ``home`` (its endpoint and TLS files); the docker CLI and an environment naming no engine
    but that ``HOME``. Skips without a docker CLI."""
    docker = shutil.which("docker")
    if docker is None:
        pytest.skip("no docker CLI to make the context with")
    env = without(os.environ, "DOCKER_HOST", "DOCKER_CONTEXT", "DOCKER_TLS_VERIFY",
                  "DOCKER_CERT_PATH", "ASYNCDEPLOY_DRIVER")  # fmt: skip
    env["HOME"] = str(home)
    certs = Path(remote.certs)
    endpoint = (
        f"host={remote.host},ca={certs / 'ca.pem'},cert={certs / 'cert.pem'},"
        f"key={certs / 'key.pem'}"
    )
    await anyio.run_process([docker, "context", "create", name, "--docker", endpoint], env=env)
    return docker, env
