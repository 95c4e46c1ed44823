"""The kit's recipe, run as written: it reaches SERVING, serves, and drains.

The program is read from README.md when a section there is marked ``<!-- snippet: kit-recipe
-->``, else from docs/server-kit.md (the server kit's page).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import httpx
import pytest
from anyio.abc import Process

import asyncdeploy
from asyncdeploy.verify._ports import free_port

pytestmark = pytest.mark.anyio

_ROOT = Path(asyncdeploy.__file__).resolve().parent.parent
_MARKER = "<!-- snippet: kit-recipe -->"
#: Where the recipe may live, first marked one wins: the README, then the server kit's page.
_DOCUMENTS = (_ROOT / "README.md", _ROOT / "docs" / "server-kit.md")
_ENV = {**os.environ, "PYTHONPATH": str(_ROOT), "PYTHONUNBUFFERED": "1"}
_DRAIN_CMD = [sys.executable, "-m", "asyncdeploy.workload.drain_cmd"]


def recipe() -> str:
    """The marked snippet: the ```python fence right after the marker's own line."""
    marker_line = re.compile(rf"^{re.escape(_MARKER)}$", re.MULTILINE)
    for document in _DOCUMENTS:
        text = document.read_text() if document.exists() else ""
        if found := marker_line.search(text):
            after = text[found.end() :]
            match = re.match(r"\s*```python\n(.*?)\n```", after, re.DOTALL)
            assert match, f"{document}: the marker must be right before a ```python fence"
            return match.group(1) + "\n"
    raise AssertionError(f"no {_MARKER} line in any of {[str(d) for d in _DOCUMENTS]}")


@asynccontextmanager
async def run_recipe(tmp_path: Path) -> AsyncIterator[tuple[Process, str, Path, Path]]:
    program = tmp_path / "app.py"
    program.write_text(recipe())
    sock = tmp_path / "run" / "control.sock"
    log = tmp_path / "app.log"
    port = free_port()
    env = {**_ENV, "PORT": str(port), "CONTROL_SOCKET": str(sock)}
    with log.open("wb") as out:
        process = await anyio.open_process(
            [sys.executable, str(program)], stdout=out, stderr=subprocess.STDOUT, env=env
        )
    try:
        yield process, f"http://127.0.0.1:{port}", sock, log
    finally:
        if process.returncode is None:
            process.kill()
        await process.wait()
        await process.aclose()


async def _until_ready(client: httpx.AsyncClient, process: Process, log: Path) -> None:
    with anyio.fail_after(15):
        while True:
            assert process.returncode is None, await anyio.Path(log).read_text()
            try:
                if (await client.get("/ready")).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            await anyio.sleep(0.1)


async def test_the_recipe_reaches_serving_and_drains_through_its_prestop_hook(
    tmp_path: Path,
) -> None:
    """As written: ready, serves, the preStop command drains it, SIGTERM ends it with 0."""
    async with run_recipe(tmp_path) as (process, base, sock, log):
        async with httpx.AsyncClient(base_url=base, trust_env=False, timeout=5) as client:
            await _until_ready(client, process, log)
            response = await client.get("/")
            assert (response.status_code, response.text) == (200, "hello\n")
            hook = await anyio.run_process(
                [
                    *_DRAIN_CMD,
                    "--socket",
                    str(sock),
                    "--propagation-wait",
                    "1s",
                    "--timeout",
                    "20s",
                ],
                env=_ENV,
                check=False,
            )
            assert hook.returncode == 0, (hook.stderr, log.read_text())
            report = json.loads(hook.stdout)
            assert report["drained"] and report["started_drain"], report
            assert (await client.get("/ready")).status_code == 503
            refused = await client.get("/")
            assert refused.status_code == 503 and "retry-after" in refused.headers
        process.send_signal(signal.SIGTERM)
        with anyio.fail_after(10):
            assert await process.wait() == 0, log.read_text()


async def test_the_recipe_drains_on_sigterm(tmp_path: Path) -> None:
    """With no hook, SIGTERM drains the same way and the program exits 0. The deployer's
    word that the server left every endpoint set (``traffic-left``, as the Kubernetes driver
    sends it) ends the window early, as it would in a cluster; without it the window runs to
    its 10 s (the demo's tests behind HAProxy show that)."""
    async with run_recipe(tmp_path) as (process, base, sock, log):
        async with httpx.AsyncClient(base_url=base, trust_env=False, timeout=5) as client:
            await _until_ready(client, process, log)
            process.send_signal(signal.SIGTERM)
            await anyio.sleep(0.2)
            assert (await client.get("/ready")).status_code == 503
            served = await client.get("/")  # inside the propagation window: still served
            assert served.status_code == 200
            told = await anyio.run_process(
                [*_DRAIN_CMD, "--socket", str(sock), "--traffic-left"], env=_ENV, check=False
            )
            assert told.returncode == 0, (told.stderr, log.read_text())
        with anyio.fail_after(20):
            assert await process.wait() == 0, log.read_text()
        assert not sock.exists()
