"""A command run in a workload's container, watched while it runs: a container that stops
before the command ends (whose stream may then never end: Docker with a shared PID namespace)
ends it with ``ExecInterrupted``."""

from __future__ import annotations

from collections.abc import AsyncIterable, Callable, Sequence

import anyio

from asyncdeploy._errors import AsyncDeployError, ExecInterrupted, WorkloadNotFound
from asyncdeploy._results import ExecResult
from asyncdeploy.drivers.engine._session import EngineSession

__all__ = ["run_watched"]

EXEC_WATCH_INTERVAL = 1.0  # how often an exec looks whether its container still runs


async def run_watched(
    session: EngineSession,
    ident: str,
    command: Sequence[str],
    *,
    what: str,
    shown: str,
    on_output: Callable[[str], None] | None,
    stdin: AsyncIterable[bytes] | None,
    tty: bool,
    size: tuple[int, int] | None,
) -> ExecResult:
    """Run ``command`` in container ``ident`` (``shown`` names it in errors), its output to
    ``on_output`` as it comes, while watching that the container still runs."""
    result: list[ExecResult] = []
    failed: list[AsyncDeployError] = []

    async def run_it(scope: anyio.CancelScope) -> None:
        try:
            result.append(
                await session.exec(ident, command, what, on_output, stdin=stdin, tty=tty, size=size)
            )
        except AsyncDeployError as exc:  # raised below as itself, not in an exception group
            failed.append(exc)
        scope.cancel()

    async with anyio.create_task_group() as tg:
        tg.start_soon(run_it, tg.cancel_scope)
        stopped = await _until_stopped(session, ident, what)
        tg.cancel_scope.cancel()
    if failed:
        raise failed[0]
    if result:
        return result[0]
    raise ExecInterrupted(
        f"{what}: container {shown} {stopped} before the command ended "
        "(the command's output so far was shown)",
        engine=session.engine,
    )


async def _until_stopped(session: EngineSession, ident: str, what: str) -> str:
    """Return once the container no longer runs: how it stopped."""
    while True:
        await anyio.sleep(EXEC_WATCH_INTERVAL)
        try:
            with session.errors(what):
                state = (await session.show(ident)).get("State") or {}
        except WorkloadNotFound:
            return "was removed"
        if not state.get("Running") or state.get("Paused"):
            return "was paused" if state.get("Paused") else "exited"
