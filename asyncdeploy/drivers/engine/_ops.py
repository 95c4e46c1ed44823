"""What the engine drain works on: the containers it found, and the engine calls it makes."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from typing import Protocol

import attrs

from asyncdeploy.drivers.engine._claim import ClaimRecord
from asyncdeploy.drivers.engine._exits import ExitWatch
from asyncdeploy.errors import EngineUnavailable
from asyncdeploy.labels import ContainerRole

__all__ = ["CallNotSent", "ContainerLook", "ContainerOps", "ContainerRef", "WorkloadSnapshot"]


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


@attrs.frozen(kw_only=True)
class WorkloadSnapshot:
    name: str
    grace_period_seconds: int
    containers: tuple[ContainerRef, ...]
    plan_name: str = ""  # the plan it is an instance of (its volumes' owner); "" = its name

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

    async def claim(self, pause: ContainerRef) -> bool:
        """Mark the workload as draining, atomically on the engine: pause its pause container
        (the engines cannot relabel a container; a paused one shows in every listing). False
        when that was refused: already paused (another delete drains it), or not running."""
        ...

    async def write_claim(self, pause: ContainerRef, record: ClaimRecord) -> None:
        """Write the claim record into the pause container (see :mod:`._claim`)."""
        ...

    async def read_claim(self, pause: ContainerRef) -> ClaimRecord | None:
        """The claim record in the pause container; None when there is none."""
        ...

    async def look(self, ref: ContainerRef) -> ContainerLook | None:
        """The container's state now; None when it is gone."""
        ...
