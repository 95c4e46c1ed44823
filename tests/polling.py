"""Waiting in tests for a condition that something else makes true (one helper for every suite)."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable

import anyio


async def until(
    condition: Callable[[], bool | Awaitable[bool]],
    *,
    timeout: float = 3,
    interval: float = 0.01,
) -> None:
    """Poll ``condition`` (plain or async) every ``interval`` s until it is true;
    ``TimeoutError`` after ``timeout`` s."""
    with anyio.fail_after(timeout):
        while True:
            result = condition()
            if inspect.isawaitable(result):
                result = await result
            if result:
                return
            await anyio.sleep(interval)
