"""Shared test settings: the anyio plugin on asyncio (aiohttp, under both SDKs, is asyncio-only),
virtual time by default (REAL_TIME: the files that need the real clock, and why), the markers that say what a test needs,
set from where the test lives, each test's time bound (tests/timeouts.py), and hypothesis'
profile."""

from __future__ import annotations

import asyncio
from fnmatch import fnmatch
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from tests import virtual_clock

# Property tests check what holds, not how fast: speed is measured in the benchmark, and a
# loaded machine must not fail an example for taking 287 ms against hypothesis' 200 ms.
settings.register_profile(
    "asyncdeploy", deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("asyncdeploy")

pytest_plugins = ["tests.timeouts", "pytester"]

TESTS = Path(__file__).resolve().parent
NEEDS: dict[str, tuple[str, ...]] = {
    "engines": ("engine",),  # real Docker and Podman (the params add docker / podman)
    "kubernetes/test_real_cluster*": ("cluster",),  # every real-cluster file
    "install": ("slow",),  # builds a fresh venv
    "unit/test_typing.py": ("slow",),  # runs mypy over the package, twice
}

# Tests that do not run in the streams (noxfile.RUNS), each for a reason of its own. None is
# there for time: no test holds the product to a wall-clock bound (the forty-at-once drains'
# latency is `nox -s bench`'s figure).
# These rebuild and re-tag the built-in images (`images build`) and the demo image (the README's
# first hour from a wheel; ci/demo.sh) in Docker, which the Docker stream's tests start: they
# run once that stream has ended, beside the others' last tests (Podman's tests see the same
# images loaded again, unchanged).
REBUILDS_IMAGES = ("engines/test_builtin_images.py", "engines/test_newcomer.py")
ALONE = (
    # forty workloads drained at once by one deployer, then by eight deleter processes: they
    # fill Podman's few API workers (3 x CPUs + 1) by themselves; beside the streams' drains,
    # Podman stopped answering either for 35 s ("engine unreachable", seen here). They run
    # once both engine streams and the tests above have ended.
    "engines/test_drain_many.py",
    *REBUILDS_IMAGES,
)


# Time is virtual by default: where only this process's own tasks take part (fakes in the
# loop, no thread, no other process), asyncio's clock jumps to the next timer when every task
# waits on one (looptime), so a 30 s grace costs nothing and timings are exact. A file runs on
# the real clock only when it is listed here, with why: a new engine-free test file is on
# virtual time unless it says otherwise.
REAL_TIME: dict[str, str] = {
    "engines/*": "real Docker and Podman: the engines' own clocks and processes",
    "kubernetes/test_real_cluster*": "a real cluster: the kubelet's clock",
    "workload/*": "the server kit times its window and deadlines by the wall clock "
    "(time.monotonic), as the servers it runs in do; real HAProxy, nginx and uvicorn "
    "processes beside it",
    "kubernetes/test_cli_*": "the CLI under test runs in a thread, on a loop of its own",
    "unit/test_timeouts.py": "the per-test bounds are wall-clock seconds, which virtual time "
    "cannot stretch: what it tests",
    "unit/test_user_docs.py": "the README's snippets run as a user runs them, on the real clock",
    "unit/test_inside.py": "the probe program runs as a child process against real listeners",
    "unit/test_takeover_signals.py": "a real child process is the dead owner it reads",
}


def _virtual_loop() -> asyncio.AbstractEventLoop:
    return virtual_clock.new_event_loop()  # looptime's, waiting for the loop's bytes in flight


def _on_virtual_time(path: Path) -> bool:
    where = path.resolve().relative_to(TESTS).as_posix()
    return not any(fnmatch(where, pattern) for pattern in REAL_TIME)


# Module-scoped (as the anyio plugin's own default is), so that a module's async fixtures (a
# real cluster's namespace, an engine's images) may be module-scoped too; virtual time is
# chosen by the module's file, as the marker is.
@pytest.fixture(scope="module")
def anyio_backend(request: pytest.FixtureRequest) -> object:
    if _on_virtual_time(request.path):
        return ("asyncio", {"loop_factory": _virtual_loop})
    return "asyncio"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        where = item.path.resolve().relative_to(TESTS).as_posix()
        if _on_virtual_time(item.path):
            item.add_marker("virtual_time")
        for prefix, markers in NEEDS.items():
            if fnmatch(where, prefix) or where.startswith(prefix + "/"):
                for marker in markers:
                    item.add_marker(marker)
        if any(fnmatch(where, pattern) for pattern in ALONE):
            item.add_marker("alone")
        if any(fnmatch(where, pattern) for pattern in REBUILDS_IMAGES):
            item.add_marker("rebuilds_images")
