"""Every test bounded: a test that outlives its bound fails with the stack of every asyncio task
and every thread, instead of hanging the run until CI's 90 minutes.

pytest-timeout's SIGALRM method, with the asyncio tasks added to its dump (a hang in a task
group shows only the event loop's ``select`` in the threads' stacks). The bound comes from what
the test needs (its markers, set by tests/conftest.py), unless the test sets its own with
``@pytest.mark.timeout(seconds)``: wall-clock seconds, so virtual time cannot stretch it.
"""

from __future__ import annotations

import asyncio
import io
import os
import signal
import threading
from typing import Any

import pytest
from pytest_timeout import dump_stacks

# Seconds. A real drain is bounded by its grace (30 s by default) plus margins, a verify run by
# its traffic. An engine-free test takes seconds, but a property test's examples are CPU: on
# two cores shared with a loaded CI (load average 40) one took over a minute. A bound is there
# to turn a hang into a failure with its stacks, not to time a test.
BOUNDS = {"cluster": 600.0, "engine": 600.0, "slow": 600.0}
DEFAULT_BOUND = 300.0
# The timeout's failure is raised in whatever frame the signal lands in; caught there (a task
# other than the test's, a callback the event loop guards), the test hangs on: once it has
# still not ended this long after, the process ends (a red run in minutes, not CI's 90).
LAST_RESORT_AFTER = 30.0


def bound_of(item: pytest.Item) -> float:
    return max((s for m, s in BOUNDS.items() if item.get_closest_marker(m)), default=DEFAULT_BOUND)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:  # after tests/conftest.py has set what each test needs
        if item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(bound_of(item)))


def task_stacks() -> str:
    """Each task of the running event loop (if any), with its stack, innermost call last."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return "(no asyncio event loop runs in this thread)\n"
    out = io.StringIO()
    for task in sorted(asyncio.all_tasks(loop), key=lambda t: t.get_name()):
        out.write(f"--- {task!r}\n")
        task.print_stack(file=out)
    return out.getvalue()


@pytest.hookimpl(tryfirst=True)
def pytest_timeout_set_timer(item: pytest.Item, settings: Any) -> bool | None:
    """SIGALRM as pytest-timeout sets it, and a handler that dumps the tasks too."""
    if settings.method != "signal" or threading.current_thread() is not threading.main_thread():
        return None  # pytest-timeout's own (a thread that ends the process, stacks first)

    def handler(signum: int, frame: object) -> None:
        __tracebackhide__ = True
        terminal = item.config.get_terminal_writer()
        terminal.sep("+", title=f"Timeout: {item.nodeid} ran past {settings.timeout:g} s")
        terminal.sep("~", title="asyncio tasks")
        terminal.write(task_stacks())
        dump_stacks(terminal)  # every other thread
        terminal.sep("+", title="Timeout")
        signal.signal(signal.SIGALRM, last_resort)
        signal.setitimer(signal.ITIMER_REAL, LAST_RESORT_AFTER)
        pytest.fail(f"Timeout: the test ran past {settings.timeout:g} s (stacks above)")

    def last_resort(signum: int, frame: object) -> None:
        capture = item.config.pluginmanager.getplugin("capturemanager")
        if capture is not None:  # (else the words go to the test's captured output, and are lost)
            capture.suspend_global_capture(in_=True)
        terminal = item.config.get_terminal_writer()
        terminal.sep("+", title=f"{item.nodeid}: still running {LAST_RESORT_AFTER:g} s after")
        terminal.write(
            "its timeout's failure was raised where something caught it (another task, a "
            "callback the event loop guards): the run ends here\n"
        )
        terminal.flush()
        os._exit(3)

    def cancel() -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)

    item.cancel_timeout = cancel  # type: ignore[attr-defined]  # pytest-timeout's own slot
    signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, settings.timeout)
    return True
