"""What the engine drain works on: the containers it found, and the engine calls it makes."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from typing import Protocol

import attrs

from asyncdeploy._errors import EngineUnavailable
from asyncdeploy.drivers.engine._claim import ClaimRecord
from asyncdeploy.drivers.engine._exits import ExitWatch
from asyncdeploy.labels import ContainerRole

__all__ = [
    "CallNotSent",
    "ContainerLook",
    "ContainerOps",
    "ContainerRef",
    "WorkloadSnapshot",
]


class CallNotSent(EngineUnavailable):
    """The call never reached the engine (no connection could be made): sending it again is
    safe. A plain ``EngineUnavailable`` from a call that changes something may have landed."""


@attrs.frozen(kw_only=True)
class ContainerRef:
    id: str
    name: str
    role: ContainerRole
    running: bool
    paused: bool = False
    exit_code: int | None = None
    pre_stop: tuple[str, ...] | None = None
    pre_stop_http: tuple[int, str] | None = None  # (port, path): a GET to the workload
    stop_signal: str = "SIGTERM"
    restart_policy: str = "no"
    workload: str = ""  # the workload it belongs to (its label)


@attrs.frozen(kw_only=True)
class WorkloadSnapshot:
    name: str
    grace_period_seconds: int
    containers: tuple[ContainerRef, ...]
    plan_name: str = ""  # the plan it is an instance of (its volumes' owner); "" = its name
    # whether a container mounts a named volume (False: the drain need not look for any);
    # None: unknown (nothing is left but the volumes, say), so the drain looks
    volumes: bool | None = None

    @property
    def volume_owner(self) -> str:
        return self.plan_name or self.name


@attrs.frozen(kw_only=True)
class ContainerLook:
    """A container's state at one moment."""

    running: bool
    paused: bool = False
    exit_code: int | None = None


class ContainerOps(Protocol):
    """The engine calls a drain needs; each raises ``EngineError`` subclasses only
    (``EngineUnavailable`` when the connection to the engine is lost: the drain retries)."""

    @property
    def kill_triggers_restart(self) -> bool:
        """True where a signalled container that exits is restarted under its restart policy
        (Podman): such containers are stopped with :meth:`stop` instead."""
        ...

    def exits(self) -> AbstractAsyncContextManager[ExitWatch]:
        """The engine's exit events for one drain: yields at once, the stream opening beside
        the first signals (``ExitWatch.settled``); lost when it cannot be opened."""
        ...

    async def signal(self, ref: ContainerRef, signal: str) -> bool:
        """Send ``signal``; False when the container was not running. Raises ``CallNotSent``
        when it surely did not reach the engine, ``EngineUnavailable`` when it may have."""
        ...

    async def wait_exit(self, ref: ContainerRef) -> int | None:
        """Wait until the container is not running; return its exit code."""
        ...

    async def wait_killed(self, ref: ContainerRef) -> int | None:
        """The same, for a container just sent SIGKILL (it must not wait on anything else)."""
        ...

    async def stop(self, ref: ContainerRef, timeout: float) -> int | None:
        """Stop with the container's stop signal, as a stop that no restart policy undoes."""
        ...

    async def remove(self, ref: ContainerRef) -> None:
        """Force-remove; a removal already in progress elsewhere is waited for, not an error."""
        ...

    async def run_hook(self, ref: ContainerRef, command: Sequence[str]) -> int:
        """Exec ``command`` in the container; return its exit code."""
        ...

    async def run_http_hook(self, pause: ContainerRef, port: int, path: str) -> int:
        """GET ``path`` on the workload's ``port`` (its pause container's address): 0 for 2xx."""
        ...

    async def remove_volumes(self, plan_name: str) -> None:
        """Remove the volumes asyncdeploy created for this plan that no container uses any
        more (an instance of the same plan may still run: its volume stays)."""
        ...

    @property
    def claim_is_record(self) -> bool:
        """True where the claim is made by writing the record (Docker: a volume named after the
        pause container; the pause container is then never paused)."""
        ...

    async def claim(self, pause: ContainerRef, record: ClaimRecord) -> str:
        """Claim the drain, atomically on the engine: ``"claimed"``, ``"held"`` (another delete
        holds it) or ``"refused"`` (could not tell: paused already, or not running). Docker: the
        record's volume, created (one cheap call: a pause forks the runtime). Podman: a pause
        (forty concurrent volume creates held its database 17 s); a second one is refused."""
        ...

    async def write_claim(self, pause: ContainerRef, record: ClaimRecord) -> None:
        """Write (or replace) the claim record of this pause container (see :mod:`._claim`)."""
        ...

    async def read_claim(self, pause: ContainerRef) -> ClaimRecord | None:
        """The claim record of the pause container; None when there is none."""
        ...

    async def drop_claim(self, pause: ContainerRef, record: ClaimRecord) -> None:
        """Remove the claim record, when it is still ``record`` (its drain has ended)."""
        ...

    async def signalled_since_pause(
        self, pause: ContainerRef, refs: Sequence[ContainerRef]
    ) -> frozenset[str]:
        """The names of ``refs`` the engine recorded a signal to (a kill or a stop) since the
        pause container was last paused: what a dead owner had sent (best effort: the engine's
        event log may not reach that far back)."""
        ...

    async def look(self, ref: ContainerRef) -> ContainerLook | None:
        """The container's state now; None when it is gone."""
        ...
