"""The drain of the workload a create replaces: what every driver's ``apply`` shares.

A cancelled create must never turn the old workload's drain into a kill (its app was sent its
stop signal and is finishing its requests): once that drain has begun it runs to its end,
shielded, and the cancellation is delivered after it, before anything new is created. Only
the create's kill switch cuts it short (the drain's own cleanup then kills the survivors and
removes everything), as for a delete.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import nullcontext

import anyio

from asyncdeploy._errors import DrainError
from asyncdeploy._events import DrainEvent, DrainFinished, DrainSummary, Emit
from asyncdeploy._kill import KillSwitch

__all__ = ["drain_replaced"]


async def drain_replaced(
    workload: str,
    drain: Callable[[Emit], Awaitable[list[DrainSummary]]],
    emit: Emit,
    kill: KillSwitch | None,
) -> DrainSummary:
    """Run ``drain(emit)`` of the one old workload, shielded from the create's cancellation.

    Returns its summary; raises ``DrainError`` when a step failed or when the drain, cut short
    by ``kill``, reported no end (what is left may hold the new workload's names). The
    summary is read from the drain's ``DrainFinished`` event too, so a drain cut short still
    reports what it did.
    """
    finished: list[DrainSummary] = []

    def watch(event: DrainEvent) -> None:
        if isinstance(event, DrainFinished):
            finished.append(event.summary)
        emit(event)

    returned: list[DrainSummary] = []
    with anyio.CancelScope(shield=True), kill.guarding() if kill else nullcontext():
        returned.extend(await drain(watch))  # type: ignore[arg-type]  # drain events only
    # A cancellation of the create that came during the drain is delivered here, before any
    # create call: the old workload is drained and removed, and nothing new is made.
    await anyio.lowlevel.checkpoint()
    summaries = returned or finished
    if not summaries:
        raise DrainError(
            [
                DrainSummary(
                    workload=workload,
                    grace_period_seconds=0,
                    seconds=0.0,
                    containers=(),
                    errors=("its drain was cut short and reported no end",),
                )
            ]
        )
    if summaries[0].errors:  # what is left may hold its ports and names: no create
        raise DrainError(summaries[:1])
    return summaries[0]
