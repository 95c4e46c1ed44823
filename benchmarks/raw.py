"""The engine side of the benchmark: the raw Engine API baselines, the event log, clean-up.

Everything here talks to one engine socket through aiodocker (aiohttp), never to a container's
address. Every container the benchmark creates carries the label ``asyncdeploy-bench=1``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import aiodocker
import anyio
import attrs
from anyio.abc import TaskStatus

__all__ = [
    "BENCH_LABEL",
    "BUSYBOX",
    "DRAIN_COMMAND",
    "PAUSE",
    "PEER_PAUSE",
    "EngineEvent",
    "EventLog",
    "Timed",
    "bounded_gather",
    "cleanup",
    "create_plain",
    "create_pod",
    "ensure_tag",
    "raw_concurrent",
    "raw_kill_wait",
    "raw_pods_kill_wait",
    "raw_serial",
]

BENCH_LABEL = "asyncdeploy-bench"
BUSYBOX = "asyncdeploy-test/busybox:latest"
PAUSE = "asyncdeploy-test/pause:latest"
PEER_PAUSE = "peer-bench/pause:latest"
DRAIN_COMMAND = ["sh", "-c", "trap 'sleep 2; exit 0' TERM; while true; do sleep 0.1; done"]

_PAUSE_MARKERS = (
    ("asyncdeploy-bench-role", "pause"),
    ("asyncdeploy.io/role", "pause"),
    ("runtime.gpustack.ai/component", "pause"),
)


@attrs.frozen
class EngineEvent:
    action: str
    name: str
    id: str
    time_ns: int
    exit_code: int | None = None
    signal: str | None = None


@attrs.define
class EventLog:
    """The engine's ``/events`` stream for the bench label, read on its own connection.

    ``die`` and ``gone`` (Docker ``destroy``, Podman ``remove``) are kept by container name;
    names are unique over one benchmark run.
    """

    url: str
    die: dict[str, EngineEvent] = attrs.field(factory=dict)
    gone: dict[str, EngineEvent] = attrs.field(factory=dict)
    kills: dict[str, list[EngineEvent]] = attrs.field(factory=dict)
    count: int = 0

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        client = aiodocker.Docker(url=self.url)
        try:
            params = {"filters": json.dumps({"label": [f"{BENCH_LABEL}=1"], "type": ["container"]})}
            async with client._query(
                "events", method="GET", params=params, timeout=None
            ) as response:
                task_status.started()
                async for line in response.content:
                    if line.strip():
                        self._record(json.loads(line))
        finally:
            with anyio.CancelScope(shield=True):
                await client.close()

    def _record(self, raw: dict[str, Any]) -> None:
        self.count += 1
        attributes = (raw.get("Actor") or {}).get("Attributes") or {}
        name = str(attributes.get("name", "")).lstrip("/")
        action = str(raw.get("Action") or raw.get("status") or "")
        exit_code = attributes.get("exitCode", attributes.get("containerExitCode"))
        event = EngineEvent(
            action=action,
            name=name,
            id=str(raw.get("id") or (raw.get("Actor") or {}).get("ID") or ""),
            time_ns=int(raw.get("timeNano") or int(raw.get("time", 0)) * 1_000_000_000),
            exit_code=None if exit_code in (None, "") else int(exit_code),
            signal=attributes.get("signal"),
        )
        if action == "die":
            self.die[name] = event
        elif action in ("destroy", "remove"):
            self.gone[name] = event
        elif action == "kill":
            self.kills.setdefault(name, []).append(event)


@attrs.frozen
class Timed:
    """One timed operation: wall seconds (perf_counter) and its wall-clock bounds (ns)."""

    seconds: float
    start_ns: int
    end_ns: int
    names: tuple[str, ...]
    extra: dict[str, Any] = attrs.field(factory=dict)


async def bounded_gather(calls: Sequence[Callable[[], Awaitable[Any]]], limit: int) -> list[Any]:
    """Run the calls concurrently, at most ``limit`` at a time; return results in order."""
    results: list[Any] = [None] * len(calls)
    limiter = anyio.CapacityLimiter(max(1, limit))

    async def one(i: int) -> None:
        async with limiter:
            results[i] = await calls[i]()

    async with anyio.create_task_group() as tg:
        for i in range(len(calls)):
            tg.start_soon(one, i)
    return results


async def ensure_tag(client: aiodocker.Docker, source: str, target: str) -> str:
    """Tag ``source`` as ``target`` when missing (no registry: a local tag of a local image)."""
    try:
        await client.images.inspect(target)
        return "present"
    except aiodocker.DockerError:
        pass
    repo, _, tag = target.rpartition(":")
    async with client._query(
        f"images/{source}/tag", method="POST", params={"repo": repo, "tag": tag}
    ) as response:
        await response.read()
    await client.images.inspect(target)
    return f"tagged from {source}"


def _is_pause(labels: dict[str, str]) -> bool:
    return any(labels.get(k) == v for k, v in _PAUSE_MARKERS)


async def cleanup(client: aiodocker.Docker, *, label: str = f"{BENCH_LABEL}=1") -> int:
    """Remove every container carrying ``label``: dependents first, pause containers last.

    Returns how many there were. Best effort, a few passes (Podman refuses to remove a pause
    container while others still join it).
    """
    total = 0
    for _ in range(4):
        found = await client.containers.list(all=True, filters={"label": [label]})
        if not found:
            break
        total = max(total, len(found))
        groups = (
            [c for c in found if not _is_pause(c._container.get("Labels") or {})],
            [c for c in found if _is_pause(c._container.get("Labels") or {})],
        )
        for group in groups:

            def remover(c: Any) -> Callable[[], Awaitable[None]]:
                async def remove() -> None:
                    try:
                        await c.kill(signal="SIGKILL")
                    except aiodocker.DockerError:
                        pass
                    try:
                        await c.delete(force=True, v=True)
                    except aiodocker.DockerError:
                        pass

                return remove

            await bounded_gather([remover(c) for c in group], 8)
    return total


async def create_plain(
    client: aiodocker.Docker, names: Sequence[str], labels: dict[str, str]
) -> list[Any]:
    """Plain draining containers (NetworkMode none), created and started; not timed."""
    return await _start_draining(client, names, labels, {"NetworkMode": "none"})


async def create_pod(
    client: aiodocker.Docker, base: str, names: Sequence[str], labels: dict[str, str]
) -> tuple[Any, list[Any]]:
    """asyncdeploy's pod shape without asyncdeploy: a pause container (default bridge network,
    shareable IPC, as ``drivers/engine/_spec.py``'s ``pause_config``) and draining containers
    that join its network, IPC and PID namespaces (as ``container_config`` with the default
    ``pid_shared``)."""
    pause = await client.containers.create(
        {
            "Image": PAUSE,
            "Labels": {BENCH_LABEL: "1", "asyncdeploy-bench-role": "pause", **labels},
            "StopSignal": "SIGTERM",
            "StopTimeout": 1,
            "HostConfig": {"IpcMode": "shareable", "RestartPolicy": {"Name": "no"}},
        },
        name=f"{base}-pause",
    )
    await pause.start()
    joined = f"container:{pause.id}"
    host = {"NetworkMode": joined, "IpcMode": joined, "PidMode": joined}
    return pause, await _start_draining(client, names, labels, host)


async def _start_draining(
    client: aiodocker.Docker,
    names: Sequence[str],
    labels: dict[str, str],
    host_config: dict[str, Any],
) -> list[Any]:
    """Draining containers with ``host_config``, created and started four at a time."""

    def creator(name: str) -> Callable[[], Awaitable[Any]]:
        async def create() -> Any:
            config = {
                "Image": BUSYBOX,
                "Cmd": DRAIN_COMMAND,
                "Labels": {BENCH_LABEL: "1", **labels},
                "HostConfig": host_config,
            }
            container = await client.containers.create(config, name=name)
            await container.start()
            return container

        return create

    return await bounded_gather([creator(n) for n in names], 4)


def _stamp() -> tuple[float, int]:
    return time.perf_counter(), time.time_ns()


async def raw_concurrent(containers: Sequence[Any], names: Sequence[str], grace: int) -> Timed:
    """Each container: ``stop(t=grace)`` then ``delete(force)``; all at once."""

    async def one(c: Any) -> None:
        await c.stop(t=grace)
        await c.delete(force=True)

    t0, t0_ns = _stamp()
    async with anyio.create_task_group() as tg:
        for c in containers:
            tg.start_soon(one, c)
    return Timed(time.perf_counter() - t0, t0_ns, time.time_ns(), tuple(names))


async def raw_kill_wait(
    containers: Sequence[Any], names: Sequence[str], grace: int, pause: Any = None
) -> Timed:
    """``kill TERM`` to all at once, ``wait`` on all under one deadline, ``KILL`` whatever is
    left at the deadline, then remove all concurrently; then the pause container, if any
    (``kill KILL`` + ``delete``, as asyncdeploy removes it)."""
    t0, t0_ns = _stamp()
    deadline = anyio.current_time() + grace
    exited = [False] * len(containers)

    async def term(c: Any) -> None:
        await c.kill(signal="SIGTERM")

    waited_ns: dict[str, int] = {}

    async def wait(i: int) -> None:
        with anyio.move_on_at(deadline):
            await containers[i].wait()
            waited_ns[names[i]] = time.time_ns()
            exited[i] = True

    async def kill_and_remove(i: int) -> None:
        if not exited[i]:
            try:
                await containers[i].kill(signal="SIGKILL")
            except aiodocker.DockerError:
                pass
        await containers[i].delete(force=True)

    async with anyio.create_task_group() as tg:
        for c in containers:
            tg.start_soon(term, c)
    sent = time.perf_counter() - t0
    async with anyio.create_task_group() as tg:
        for i in range(len(containers)):
            tg.start_soon(wait, i)
    waited = time.perf_counter() - t0
    async with anyio.create_task_group() as tg:
        for i in range(len(containers)):
            tg.start_soon(kill_and_remove, i)
    removed = time.perf_counter() - t0
    if pause is not None:
        await pause.kill(signal="SIGKILL")
        await pause.delete(force=True)
    return Timed(
        time.perf_counter() - t0,
        t0_ns,
        time.time_ns(),
        tuple(names),
        {
            "term_sent_s": round(sent, 4),
            "waits_done_s": round(waited, 4),
            "removed_s": round(removed, 4),
            "killed": exited.count(False),
            "wait_returned_ns": waited_ns,
        },
    )


async def raw_pods_kill_wait(
    pods: Sequence[tuple[Any, Sequence[Any], Sequence[str]]], grace: int
) -> Timed:
    """The delete-all floor: :func:`raw_kill_wait` on every pod (pause + its joined containers)
    at once, each pod's pause removed after its own containers; one deadline for all."""
    t0, t0_ns = _stamp()
    timings: list[Timed] = []

    async def one(pause: Any, containers: Sequence[Any], names: Sequence[str]) -> None:
        timings.append(await raw_kill_wait(containers, names, grace, pause))

    async with anyio.create_task_group() as tg:
        for pause, containers, names in pods:
            tg.start_soon(one, pause, containers, names)
    every = tuple(name for _, _, names in pods for name in names)
    waited = {k: v for t in timings for k, v in t.extra["wait_returned_ns"].items()}
    return Timed(
        time.perf_counter() - t0,
        t0_ns,
        time.time_ns(),
        every,
        {"killed": sum(t.extra["killed"] for t in timings), "wait_returned_ns": waited},
    )


async def raw_serial(containers: Sequence[Any], names: Sequence[str], grace: int) -> Timed:
    """One ``stop(t=grace)`` + ``delete`` after another."""
    t0, t0_ns = _stamp()
    for c in containers:
        await c.stop(t=grace)
        await c.delete(force=True)
    return Timed(time.perf_counter() - t0, t0_ns, time.time_ns(), tuple(names))
