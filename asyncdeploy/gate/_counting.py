"""In flight as the data plane counts it, told to the kit's state machine.

HAProxy admits and relays; the kit (:class:`~asyncdeploy.workload.DrainController`) keeps the
state, the window, the statistics and the drain's end. This mirrors the first into the second:
every new stream on the engine backends (their ``stot`` grew) is an admission in the kit (which
also notes the request in the propagation window), and the kit holds as many admissions as the
backends have streams open (``scur``): when it has fewer, the oldest are released (completed, or
failed for each new connect or answer error, client-disconnected for each abort). A stream that began and ended between two reads
is admitted and released in the same read.

The kit's count follows HAProxy's one read behind (``INTERVAL``); what decides the drain is
not the kit's count alone: :meth:`InFlight.settled` reads HAProxy again after admission was
turned off, so a request HAProxy let in just before is never missed (and one the kit would
have refused, let in during the flip, is still waited for).
"""

from __future__ import annotations

import collections
from collections.abc import Sequence

import attrs

from asyncdeploy.workload import Admission, DrainController, RequestOutcome

from ._runtime import Counters, Runtime

__all__ = ["INTERVAL", "InFlight"]

#: Seconds between two reads of HAProxy's counters.
INTERVAL = 0.05


class InFlight:
    def __init__(
        self, controller: DrainController, runtime: Runtime, backends: Sequence[str]
    ) -> None:
        self._controller = controller
        self._runtime = runtime
        self._backends = tuple(backends)  # every backend to the engine: their streams together
        self._admissions: collections.deque[Admission] = collections.deque()
        self._seen: Counters | None = None
        #: Streams HAProxy holds that the kit did not admit (let in while admission flipped).
        self.unadmitted = 0
        #: HAProxy's own count at the last read.
        self.current = 0

    async def read(self) -> Counters:
        """Read HAProxy's counters once and bring the kit's count in line with them."""
        counters = await self._runtime.counters(self._backends)
        self.apply(counters)
        return counters

    def apply(self, counters: Counters) -> None:
        seen = self._seen or attrs.evolve(counters, current=0)
        self._seen = counters
        self.current = counters.current
        for _ in range(max(0, counters.total - seen.total)):
            admission = self._controller.try_admit()
            if admission is not None:
                self._admissions.append(admission)
        failed = max(0, counters.failed - seen.failed)
        gone = max(0, counters.client_gone - seen.client_gone)
        held = len(self._admissions)
        self.unadmitted = max(0, counters.current - held)
        while len(self._admissions) > counters.current:
            outcome = RequestOutcome.COMPLETED
            if failed:
                failed -= 1
                outcome = RequestOutcome.FAILED
            elif gone:
                gone -= 1
                outcome = RequestOutcome.CLIENT_DISCONNECTED
            self._admissions.popleft().release(outcome)

    def release_all(self, outcome: RequestOutcome) -> None:
        """Streams cut at the deadline: released as such."""
        while self._admissions:
            self._admissions.popleft().release(outcome)
