"""What the engine drain works on: the containers it found, and the engine calls it makes."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from typing import ClassVar, Protocol

import attrs

from asyncdeploy.drivers.engine._exits import ExitWatch
from asyncdeploy.labels import ContainerRole

__all__ = ["ContainerLook", "ContainerOps", "ContainerRef", "WorkloadSnapshot"]

Role = ContainerRole


@attrs.frozen(kw_only=True)
class ContainerRef:
    id: str
    name: str
    role: Role
    running: bool
    paused: bool = False
    exit_code: int | None = None
    pre_stop: tuple[str, ...] | None = None
    stop_signal: str = "SIGTERM"
    restart_policy: str = "no"


@attrs.frozen(kw_only=True)
class WorkloadSnapshot:
    name: str
    grace_period_seconds: int
    containers: tuple[ContainerRef, ...]


@attrs.frozen(kw_only=True)
class ContainerLook:
    """A container's state at one moment."""

    running: bool
    paused: bool = False
    exit_code: int | None = None


class ContainerOps(Protocol):
    """The engine calls a drain needs; each raises ``EngineError`` subclasses only
    (``EngineUnavailable`` when the connection to the engine is lost: the drain retries)."""

    kill_triggers_restart: ClassVar[bool]
    """True where a signalled container that exits is restarted under its restart policy
    (Podman): such containers are stopped with :meth:`stop` instead."""

    def exits(self) -> AbstractAsyncContextManager[ExitWatch]:
        """The engine's exit events for one drain, from entry on (opened before its first
        signal); a watch that is already lost when the stream cannot be opened."""
        ...

    async def signal(self, ref: ContainerRef, signal: str) -> bool:
        """Send ``signal``; False when the container was not running."""
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

    async def remove_volumes(self, workload: str) -> None: ...

    async def claim(self, pause: ContainerRef) -> bool:
        """Mark the workload as draining, atomically on the engine: pause its pause container
        (the engines cannot relabel a container; a paused one shows in every listing). False
        when that was refused: already paused (another delete drains it), or not running."""
        ...

    async def look(self, ref: ContainerRef) -> ContainerLook | None:
        """The container's state now; None when it is gone."""
        ...
