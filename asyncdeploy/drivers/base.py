"""The contract every driver meets, cut by concern, and the small values drivers return.

Drivers take plans and return attrs values: engine dicts and Kubernetes model objects never cross
this boundary. Every driver drains with the same event types (:mod:`asyncdeploy._events`).

:class:`Driver` is five parts, each a protocol of its own, so that a caller asks for the part it
uses and a new driver writes the part it owns:

- :class:`Drains` (``find``, ``find_matching``, ``drain``): the one primitive every driver must
  write itself; the deployer's handles (``_operations.py``) run everything else of a drain
  (events, kill, summaries, verdict) on top of it, as httpx's client runs on one transport call.
- :class:`Lifecycle` (``ping``, ``apply``, ``pull``, ``wait_ready``, ``aclose``): a workload made,
  readied and the connection closed.
- :class:`Looks` (``get``, ``list``, ``recorded_plan``, ``recent_events``, ``inspect``, ``logs``,
  ``exec``): reading and reaching into what runs; nothing changes.
- :class:`Images` (``image_labels``, ``image_ports``, ``build_image``): what the engine holds
  locally, where it can see it.
- :class:`Markers` (``hold_marker``, ``read_marker``, ``drop_marker``): a replace's lock.

The parts a driver need not write are in :mod:`asyncdeploy.drivers.parts`: ``NoImages`` (an
engine whose images it cannot see), ``ProcessMarkers``, ``ReadyByLooks`` (a ready wait over
``get``), ``DrainThenMake`` (``apply`` over the drain primitive and one ``make``).
"""

from __future__ import annotations

import builtins
from collections.abc import AsyncIterable, AsyncIterator, Callable, Mapping, Sequence
from typing import Any, ClassVar, Protocol

import attrs

from asyncdeploy._events import DrainSummary, Emit
from asyncdeploy._kill import KillSwitch
from asyncdeploy._results import ApplyResult, EngineInfo, ExecResult, WorkloadEvent, WorkloadStatus
from asyncdeploy._selectors import Selector, SelectorLike
from asyncdeploy.plan import WorkloadPlan

__all__ = [
    "READY_SETTLE_SECONDS",
    "Drains",
    "Driver",
    "Found",
    "Images",
    "Lifecycle",
    "Looks",
    "Markers",
]

READY_SETTLE_SECONDS = 2.0
"""The default settle time of ``wait_ready`` (the caller's ``settle_seconds`` overrides it).

Without a readiness check, "ready" is: running, and still running with no restart this long
after its start as the engine recorded it (Docker's and Podman's ``State.StartedAt``, the
kubelet's ``startedAt``): one rule for Docker, Podman and Kubernetes, so that a server that
dies a second after its start fails ``wait_ready`` everywhere. A container that started longer
ago than that is settled at once (an unchanged workload waits for nothing). On Kubernetes the
API shows an exit only once the kubelet has seen it and written the Pod's status, so the
window is lengthened by that report delay (``_kubelet.settled_at``). ``settle_seconds=0``:
running is enough (no crash is caught after the first look). A container with a readiness
check never settles: its check decides."""

# Labels that identify what asyncdeploy created (container labels, Pod labels and annotations).


@attrs.frozen(kw_only=True)
class Found:
    """What one :meth:`Driver.find` found: the workloads a :meth:`Driver.drain` will take.

    ``names`` is for the caller; each driver returns a subclass that carries what it saw (the
    containers, the Pods) so that its drain starts from that one look instead of listing again.
    """

    names: tuple[str, ...]


class Drains(Protocol):
    """The one primitive a driver must write: find workloads in one look, drain what it found."""

    name: ClassVar[str]

    async def find(self, names: Sequence[str]) -> Found:
        """One list call: the named workloads, as a drain needs them.

        A missing name raises ``WorkloadNotFound``; nothing is touched either way.
        """
        ...

    async def find_matching(self, selector: Selector | None) -> Found:
        """One list call: every workload ``selector`` matches (every one for None)."""
        ...

    async def drain(
        self,
        found: Found,
        *,
        grace_period_seconds: int | None,
        emit: Emit,
        keep_volumes: bool = False,
    ) -> builtins.list[DrainSummary]:
        """Drain what :meth:`find` found concurrently under one deadline and remove it.

        Starts from that one list (no second); emits every step; returns one summary per
        workload. ``keep_volumes``: leave the named volumes the workloads' plan made (a
        recreate's next instance mounts them).
        """
        ...


class Lifecycle(Protocol):
    """A workload made and readied; the connection checked and closed."""

    async def ping(self) -> EngineInfo:
        """Check the engine answers; raise ``EngineUnavailable`` when it does not."""
        ...

    async def apply(
        self,
        plan: WorkloadPlan,
        *,
        emit: Emit | None = None,
        kill: KillSwitch | None = None,
    ) -> ApplyResult:
        """Create the workload; a no-op for an unchanged plan, a graceful replacement otherwise.

        A replacement drains the old workload first; when that drain fails (``DrainError``,
        ``DrainUnreachable``) the error is raised and nothing is created: what is left of the
        old workload may still hold its ports and names. A cancellation never cuts that drain
        short once begun: it runs to its end, then the cancellation propagates and nothing is
        created; throwing ``kill`` (the operation's switch) kills its survivors at once.
        """
        ...

    async def pull(self, plan: WorkloadPlan, *, emit: Emit) -> None:
        """Pull what the plan's pull policies ask for, as ``apply`` does first (a recreate
        pulls before it drains the old instance); a no-op where the cluster pulls (Kubernetes)."""
        ...

    async def wait_ready(
        self, name: str, *, timeout: float, settle_seconds: float | None = None
    ) -> WorkloadStatus:
        """Wait until every run container passes its readiness check, or, without one, runs
        and has kept running with no restart ``settle_seconds`` past its start (default
        :data:`READY_SETTLE_SECONDS`; see there).

        Raise ``CreateError`` (its exit code, its last log lines) when a run container ends or
        restarts first, ``EngineTimeout`` when ``timeout`` seconds pass first.
        """
        ...

    async def aclose(self) -> None:
        """Close the engine client."""
        ...


class Looks(Protocol):
    """Reading what runs, and reaching into it: nothing is changed."""

    async def get(self, name: str) -> WorkloadStatus:
        """Raise ``WorkloadNotFound`` when there is no such workload."""
        ...

    async def list(self, selector: SelectorLike | None = None) -> builtins.list[WorkloadStatus]:
        """The workloads whose labels match ``selector`` (every workload without one)."""
        ...

    async def recorded_plan(self, name: str) -> WorkloadPlan | None:
        """The plan the workload was created from, as it recorded it (None: it recorded none,
        made by an older asyncdeploy); ``WorkloadNotFound`` when there is no such workload."""
        ...

    async def recent_events(self, name: str, *, limit: int) -> builtins.list[WorkloadEvent]:
        """The engine's last ``limit`` records about the workload, oldest first (best effort:
        an engine that keeps none gives an empty list)."""
        ...

    async def inspect(self, name: str) -> dict[str, Any]:
        """Engine detail for people, masked by :mod:`asyncdeploy.masking`."""
        ...

    def logs(
        self,
        name: str,
        *,
        container: str | None = None,
        follow: bool = False,
        tail: int | None = None,
        since: float | None = None,
        timestamps: bool = False,
    ) -> AsyncIterator[str]:
        """Output of ``container`` (None: the plan's first run container); ``tail`` last lines,
        ``since`` a Unix time, ``timestamps`` RFC 3339 prefixes."""
        ...

    async def exec(
        self,
        name: str,
        command: Sequence[str],
        *,
        container: str | None = None,
        on_output: Callable[[str], None] | None = None,
        stdin: AsyncIterable[bytes] | None = None,
        tty: bool = False,
        size: tuple[int, int] | None = None,
    ) -> ExecResult:
        """Run ``command``; ``on_output`` sees its output as it comes (also kept in the result).
        ``stdin``: bytes for the command's standard input (its end closes it); ``tty``: in a
        terminal of ``size`` (columns, lines). Raise ``ExecInterrupted`` when the container
        stops before the command ends."""
        ...


class Images(Protocol):
    """What the engine holds locally (an engine that cannot see images answers None)."""

    async def image_labels(self, image: str) -> Mapping[str, str] | None:
        """A local image's labels; None when the engine lacks it (or cannot see images)."""
        ...

    async def image_ports(self, image: str) -> frozenset[int] | None:
        """The TCP ports a local image ``EXPOSE``s; None when it is not present or the engine
        cannot tell (Kubernetes: the node pulls, the API cannot see images)."""
        ...

    async def build_image(
        self,
        context: bytes,
        tag: str,
        *,
        labels: Mapping[str, str],
        on_line: Callable[[str], None] | None = None,
    ) -> None:
        """Build a tar build context as ``tag`` on the engine, its steps without network."""
        ...


class Markers(Protocol):
    """A replace's lock: markers held atomically, which no list or drain sees."""

    async def hold_marker(self, key: str, record: str, *, labels: Mapping[str, str]) -> str | None:
        """Create the marker ``key`` holding ``record`` (and ``labels``), atomically: None when
        this call created it, else the record the existing marker holds. Markers are not
        workloads: no list or drain sees them."""
        ...

    async def read_marker(self, key: str) -> str | None:
        """The record the marker ``key`` holds; None when there is no such marker."""
        ...

    async def drop_marker(self, key: str, record: str) -> None:
        """Remove the marker ``key`` if it still holds ``record`` (gone already is fine)."""
        ...

    async def marker_keys(self) -> builtins.list[str]:
        """The keys of every marker the engine keeps, held or free (on Docker and Podman a
        free marker leaves a small volume; on Kubernetes a dropped one leaves nothing)."""
        ...

    async def retire_marker(self, key: str, record: str) -> None:
        """Remove everything left of the marker ``key``, which holds ``record`` (its caller holds
        it, and is done with it): no free remains are left behind, as ``drop_marker`` leaves
        them on Docker and Podman. Nothing when it no longer holds ``record``."""
        ...


class Driver(Drains, Lifecycle, Looks, Images, Markers, Protocol):
    """What a deployer needs from an engine: the five parts. All methods map engine errors to
    ``EngineError``."""
