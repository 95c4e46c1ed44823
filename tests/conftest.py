"""Shared test settings: the anyio plugin on asyncio (aiohttp, under both SDKs, is asyncio-only),
virtual time where only the loop's own tasks take part, the markers that say what a test needs,
set from where the test lives, each test's time bound (tests/timeouts.py), and hypothesis'
profile."""

from __future__ import annotations

import asyncio
from fnmatch import fnmatch
from pathlib import Path

import looptime
import pytest
from hypothesis import HealthCheck, settings

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

# CI runs the suite as streams side by side (noxfile.STREAMS): each engine's tests in two
# halves, these files in the second, chosen to balance the halves' time.
SECOND_STREAM = (
    "engines/test_verify*.py",
    "engines/test_llama_server.py",
    "engines/test_gate.py",
    "engines/test_example*.py",
    "engines/test_replace*.py",
    "engines/test_reconcile.py",
    "engines/test_engine_hang.py",
    "engines/test_live_view_pty.py",
    "engines/test_cli_exec_bound.py",
)
# Tests that run alone after the streams: those that hold the product to a time bound under its
# own concurrency (forty drains at once: they measure the product, not the suite's load), and
# those that rebuild the images every stream runs (the README's first hour from a wheel, the
# project's own commands: `images build demo`, ci/demo.sh re-tag localhost/asyncdeploy/demo).
ALONE = (
    "engines/test_drain_many.py",
    "engines/test_builtin_images.py",
    "engines/test_newcomer.py",
)


# Where only this process's own tasks take part (fakes in the loop, no thread, no other
# process), time is virtual: when every task waits on a timer, asyncio's clock jumps to the next
# one (looptime), so a 30 s grace costs nothing and timings are exact. Elsewhere, real time: a
# CLI run in a thread (its own loop), another process, and the server kit, which times its
# window and deadlines by the wall clock (time.monotonic), as the servers it runs in do.
VIRTUAL_TIME = (
    "unit/test_engine_drain.py",
    "unit/test_deployer_events.py",
    "unit/test_deadlines.py",
    "unit/test_testing.py",
    "unit/test_fleet.py",
    "kubernetes/test_driver_fake.py",
    "kubernetes/test_drain_events_fake.py",
    "kubernetes/test_accelerators_fake.py",
    "kubernetes/test_fake_matches_recordings.py",
    "kubernetes/test_selectors_fake.py",
    "kubernetes/test_node_lost_fake.py",
    "unit/test_coalesce.py",
    "unit/test_create_roll_back.py",
    "unit/test_log.py",
    "unit/test_pull.py",
    "unit/test_verify_service.py",
    "unit/test_verify_traffic.py",
    "unit/test_first_use.py",
)


def _virtual_loop() -> asyncio.AbstractEventLoop:
    return looptime.new_event_loop()


def _on_virtual_time(path: Path) -> bool:
    where = path.resolve().relative_to(TESTS).as_posix()
    return any(fnmatch(where, pattern) for pattern in VIRTUAL_TIME)


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
        if any(fnmatch(where, pattern) for pattern in SECOND_STREAM):
            item.add_marker("second_stream")
        if any(fnmatch(where, pattern) for pattern in ALONE):
            item.add_marker("alone")
