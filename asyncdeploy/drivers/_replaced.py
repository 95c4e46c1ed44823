"""The drain of the workload a create replaces: what every driver's ``apply`` shares.

A cancelled create must never turn the old workload's drain into a kill (its app was sent its
stop signal and is finishing its requests): once that drain has begun it runs to its end,
shielded, and the cancellation is delivered after it, before anything new is created. Only
``kill_now`` cuts it short (the drain's own cleanup then kills the survivors and removes
everything), as for a delete.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio

from asyncdeploy.errors import DrainError
from asyncdeploy.events import DrainEvent, DrainFinished, DrainSummary, Emit

__all__ = ["drain_replaced"]


async def drain_replaced(
    workload: str,
    drain: Callable[[Emit], Awaitable[list[DrainSummary]]],
    emit: Emit,
    kill_now: anyio.Event | None,
) -> DrainSummary:
    """Run ``drain(emit)`` of the one old workload, shielded from the create's cancellation.

    Returns its summary; raises ``DrainError`` when a step failed or when the drain, cut short
    by ``kill_now``, reported no end (what is left may hold the new workload's names). The
    summary is read from the drain's ``DrainFinished`` event too, so a drain cut short still
    reports what it did.
    """
    finished: list[DrainSummary] = []

    def watch(event: DrainEvent) -> None:
        if isinstance(event, DrainFinished):
            finished.append(event.summary)
        emit(event)

    returned: list[DrainSummary] = []
    failure: Exception | None = None
    with anyio.CancelScope(shield=True):
        async with anyio.create_task_group() as tg:
            if kill_now is not None:
                tg.start_soon(_cancel_when_set, kill_now, tg.cancel_scope)
            try:
                returned.extend(await drain(watch))  # type: ignore[arg-type]  # drain events only
            except Exception as exc:  # noqa: BLE001 - raised below, not grouped by the task group
                failure = exc
            tg.cancel_scope.cancel()  # stop watching kill_now
    if failure is not None:
        raise failure
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


async def _cancel_when_set(event: anyio.Event, scope: anyio.CancelScope) -> None:
    await event.wait()
    scope.cancel()  # the drain's shielded cleanup kills the survivors and removes everything
