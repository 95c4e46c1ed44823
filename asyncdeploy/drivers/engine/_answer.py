"""How long the engine may take to answer one call.

A call the engine took and does not answer within the answer bound is an engine that is not
answering (``EngineUnavailable``): a daemon that deadlocked must not hang a deployer. The calls
that wait by design (wait, stop, exec, logs, events, pulls) are not bounded by it.
``ASYNCDEPLOY_ENGINE_TIMEOUT`` (seconds) sets it, as ``COMPOSE_HTTP_TIMEOUT`` does for docker
compose.

A caller that bounds its calls itself raises it for them (:func:`answer_within`): a drain gives
its calls until its deadline plus this margin, or to the end of its clean-up, and some of them
wait longer than the answer bound by no fault of the engine's (a loaded engine's removals queue
behind one another, and so does a look at a container being removed: Podman, forty workloads
on two loaded cores, over 30 s).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

__all__ = ["ANSWER_TIMEOUT", "TIMEOUT_VARIABLE", "answer_bound", "answer_timeout", "answer_within"]

ANSWER_TIMEOUT = 30.0
TIMEOUT_VARIABLE = "ASYNCDEPLOY_ENGINE_TIMEOUT"
_WITHIN: ContextVar[float] = ContextVar("asyncdeploy_answer_within", default=0.0)


def answer_timeout() -> float:
    """How long an engine may take to answer one call (``ASYNCDEPLOY_ENGINE_TIMEOUT``, else
    ``ANSWER_TIMEOUT``); a value that is not a positive number is ignored."""
    try:
        value = float(os.environ.get(TIMEOUT_VARIABLE, ""))
    except ValueError:
        return ANSWER_TIMEOUT
    return value if 0 < value < float("inf") else ANSWER_TIMEOUT


@contextmanager
def answer_within(seconds: float) -> Iterator[None]:
    """The engine calls made in the block (in this task) may go unanswered up to ``seconds``,
    when that is longer than :func:`answer_timeout`: the caller bounds them itself."""
    token = _WITHIN.set(seconds)
    try:
        yield
    finally:
        _WITHIN.reset(token)


def answer_bound() -> float:
    """The bound of a call made now: the answer bound, or a caller's longer one."""
    return max(answer_timeout(), _WITHIN.get())
