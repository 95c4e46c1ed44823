"""The bench's side of the peer: gpustack-runtime's worker process (``peer.py``) in its own venv."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import anyio
import attrs
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream
from common import ENGINE_URLS, HERE, PEER_TIMEOUT
from raw import PEER_PAUSE

__all__ = ["Peer", "peer_install_problem"]


@attrs.define
class Peer:
    """gpustack-runtime in its own venv, one long-lived worker process per engine."""

    process: Process
    stdout: BufferedByteReceiveStream
    hello: dict[str, Any]
    stderr_path: Path

    @classmethod
    async def start(cls, python: str, engine: str, url: str, stderr_path: Path) -> Peer:
        env = {
            **os.environ,
            "GPUSTACK_RUNTIME_DEPLOY": engine,
            "GPUSTACK_RUNTIME_DOCKER_HOST": ENGINE_URLS["docker"] if engine != "docker" else url,
            "GPUSTACK_RUNTIME_PODMAN_HOST": url if engine == "podman" else ENGINE_URLS["podman"],
            "CONTAINER_HOST": url if engine == "podman" else ENGINE_URLS["podman"],
            "GPUSTACK_RUNTIME_DEPLOY_IMAGE_PULL_POLICY": "IfNotPresent",
            "PYTHONUNBUFFERED": "1",
        }
        for kind in ("DOCKER", "PODMAN"):
            for image in ("PAUSE", "UNHEALTHY_RESTART"):
                env[f"GPUSTACK_RUNTIME_{kind}_{image}_IMAGE"] = PEER_PAUSE
        stderr_path.parent.mkdir(parents=True, exist_ok=True)
        with stderr_path.open("ab") as stderr:
            process = await anyio.open_process(
                [python, str(HERE / "peer.py")], env=env, stderr=stderr
            )
        assert process.stdout is not None
        peer = cls(process, BufferedByteReceiveStream(process.stdout), {}, stderr_path)
        peer.hello = await peer.call({"op": "hello"}, timeout=60)
        return peer

    @property
    def dead(self) -> bool:
        return self.process.returncode is not None

    async def call(self, request: dict[str, Any], *, timeout: float = PEER_TIMEOUT) -> Any:
        assert self.process.stdin is not None
        with anyio.fail_after(timeout):
            await self.process.stdin.send((json.dumps(request) + "\n").encode())
            line = await self.stdout.receive_until(b"\n", 1 << 20)
        answer = json.loads(line)
        if not answer.get("ok"):
            raise RuntimeError(
                f"peer {request['op']}: {answer.get('error')} ({answer.get('cause')})"
            )
        return answer

    async def close(self) -> None:
        with anyio.CancelScope(shield=True):
            if self.process.stdin is not None:
                await self.process.stdin.aclose()
            with anyio.move_on_after(10):
                await self.process.wait()
            if self.process.returncode is None:
                self.process.kill()
                await self.process.wait()


def peer_install_problem(python: str) -> str | None:
    """Why the peer cannot run (None when it can)."""
    if not Path(python).exists():
        return f"no peer venv python at {python} (nox -s bench creates it)"
    probe = subprocess.run(
        [python, "-c", "import gpustack_runtime, docker, podman"],
        capture_output=True,
        text=True,
        check=False,
    )
    if probe.returncode != 0:
        lines = probe.stderr.strip().splitlines()
        return f"gpustack-runtime does not import in {python}: {lines[-1] if lines else '?'}"
    return None
