"""``wait_ready`` on Docker and Podman: every run container running and ready, or why not.

Ready means: the container runs and its readiness command (a label, run with exec) exits 0; a
container without a readiness check must run and keep running with no restart for the settle
time (the caller's, else :data:`~asyncdeploy.drivers.base.READY_SETTLE_SECONDS`) past its start
as the engine recorded it (``State.StartedAt``), the same rule as on Kubernetes: one that started
longer ago is settled at the first look, and the engine's own state (no report delay here) is
read every 0.25 s meanwhile. A run container that exits (or restarts) first fails the wait at
once with a :class:`~asyncdeploy._errors.CreateError` carrying its exit code and its last log lines, read
before anything is removed. An exec racing the container's exit (Podman: 500 "can only create
exec sessions on running containers", Docker: 409 "is not running") or one that hangs on a
dying container (bounded) is not an answer: the next look at the container's state is.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

import anyio
import attrs

from asyncdeploy._errors import (
    ENGINE_FAILURES,
    CreateError,
    EngineTimeout,
    WorkloadNotFound,
)
from asyncdeploy._results import WorkloadStatus
from asyncdeploy.drivers.base import READY_SETTLE_SECONDS
from asyncdeploy.drivers.engine._container_ops import EngineContainerOps
from asyncdeploy.drivers.engine._inside import WaitProbes, passes
from asyncdeploy.drivers.engine._netcheck import probe_from_here
from asyncdeploy.drivers.engine._session import EngineSession
from asyncdeploy.drivers.engine._state import workload_status
from asyncdeploy.labels import (
    LABEL_CONTAINER,
    LABEL_READINESS,
    LABEL_READINESS_NET,
    LABEL_ROLE,
    LABEL_WORKLOAD,
)

__all__ = ["LOG_LINES", "engine_time", "exited_error", "wait_until_ready"]

LOG_LINES = 20  # the end of a failed container's output that the error carries
POLL_SECONDS = 0.25
EXEC_BOUND_SECONDS = 10.0  # one readiness exec; a dying container may never answer it


@attrs.define
class _Seen:
    since: float  # when it started (the engine's StartedAt, on the event loop's clock)
    restarts: int


async def wait_until_ready(
    ops: EngineContainerOps, name: str, *, timeout: float, settle: float | None = None
) -> WorkloadStatus:
    """Poll until every run container is ready; its status then. ``settle``: how long past its
    start a container without a readiness check must have run (None: the default)."""
    session = ops.session
    seen: dict[str, _Seen] = {}
    settle = READY_SETTLE_SECONDS if settle is None else settle
    try:
        with anyio.fail_after(timeout):
            async with WaitProbes(ops.inside, f"readiness of {name}") as probes:
                return await _poll(ops, name, seen, settle, probes)
    except TimeoutError:
        raise EngineTimeout(
            f"workload {name!r} was not ready within {timeout:g} s", engine=session.engine
        ) from None


async def _poll(
    ops: EngineContainerOps, name: str, seen: dict[str, _Seen], settle: float, probes: WaitProbes
) -> WorkloadStatus:
    """Look until every run container is ready (its checks through ``probes``)."""
    session = ops.session
    while True:
        items = await session.containers({LABEL_WORKLOAD: name})
        if not items:
            raise WorkloadNotFound(f"no workload named {name!r}", engine=session.engine)
        runs = [i for i in items if i["Labels"].get(LABEL_ROLE) in ("run", "sidecar")]
        if await _all_ready(ops, name, runs, items, seen, settle, probes):
            restarts = await session.restarts([str(i["Id"]) for i in items])
            return workload_status(session.engine, name, items, restarts)
        await anyio.sleep(POLL_SECONDS)


async def _all_ready(
    ops: EngineContainerOps,
    name: str,
    runs: Sequence[Mapping[str, Any]],
    items: Sequence[Mapping[str, Any]],
    seen: dict[str, _Seen],
    settle: float,
    probes: WaitProbes,
) -> bool:
    session = ops.session
    ready = True
    inside: bool | None = None  # whether checks can run in the workload's namespace
    address: str | None = None
    for item in runs:  # every container is looked at: an exit anywhere fails the wait at once
        ident, state = str(item["Id"]), item.get("State")
        if state in ("exited", "dead"):
            raise await exited_error(session, name, item)
        if state == "restarting":  # it ended, and its restart policy brings it back
            raise await exited_error(session, name, item, restarted=True)
        if state != "running":
            ready = False
            continue
        if ident not in seen:
            seen[ident] = await _first_look(session, ident)
        target = item["Labels"].get(LABEL_READINESS_NET)
        if target is not None and inside is None:
            inside = await ops.inside.available(items)
        if target is not None and not inside:  # nothing can run inside: sent from here
            address = address or await _address(ops, items)
        readiness = item["Labels"].get(LABEL_READINESS)
        if target is not None and inside:  # in the workload's namespace, nothing in its image
            ready = await _inside(probes, items, json.loads(target)) and ready
        elif target is not None and address is not None:
            ready = await probe_from_here(address, json.loads(target)) and ready
        elif readiness is not None:
            ready = await _check(session, name, ident, json.loads(readiness)) and ready
        elif anyio.current_time() - seen[ident].since < settle:
            ready = False
        elif await _restarts(session, ident) != seen[ident].restarts:
            raise await exited_error(session, name, item, restarted=True)
    return ready


async def _inside(
    probes: WaitProbes, items: Sequence[Mapping[str, Any]], target: Mapping[str, Any]
) -> bool:
    """A readiness target written by ``_spec.probe_target``, checked on the workload's own
    loopback (``_inside``): HTTP 200-399 (as the kubelet counts it) or a TCP connect, within
    its timeout (the engine's part bounded apart)."""
    timeout = float(target.get("timeout", 1))
    if "http" in target:
        http = target["http"]
        answer = await probes.ask(items, "http", int(http["port"]), timeout, str(http["path"]))
    else:
        answer = await probes.ask(items, "tcp", int(target["tcp"]), timeout, "/")
    return passes(answer)


async def _address(ops: EngineContainerOps, items: Sequence[Mapping[str, Any]]) -> str | None:
    """Where checks sent from here reach the workload (its pause container's address)."""
    pause = next((i for i in items if i["Labels"].get(LABEL_ROLE) == "pause"), None)
    return None if pause is None else await ops.address(str(pause["Id"]))


async def _check(session: EngineSession, name: str, ident: str, command: list[str]) -> bool:
    try:
        with anyio.move_on_after(EXEC_BOUND_SECONDS):
            result = await session.exec(ident, command, f"readiness of {name}")
            return result.exit_code == 0
    except ENGINE_FAILURES:
        return False  # it exited under the exec (or is restarting): the next look says which
    return False


async def _first_look(session: EngineSession, ident: str) -> _Seen:
    """When it started, on the event loop's clock (now when the engine does not say, or says a
    time still to come: another clock), and its restart count."""
    try:
        with session.errors(f"inspect {ident[:12]}"):
            data = await session.show(ident)
    except WorkloadNotFound:
        return _Seen(since=anyio.current_time(), restarts=-1)
    started = engine_time((data.get("State") or {}).get("StartedAt"))
    age = 0.0 if started is None else max(0.0, time.time() - started)
    return _Seen(since=anyio.current_time() - age, restarts=int(data.get("RestartCount") or 0))


_ENGINE_TIME = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)")


def engine_time(text: object) -> float | None:
    """An engine's RFC 3339 time (nanoseconds, ``Z`` or an offset) as a Unix time; None for
    none (Docker's ``0001-01-01T00:00:00Z`` of a container never started) or another form."""
    match = _ENGINE_TIME.fullmatch(str(text or ""))
    if match is None or match[1].startswith("0001-"):
        return None
    whole, fraction, zone = match.groups()
    moment = datetime.fromisoformat(whole + ("+00:00" if zone == "Z" else zone))
    return moment.timestamp() + float(f"0.{fraction or 0}")


async def _restarts(session: EngineSession, ident: str) -> int:
    try:
        with session.errors(f"inspect {ident[:12]}"):
            data = await session.show(ident)
    except WorkloadNotFound:
        return -1
    return int(data.get("RestartCount") or 0)


async def exited_error(
    session: EngineSession, name: str, item: Mapping[str, Any], *, restarted: bool = False
) -> CreateError:
    """The error for a run container that ended before it was ready: its exit code and the end
    of its output, read now (before anything removes the container)."""
    ident = str(item["Id"])
    container = item["Labels"].get(LABEL_CONTAINER, ident[:12])
    exit_code = None
    lines: list[str] = []
    try:
        with session.errors(f"inspect {container} of {name}"), anyio.fail_after(10):
            data = await session.show(ident)
            exit_code = (data.get("State") or {}).get("ExitCode")
            lines = await session.logs(ident, stdout=True, stderr=True, tail=str(LOG_LINES))
    except (*ENGINE_FAILURES, TimeoutError):
        pass  # best effort: the error is about the exit; it says so without the logs
    what = "restarted" if restarted else "exited"
    return CreateError(
        f"container {container} of {name!r} {what} before it was ready",
        exit_code=None if exit_code is None else int(exit_code),
        logs="".join(_last(lines)),
    )


def _last(chunks: Sequence[str]) -> Iterator[str]:
    text = "".join(chunks)
    yield from text.splitlines(keepends=True)[-LOG_LINES:]
