"""A delete that finds the drain claimed by another: follow it, or take over from a dead one.

The follower reads what happens (exits, removals) with looks, and the owner's claim record
(:mod:`._claim`) to tell a live owner from a dead one. It never signals and never kills while
the owner lives, however long the owner's grace (its override included): a live owner's drain
is bounded by its own deadline plus its give-up and cleanup bounds. A dead owner (its process
gone, its beat stopped for ``BEAT_STALE``, no record for ``RECORD_WAIT``, or an owner still
there long after every bound) is taken over: the follower writes its own record, checks after
``TAKEOVER_SETTLE`` that no other follower wrote one since (the last writer wins), and drains
what is left with its own grace from then on, hooks and stop signals included, except for the
containers the dead owner had signalled already.
"""

from __future__ import annotations

import time
from typing import Protocol

import anyio

from asyncdeploy.drivers._books import DrainBooks
from asyncdeploy.drivers.engine._claim import BEAT_STALE, RECORD_WAIT, ClaimRecord, new_record
from asyncdeploy.drivers.engine._drain_state import DrainState
from asyncdeploy.drivers.engine._ops import ContainerOps, ContainerRef, WorkloadSnapshot
from asyncdeploy.errors import ENGINE_FAILURES, EngineFailure

__all__ = ["claim_by_record", "follow"]

FOLLOW_POLL_FIRST, FOLLOW_POLL_MAX = 0.05, 0.5
# An owner still recorded this long past its deadline is stuck, beat or no beat: past its
# give-up (5 s) and cleanup (60 s) bounds, with room to spare.
OWNER_BOUND = 80.0
TAKEOVER_SETTLE = 0.3  # between writing a takeover's record and reading it back


class Follower(Protocol):
    """What following uses of a workload's drain (:class:`._drain._WorkloadDrain`)."""

    ops: ContainerOps
    books: DrainBooks
    snapshot: WorkloadSnapshot
    state: DrainState
    record: ClaimRecord | None

    @property
    def name(self) -> str: ...

    def pause(self) -> ContainerRef | None: ...

    async def look_all(self) -> bool: ...

    async def write_record(self, record: ClaimRecord | None = None) -> None: ...

    def failed(self, what: str, exc: EngineFailure) -> None: ...


class _OwnerWatch:
    """What a follower has seen of the owner's record, on its own clock."""

    def __init__(self, now: float) -> None:
        self.beat: int | None = None
        self.beat_seen = now  # when the beat last changed (or the watch began)
        self.record_missing_since: float | None = None
        self.last: ClaimRecord | None = None

    def owner_dead(self, record: ClaimRecord | None, now: float) -> bool:
        if record is None:
            if self.record_missing_since is None:
                self.record_missing_since = now
            return now - self.record_missing_since >= RECORD_WAIT
        self.record_missing_since = None
        self.last = record
        if record.owner.alive() is False:
            return True  # on this host, and its process is gone
        if record.beat != self.beat:
            self.beat, self.beat_seen = record.beat, now
        elif now - self.beat_seen >= BEAT_STALE:
            return True
        return time.time() >= record.deadline + OWNER_BOUND


async def follow(drain: Follower) -> bool:
    """Follow another delete's drain until the workload is gone: False. True when ``drain``
    has taken over (it owns the claim now, with a fresh deadline) and must drain what is left."""
    books, ops = drain.books, drain.ops
    pause = drain.pause()
    assert pause is not None
    watch = _OwnerWatch(books.clock())
    poll = FOLLOW_POLL_FIRST
    while True:
        try:
            await drain.look_all()
            if all(r.id in drain.state.gone for r in drain.snapshot.containers):
                return False
            record = None if pause.id in drain.state.gone else await ops.read_claim(pause)
        except ENGINE_FAILURES as exc:
            drain.failed(f"follow {drain.name}", exc)
            return False
        if watch.owner_dead(record, books.clock()) and await _take_over(drain, watch.last):
            return True
        await anyio.sleep(poll)
        poll = min(poll * 2, FOLLOW_POLL_MAX)


async def _take_over(drain: Follower, stale: ClaimRecord | None) -> bool:
    """Claim a drain whose owner died; False when another follower took it over first."""
    pause = drain.pause()
    assert pause is not None
    if stale is not None:
        drain.state.signalled.update(stale.signalled)
    record = new_record(drain.books.grace, tuple(sorted(drain.state.signalled)))
    await drain.write_record(record)
    await anyio.sleep(TAKEOVER_SETTLE)
    try:
        now = await drain.ops.read_claim(pause)
    except ENGINE_FAILURES:
        now = None
    if now is not None and now.token != record.token:
        drain.record = None  # another follower's: follow it
        return False
    books = drain.books
    books.deadline = books.clock() + books.grace  # a full grace from the takeover on
    return True


async def claim_by_record(drain: Follower) -> bool:
    """The claim on an engine that cannot pause: by the record alone. True when another delete
    holds it (a record whose owner may live: :func:`follow` tells), False when ``drain`` now
    does (its record written and still there after ``TAKEOVER_SETTLE``: the last writer wins)
    or nothing can be recorded (it drains unclaimed, as before)."""
    pause = drain.pause()
    assert pause is not None
    try:
        found = await drain.ops.read_claim(pause)
    except ENGINE_FAILURES:
        return False
    alive = found is not None and found.owner.alive() is not False
    if found is not None and alive and time.time() < found.deadline + OWNER_BOUND:
        return True
    if not await _take_over(drain, found):
        return True
    drain.books.deadline = drain.books.started + drain.books.grace  # not a takeover: its own
    return False
