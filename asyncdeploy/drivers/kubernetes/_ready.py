"""``wait_ready`` on Kubernetes: the Pod Ready, and every container without a probe settled.

A Pod without readiness probes is Ready the moment its containers start, so a server that dies
a second later would pass. As on Docker and Podman, a run container without a probe must also
keep running, with no restart, for the settle time past its start; on Kubernetes the API shows
an exit only once the kubelet has noticed it (its relist, every second) and written the Pod's
status, which on a loaded node takes seconds (measured on the project's one-node cluster at load
9 to 11: an exit shown 0.7 to 1.9 s after the kubelet's ``finishedAt``, itself in whole seconds). So
the window is read that much later (:func:`settled_at`): a crash inside it is on record when the
wait decides. A container that ends, restarts or will not start fails the wait with
``CreateError``: the kubelet's or the scheduler's reason, the exit code and the last log lines.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Mapping
from typing import Any

import anyio
import attrs

from asyncdeploy._errors import ENGINE_FAILURES, CreateError, EngineTimeout, WorkloadNotFound
from asyncdeploy.drivers.kubernetes import _status as pod_status
from asyncdeploy.drivers.kubernetes._api import PodAPI
from asyncdeploy.drivers.kubernetes._errors import ENGINE
from asyncdeploy.drivers.kubernetes._kubelet import StartupFailure, startup_failure
from asyncdeploy.drivers.kubernetes._watch import PodEvent, PodFollower, Resync
from asyncdeploy.labels import LABEL_WORKLOAD

__all__ = ["REPORT_CAP", "REPORT_FLOOR", "settled_at", "startup_error", "wait_until_ready"]

REPORT_FLOOR = 1.0  # the kubelet sees an exit at its next relist, every second
REPORT_CAP = 10.0  # the longest report delay waited for: the window is then long on record
LOG_LINES = 20


def settled_at(
    *, started: float | None, written: float | None, seen: float, settle: float
) -> float:
    """When a run container without a probe counts as settled (Unix time).

    ``started``: the kubelet's ``startedAt`` (whole seconds: the true start is within the next
    second); ``written``: when the API received the kubelet's status write that showed it
    running (its ``managedFields`` time, whole seconds); ``seen``: when this wait first saw it
    running. The window is ``settle`` s past the start; an exit in it reaches the API once the
    kubelet has noticed it (:data:`REPORT_FLOOR`, its relist period) and written it, which takes
    about as long as writing the start took (``written - started``): the container is settled
    when all that has passed, at most :data:`REPORT_CAP` past the window. A container that
    started long ago is settled at once (an unchanged workload waits for nothing); ``settle``
    0: running is enough, at once. Without ``started``, the window starts at ``seen``.
    """
    if settle <= 0:
        return seen
    if started is None or started > seen:  # not said, or another clock: from the sighting
        started, written = seen - 1, None
    delay = 0.0 if written is None else max(0.0, written - started)
    return started + 1 + settle + min(REPORT_FLOOR + delay, REPORT_CAP)


@attrs.frozen
class _Seen:
    settled: float  # on the event loop's clock (settled_at converted at the first sight)
    restarts: int


async def wait_until_ready(
    api: PodAPI, namespace: str, name: str, *, timeout: float, settle: float
) -> dict[str, Any]:
    """The Pod once it is Ready and every run container without a readiness probe is settled;
    ``CreateError`` when one ends or restarts first; ``EngineTimeout`` after ``timeout``."""
    deadline = anyio.current_time() + timeout
    seen: dict[str, _Seen] = {}
    while True:
        try:
            left = max(0.0, deadline - anyio.current_time())
            pod = await _until_ready(api, namespace, name, timeout=left)
        except EngineTimeout:
            raise EngineTimeout(
                f"workload {name!r} was not ready within {timeout:g} s", engine=ENGINE
            ) from None
        now, wall = anyio.current_time(), time.time()  # the loop's clock; the cluster's times
        statuses = pod_status.container_statuses(pod)
        unchecked = [
            spec["name"]
            for role, spec in pod_status.container_specs(pod)
            if role == "run" and not spec.get("readinessProbe")
        ]
        for container in unchecked:
            entry = statuses.get(container) or {}
            restarts = int(entry.get("restartCount") or 0)
            if container in seen and seen[container].restarts != restarts:
                raise await startup_error(api, namespace, name, _restarted(pod, container))
            if container not in seen:
                running = (entry.get("state") or {}).get("running") or {}
                started = pod_status.timestamp(running.get("startedAt")) or None
                written = pod_status.kubelet_wrote(pod)
                settled = settled_at(started=started, written=written, seen=wall, settle=settle)
                seen[container] = _Seen(now + settled - wall, restarts)
        wait = max((seen[c].settled - now for c in unchecked), default=0.0)
        if wait <= 0:
            return pod
        if now + wait > deadline:
            raise EngineTimeout(
                f"workload {name!r} was not ready within {timeout:g} s", engine=ENGINE
            )
        await anyio.sleep(wait)


async def _until_ready(api: PodAPI, namespace: str, name: str, *, timeout: float) -> dict[str, Any]:
    """Watch the Pod until its ``Ready`` condition is True; the Pod then.

    ``CreateError`` at once, naming the container, when the Pod will not start
    (:func:`._kubelet.startup_failure`): no node can take it ("Insufficient cpu"), an image
    cannot be pulled (``ErrImagePull``, ``ImagePullBackOff``, ``ErrImageNeverPull``), the
    container cannot be created (``CreateContainerConfigError``), it crash-loops, an init
    container fails, a run container ends, or the Pod fails or is deleted meanwhile (with the
    exit code and the container's last log lines when it ran) — the Pod is left for
    inspection; ``WorkloadNotFound`` when it is (or goes) missing; ``EngineTimeout`` after
    ``timeout``.
    """
    ready: list[dict[str, Any]] = []
    failed: list[StartupFailure] = []

    def check(pod: Mapping[str, Any]) -> bool:
        if (pod.get("metadata") or {}).get("deletionTimestamp"):
            raise CreateError(f"pod {name} is being deleted; it will not become ready")
        if (failure := startup_failure(pod)) is not None:
            failed.append(failure)
            return True
        if pod_status.pod_ready(pod):
            ready.append(dict(pod))
            return True
        return False

    def handle(event: PodEvent) -> bool:
        if isinstance(event, Resync):
            if not event.pods:
                raise WorkloadNotFound(
                    f"no workload named {name!r} in namespace {namespace}",
                    engine=ENGINE,
                )
            return check(event.pods[0])
        if event.type == "DELETED":
            raise WorkloadNotFound(f"pod {name} was deleted", engine=ENGINE)
        return check(event.pod)

    follower = PodFollower(
        api, namespace, label_selector=LABEL_WORKLOAD, field_selector=f"metadata.name={name}"
    )
    deadline = anyio.current_time() + timeout
    try:
        with anyio.fail_after(timeout):
            await follower.run(handle, poll=lambda: deadline - anyio.current_time())
            if failed:
                raise await startup_error(api, namespace, name, failed[0])
    except TimeoutError:
        raise EngineTimeout(
            f"workload {name!r} was not ready within {timeout:g} s", engine=ENGINE
        ) from None
    return ready[-1]


async def startup_error(
    api: PodAPI, namespace: str, name: str, failure: StartupFailure
) -> CreateError:
    """The error for a Pod that will not start: the kubelet's or the scheduler's reason and
    message, and the end of the container's log when it ran."""
    where = f"{failure.container} of {name!r}" if failure.container else repr(name)
    message = f"{failure.what}: {where}"
    if failure.message:
        message += f": {failure.message}"
    if failure.exit_code is None and failure.what != "container exited":
        return CreateError(message, exit_code=failure.exit_code)  # it never ran: no logs
    lines: collections.deque[str] = collections.deque(maxlen=LOG_LINES)
    try:
        async with api.log_lines(namespace, name, container=failure.container, follow=False) as out:
            async for line in out:
                lines.append(line)
    except ENGINE_FAILURES:
        pass  # best effort: the error is about the exit, not the logs
    return CreateError(message, exit_code=failure.exit_code, logs="".join(lines))


def _restarted(pod: Mapping[str, Any], container: str) -> StartupFailure:
    """A run container that ended and was restarted while the wait settled: its last exit."""
    entry = pod_status.container_statuses(pod).get(container) or {}
    last = pod_status.terminated({"state": entry.get("lastState")}) or {}
    code = last.get("exitCode")
    return StartupFailure(
        "container exited", container, None if code is None else int(code), reason="Restarted"
    )
