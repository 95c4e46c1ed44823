"""Real-engine fixtures: one deployer per engine, every workload labelled with the run's id.

An engine that does not answer skips its tests, unless ``ASYNCDEPLOY_REQUIRE_ENGINES`` names it
(CI sets ``docker,podman``): then the test fails, so a suite never vanishes silently.
"""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import anyio
import pytest

from asyncdeploy import Deployer, EngineUnavailable, open_deployer

BUSYBOX = "asyncdeploy-test/busybox:latest"
PYTHON = "asyncdeploy-test/python:latest"
PAUSE = "asyncdeploy-test/pause:latest"
RUN_ID = secrets.token_hex(3)
RUN_LABEL = "asyncdeploy-test-run"

ENGINES = [
    pytest.param("docker", marks=[pytest.mark.docker, pytest.mark.engine]),
    pytest.param("podman", marks=[pytest.mark.podman, pytest.mark.engine]),
]
# Rootless Podman (ci/start-rootless-podman.sh prints the variable): a non-root user's own
# service, its containers behind slirp4netns where this host cannot reach their addresses.
# Added by the files that run on it; required where ASYNCDEPLOY_REQUIRE_ENGINES names it.
ROOTLESS_PODMAN_VARIABLE = "ASYNCDEPLOY_TEST_ROOTLESS_PODMAN"
ROOTLESS_PODMAN = pytest.param("podman-rootless", marks=[pytest.mark.podman, pytest.mark.engine])


def required_engines() -> set[str]:
    return {e for e in os.environ.get("ASYNCDEPLOY_REQUIRE_ENGINES", "").split(",") if e}


def rootless_url(engine: str) -> str | None:
    """Rootless Podman's socket for ``podman-rootless`` (None for the others); skips, or fails
    where required, when the set-up did not run."""
    if engine != "podman-rootless":
        return None
    url = os.environ.get(ROOTLESS_PODMAN_VARIABLE)
    if not url and engine in required_engines():
        pytest.fail(f"{engine} is required but {ROOTLESS_PODMAN_VARIABLE} is not set")
    if not url:
        pytest.skip(f"no rootless Podman: {ROOTLESS_PODMAN_VARIABLE} (ci/start-rootless-podman.sh)")
    return url


async def open_engine(engine: str) -> AsyncIterator[Deployer]:
    """A deployer on a real engine (for a fixture to ``async for`` over); what the test leaves
    behind is removed at once afterwards. An engine that does not answer skips, or fails the test
    where it is required."""
    url = rootless_url(engine)
    try:
        opening = open_deployer("podman", url=url) if url else open_deployer(engine)  # type: ignore[arg-type]
        async with opening as opened:
            yield opened
            with anyio.CancelScope(shield=True):
                await opened.delete_all({RUN_LABEL: RUN_ID}, grace_period_seconds=0)
    except EngineUnavailable as exc:
        if engine in required_engines():
            pytest.fail(f"{engine} is required but does not answer: {exc}")
        pytest.skip(f"{engine} does not answer: {exc}")


@pytest.fixture(params=ENGINES)
async def deployer(request: pytest.FixtureRequest) -> AsyncIterator[Deployer]:
    """A deployer on each real engine."""
    async for opened in open_engine(request.param):
        yield opened


@pytest.fixture
def name() -> Callable[[str], str]:
    """Unique workload names for this run."""

    def make(short: str) -> str:
        return f"t{RUN_ID}-{short}-{secrets.token_hex(2)}"

    return make


@pytest.fixture
def markers() -> Iterator[Path]:
    """A host directory the test containers write their markers into (mounted on /out): under
    /tmp itself, not pytest's own 0700 directory, where rootless Podman's user reaches it."""
    made = Path(tempfile.mkdtemp(prefix=f"asyncdeploy-markers-{RUN_ID}-"))
    made.chmod(0o777)
    yield made
    shutil.rmtree(made, ignore_errors=True)
