"""A test that hangs fails at its bound with the stack of every asyncio task (tests/timeouts.py),
instead of holding the run until CI's limit."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

HANGING = """
import anyio
import pytest

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend():
    return "asyncio"


async def waits_for_an_answer_that_never_comes():
    await anyio.sleep_forever()


@pytest.mark.timeout(1)
async def test_hangs():
    async with anyio.create_task_group() as tg:
        tg.start_soon(waits_for_an_answer_that_never_comes)
        await anyio.Event().wait()
"""


BOUND = """
def test_bound(request):
    assert request.node.get_closest_marker("timeout").args == (300.0,)
"""


def test_a_hanging_test_fails_at_its_bound_with_every_tasks_stack(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """(One pytest run for both: a hanging test with a bound of its own, and a test without
    one, which gets the default bound.)"""
    pytester.makepyfile(test_hanging=HANGING, test_bound=BOUND)
    pytester.makeini(
        "[pytest]\naddopts = -p no:asyncio -p no:looptime_plugin -p no:cacheprovider\n"
    )
    os.environ["PYTHONPATH"] = f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"
    result = pytester.runpytest_subprocess("-p", "tests.timeouts", timeout=60)
    result.assert_outcomes(failed=1, passed=1)
    out = result.stdout.str()
    assert "Timeout: the test ran past 1 s" in out
    assert "asyncio tasks" in out
    assert "waits_for_an_answer_that_never_comes" in out  # a task's own frame, not only select()


SWALLOWING = """
import time

import pytest


@pytest.mark.timeout(1)
def test_swallows_its_timeout():
    while True:  # the failure lands here and is caught, as in a task other than the test's
        try:
            time.sleep(10)
        except BaseException:
            pass
"""


def test_a_test_that_swallows_its_timeout_ends_the_run(pytester: pytest.Pytester) -> None:
    """A fake-API test hung on past its bound (the failure raised where something caught it)
    and held CI's engine-free stream: the process ends soon after instead."""
    pytester.makepyfile(test_swallowing=SWALLOWING)
    pytester.makeconftest("import tests.timeouts\ntests.timeouts.LAST_RESORT_AFTER = 1.0\n")
    pytester.makeini(
        "[pytest]\naddopts = -p no:asyncio -p no:looptime_plugin -p no:cacheprovider\n"
    )
    os.environ["PYTHONPATH"] = f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"
    result = pytester.runpytest_subprocess("-p", "tests.timeouts", timeout=60)
    assert result.ret == 3, result.stdout.str()
    assert "still running 1 s after" in result.stdout.str()
