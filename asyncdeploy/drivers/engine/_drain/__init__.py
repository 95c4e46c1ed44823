"""The drain of container-engine workloads: one deadline for all, one machine per workload.

For each workload (the states of :mod:`.core`, carried out by :mod:`.loop`):

1. claim the drain by pausing its pause container (one call, the only one before the signals)
   and, at the same time, remove the autoheal sidecar (so it cannot resurrect a draining
   container). A delete that finds it paused follows the other delete instead: it never
   signals, never shortens the other's drain, and takes over only when the owner is dead. A
   takeover drains: hooks, stop signals and a full grace from then on, except for the
   containers the dead owner had signalled (a stop signal is never sent twice);
2. run one pipeline per init and run container, all under the one deadline: its ``pre_stop``
   hook (a hook that fails goes straight on), its stop signal, the wait for its exit. One hung
   hook delays no other container's signal. Book-keeping comes after the signals: a drain still
   running a second in records who drains it (:mod:`._claim`), once;
3. at the deadline, SIGKILL whatever still runs (grace 0: at once, with the pause container, and
   no hooks and no TERM), and remove each container as soon as its end is seen;
4. remove the pause container last (it holds the namespaces the others share: removing it
   first SIGKILLs them on Docker and is refused by Podman), then the volumes.

Exits come from the engine's event stream, one per deployer (:mod:`._exits`), opened while
the first hooks and signals go out; the engine's ``wait`` is the fallback for a stream cut or
never opened. A stop signal is sent once: a lost answer to it (the connection was cut after the
request went out) is not retried; only a call that never reached the engine is.

An engine call lost with the connection is retried with backoff, the wait re-armed, until the
deadline: a connection that blinks kills nothing. An engine still unreachable (or not
answering) ``give_up_after`` past the deadline ends the drain: the containers whose end was not
seen are ``unreachable`` and the call raises ``DrainUnreachable`` (the CLI's exit 3).

Steps 3 and 4 complete even when the caller cancels, bounded, and ``DrainFinished`` with the
summary is emitted in every case: a cancellation is the caller's "kill now" (the CLI's second
Ctrl-C); from whatever point it lands, what still runs is SIGKILLed and removed, and the
summary says how each container ended. Another failing step is written in the summary and the
drain goes on; the caller gets a ``DrainError`` once everything that could be cleaned was.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import anyio

from asyncdeploy._errors import DrainUnreachable
from asyncdeploy._events import DrainSummary, Emit
from asyncdeploy.drivers._books import effective_grace
from asyncdeploy.drivers.engine._claim import Owner
from asyncdeploy.drivers.engine._drain.calls import ContainerOps
from asyncdeploy.drivers.engine._drain.core import WorkloadDrain
from asyncdeploy.drivers.engine._drain.loop import DrainLoop
from asyncdeploy.drivers.engine._drain.protocol import DrainTimings
from asyncdeploy.drivers.engine._ops import WorkloadSnapshot

__all__ = ["DrainTimings", "drain_workloads"]


async def drain_workloads(
    ops: ContainerOps,
    snapshots: Sequence[WorkloadSnapshot],
    *,
    grace_period_seconds: int | None,
    emit: Emit,
    engine: str = "engine",
    keep_volumes: bool = False,
    timings: DrainTimings | None = None,
) -> list[DrainSummary]:
    """Drain every snapshot concurrently, all timed from one start. Cancelled, it kills what
    still runs and removes everything before the cancellation propagates.

    Raises ``DrainUnreachable`` (with every summary) when the engine stayed unreachable.
    """
    timings = timings or DrainTimings()
    started, wall = anyio.current_time(), time.time()  # the grace counts from here
    me = Owner.this_process()
    machines = [
        WorkloadDrain(
            s,
            grace=effective_grace(s.grace_period_seconds, grace_period_seconds),
            started=started,
            wall_started=wall,
            timings=timings,
            me=me,
            kill_triggers_restart=ops.kill_triggers_restart,
            claim_is_record=ops.claim_is_record,
            keep_volumes=keep_volumes,
        )
        for s in snapshots
    ]
    async with ops.exits() as exits:  # it opens while the first hooks and signals go out
        await DrainLoop(ops, exits, timings, emit).run(machines)
    summaries = [m.summary for m in machines if m.summary is not None]
    # Raised out here: an error inside the stream's task group would reach the caller grouped.
    if any(m.lost for m in machines):
        raise DrainUnreachable(summaries, engine=engine)
    return summaries
