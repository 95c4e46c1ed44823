"""What a look shows of a drain: a workload's status read with its drain's claim.

A drain claims its workload before its signals (``_claim.py``): Docker's claim is its record's
volume; Podman's is the pause container, paused, with the record written ``record_delay`` into
the drain. A look reads the claim beside the list entries: ``draining`` with the record's
deadline while its owner lives (or cannot be told dead from here), ``half-drained`` when the
owner is dead (``_unfinished.py``), and nothing said on a guess.

READY on Docker and Podman is what the deployer knows from that look, with no check run per
look (a ``list -w`` polls every second): a run container is ready when it runs and is not
failing the plan's liveness check (the engine's health state, in the list entry), and no drain
of its workload has begun. A workload ``draining`` or ``half-drained`` is never ready, whatever
its containers answer: a draining server answers its readiness check with 503 on purpose. The
readiness check itself is run by ``wait`` and ``create --wait``. (On Kubernetes READY is the
kubelet's.)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import anyio
import attrs

from asyncdeploy._errors import ENGINE_FAILURES
from asyncdeploy._results import DRAINING, WorkloadStatus
from asyncdeploy.drivers.engine._claim import ClaimRecord
from asyncdeploy.drivers.engine._container_ops import EngineContainerOps
from asyncdeploy.drivers.engine._drain import DrainTimings
from asyncdeploy.drivers.engine._ops import ContainerRef
from asyncdeploy.drivers.engine._state import workload_status
from asyncdeploy.drivers.engine._unfinished import dead_claim
from asyncdeploy.labels import LABEL_ROLE

__all__ = ["ClaimMarks", "not_ready_while_draining"]

NO_RECORD = "half-drained: its drain was claimed (paused pause) but nobody recorded it"
CLAIM_REREAD = 0.2  # how often a paused pause's claim is read again while it has none
# how long a look waits for a paused pause's record: a drain writes it ``record_delay`` in (on
# Podman; Docker's claim is its record), and Podman answers empty while it is rewritten; the
# write itself took over 0.5 s on a loaded machine (CI), so the look allows it 2.5 s. A look
# ends as soon as the record is there: only a pause whose owner died before it pays it all.
RECORD_LOOK = DrainTimings().record_delay + 2.5


class ClaimMarks:
    """The statuses a look gives, each read with its drain's claim where a drain claimed it."""

    def __init__(self, engine: str, ops: EngineContainerOps) -> None:
        self.engine = engine
        self.ops = ops

    async def status(
        self,
        name: str,
        items: Sequence[Mapping[str, Any]],
        restarts: Mapping[str, int],
        claims: Mapping[str, ClaimRecord] | None = None,
    ) -> WorkloadStatus:
        """Its status, read with the drain's claim (:meth:`_claimed`); not ready while a drain
        of it has begun (the module's rule)."""
        return not_ready_while_draining(await self._claimed(name, items, restarts, claims))

    async def _claimed(
        self,
        name: str,
        items: Sequence[Mapping[str, Any]],
        restarts: Mapping[str, int],
        claims: Mapping[str, ClaimRecord] | None = None,
    ) -> WorkloadStatus:
        """Its status, read with the drain's claim (who drains, and until when) where a drain
        claimed it: its pause paused, or killed at the drain's end (not removed yet), or on
        Docker, whose claim is the record's volume, the record there. ``claims``: every record,
        read once for a whole list."""
        status = workload_status(self.engine, name, items, restarts)
        pauses = [i for i in items if i["Labels"].get(LABEL_ROLE) == "pause"]
        if not pauses:
            return status
        claimed = pauses[0].get("State") in ("paused", "exited", "stopped")
        if not claimed and not self.ops.claim_is_record:
            return status
        ref = ContainerRef(id=str(pauses[0]["Id"]), name="pause", role="pause", running=True)
        try:
            record = claims.get(ref.id) if claims is not None else await self.ops.read_claim(ref)
            if record is None and claimed:
                record = await self._written(ref)
        except ENGINE_FAILURES:  # a look only (the pause may be going): no mark said on a guess
            return attrs.evolve(status, unfinished=None) if claimed else status
        reason = dead_claim(record)
        if reason:
            return attrs.evolve(status, unfinished=reason)
        if record is None and claimed:
            # No record even past the drain's record_delay: a drain over before it (its pause
            # going at its end) leaves no half-drained workload, so that is said only of a pause
            # still paused after the wait: an owner killed before its record (its containers
            # running or not), as _claim.py's record_wait judges it; a delete (and reconcile)
            # takes such a workload over.
            try:
                look = await self.ops.look(ref)
            except ENGINE_FAILURES:
                look = None
            if look is None or not look.paused:
                return attrs.evolve(status, unfinished=None)
            return attrs.evolve(status, unfinished=status.unfinished or NO_RECORD)
        if record is None:
            return status
        return attrs.evolve(status, unfinished=None, draining_until=record.deadline)

    async def _written(self, ref: ContainerRef) -> ClaimRecord | None:
        """The record of a claimed pause that had none, read again until :data:`RECORD_LOOK`
        has passed (None: nobody wrote one; a list waits once, its workloads side by side)."""
        with anyio.move_on_after(RECORD_LOOK):
            while True:
                await anyio.sleep(CLAIM_REREAD)
                if (record := await self.ops.read_claim(ref)) is not None:
                    return record
        return None


def not_ready_while_draining(status: WorkloadStatus) -> WorkloadStatus:
    """``status`` with its running containers not ready when a drain of it has begun (a drain's
    claim: ``draining``, or ``half-drained`` by a dead deleter)."""
    drained = status.state == "draining" or (status.unfinished or "").startswith("half-drained")
    if not drained:
        return status
    containers = tuple(
        attrs.evolve(c, health=DRAINING) if c.role != "pause" and c.state == "running" else c
        for c in status.containers
    )
    return attrs.evolve(status, containers=containers)
