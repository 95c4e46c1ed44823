"""Draining Pods: one list, a uid-guarded delete per Pod, a watch of the Pods and of their Events.

For the workloads of one ``drain`` call:

1. one list by label (:func:`find_pods`, the driver's ``find``) finds every Pod (a missing one
   raises ``WorkloadNotFound`` before anything is touched) and gives the ``resourceVersion`` the
   watch starts from; the drain takes what it found and lists no Pods again;
2. ``DrainStarted`` for each, then one delete per Pod, all at once, each with the ``uid``
   precondition of the Pod that was found, so a same-named successor created since is never
   hit (a collection delete cannot carry a uid per Pod). ``gracePeriodSeconds`` is sent only
   when the caller overrides it (otherwise each Pod's own ``terminationGracePeriodSeconds``
   applies, server-side). A delete that meets a lost connection, a timeout, a 429 or a 5xx is
   sent again with backoff (waiting what ``Retry-After`` asks) until ``GIVE_UP_AFTER`` past the
   Pod's deadline; sending it twice is harmless (the uid guard, and a second graceful delete
   never lengthens the first);
3. one watch over all of them, beside the deletes, until every Pod is gone, resumed from a fresh
   list whenever it ends (:mod:`._watch`), under a deadline of each Pod's grace plus its margin
   (:func:`._pod_states.teardown_margin`), or until the caller's ``timeout`` from the start;
   a Pod still there then whose containers all ended is reported tearing down, not failed;
   one whose node had stopped reporting (its Lease and Node read ``NODE_CHECK_LEAD`` before
   the give-up time, :func:`._status.node_silence`) ends as ``NodeUnreachable``.

Cancelled (a second Ctrl-C reaches here as a cancellation: the kill switch), the drain is finished
shielded: a grace-0 delete of every Pod still there (uid-guarded, retried the same way), the
watch until they are gone (``KILL_WAIT``), ``DrainFinished`` for each; then the cancellation
goes on. What the watches show is handed to :class:`._pod_states.PodDrainReader`, which turns
it into events. With ``-A`` (:func:`find_pods_everywhere`) the namespaces are drained side by side
under one start (:func:`drain_namespaces`). After a drain, a plan's Service goes with its last Pod
(:func:`remove_unused_services`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import anyio
import attrs

from asyncdeploy._backoff import POD_DELETE
from asyncdeploy._errors import (
    ENGINE_FAILURES,
    EngineAPIError,
    EngineFailure,
    EngineTimeout,
    EngineUnavailable,
    WorkloadConflict,
    WorkloadNotFound,
)
from asyncdeploy._events import DrainSummary, Emit
from asyncdeploy._groups import lone_error
from asyncdeploy._selectors import Selector
from asyncdeploy.drivers.base import Found
from asyncdeploy.drivers.kubernetes import _status as pod_status
from asyncdeploy.drivers.kubernetes._api import PodAPI
from asyncdeploy.drivers.kubernetes._errors import ENGINE, RetryLater
from asyncdeploy.drivers.kubernetes._pod_states import (
    KILL_WAIT,
    WATCH_MARGIN,
    PodDrainReader,
    pod_uid,
)
from asyncdeploy.drivers.kubernetes._traffic import TrafficWatch
from asyncdeploy.drivers.kubernetes._watch import KubeletEvents, PodEvent, PodFollower, Resync
from asyncdeploy.labels import LABEL_SERVICE, LABEL_WORKLOAD

__all__ = [
    "GIVE_UP_AFTER",
    "PodsFound",
    "PodsFoundEverywhere",
    "drain_namespaces",
    "drain_pods",
    "find_pods",
    "find_pods_everywhere",
    "remove_unused_services",
]

_log = logging.getLogger(__name__)
GIVE_UP_AFTER = 5.0  # past a Pod's deadline: how long its delete is tried again
NODE_CHECK_LEAD = 2.0  # before a Pod's give-up time: its node is read (is it still reporting?)


@attrs.frozen(kw_only=True)
class PodsFound(Found):
    """What one list of Pods found: the Pods and the ``resourceVersion`` the watch starts from."""

    namespace: str
    pods: tuple[Mapping[str, Any], ...]
    resource_version: str


async def find_pods(
    api: PodAPI, namespace: str, names: Sequence[str] | None, selector: Selector | None = None
) -> PodsFound:
    """One list call: the named workloads' Pods (a missing one raises ``WorkloadNotFound``), or
    with ``names`` None every workload ``selector`` matches (every one for None)."""
    if names is None:
        label_selector = LABEL_WORKLOAD if selector is None else f"{LABEL_WORKLOAD},{selector}"
    else:
        names = list(dict.fromkeys(names))
        if not names:
            return PodsFound(names=(), namespace=namespace, pods=(), resource_version="")
        label_selector = _named(names)
    listing = await api.list_pods(namespace, label_selector=label_selector)
    found = {pod_status.workload_name(p): p for p in listing.get("items") or []}
    if names is None:
        names = sorted(found)
    missing = [n for n in names if n not in found]
    if missing:
        raise WorkloadNotFound(
            f"no workload named {', '.join(map(repr, missing))} in namespace {namespace}",
            engine=ENGINE,
        )
    return PodsFound(
        names=tuple(names),
        namespace=namespace,
        pods=tuple(found[n] for n in names),
        resource_version=str(listing["metadata"]["resourceVersion"]),
    )


@attrs.frozen(kw_only=True)
class PodsFoundEverywhere(Found):
    """What one list of every namespace's Pods found (``-A``): one :class:`PodsFound` per
    namespace, all with the list's resourceVersion (the cluster's: valid in each namespace).
    ``names`` are ``namespace/name``, as the drain's events name the workloads: the same name
    may be a workload in two namespaces."""

    parts: tuple[PodsFound, ...]


async def find_pods_everywhere(api: PodAPI, selector: Selector | None) -> PodsFoundEverywhere:
    """One list call across the namespaces: every workload ``selector`` matches (every one for
    None), grouped by namespace."""
    label_selector = LABEL_WORKLOAD if selector is None else f"{LABEL_WORKLOAD},{selector}"
    listing = await api.list_pods_everywhere(label_selector=label_selector)
    version = str(listing["metadata"]["resourceVersion"])
    by_namespace: dict[str, dict[str, Mapping[str, Any]]] = {}
    for pod in listing.get("items") or []:
        namespace = str((pod.get("metadata") or {}).get("namespace", ""))
        by_namespace.setdefault(namespace, {})[pod_status.workload_name(pod)] = pod
    parts = tuple(
        PodsFound(
            names=tuple(sorted(pods)),
            namespace=namespace,
            pods=tuple(pods[name] for name in sorted(pods)),
            resource_version=version,
        )
        for namespace, pods in sorted(by_namespace.items())
    )
    return PodsFoundEverywhere(
        names=tuple(f"{part.namespace}/{name}" for part in parts for name in part.names),
        parts=parts,
    )


def _named(names: Sequence[str]) -> str:
    return f"{LABEL_WORKLOAD} in ({','.join(sorted(names))})"


async def drain_pods(
    api: PodAPI,
    found: PodsFound,
    *,
    grace_period_seconds: int | None,
    emit: Emit,
    margin: float = WATCH_MARGIN,
    started: float | None = None,
    qualified: bool = False,
    timeout: float | None = None,
) -> list[DrainSummary]:
    """Drain the Pods ``found`` concurrently, all timed from one start (``started``, else now);
    one summary each. ``qualified``: the events name each workload ``namespace/name``;
    ``timeout``: how long from the start to wait for the Pods to go (default: each one's
    deadline plus its teardown margin)."""
    if not found.names:
        return []
    namespace, selector = found.namespace, _named(found.names)
    if started is None:
        started = anyio.current_time()
    drains = [
        PodDrainReader.of(
            pod,
            grace=grace_period_seconds,
            started=started,
            margin=margin,
            emit=emit,
            workload=f"{namespace}/{name}" if qualified else None,
            timeout=timeout,
        )
        for name, pod in zip(found.names, found.pods, strict=True)
    ]
    by_uid = {d.uid: d for d in drains}
    kubelet = KubeletEvents(api, namespace, set(by_uid), lambda e: by_uid[e.uid].kubelet(e))
    traffic = TrafficWatch(api, namespace, drains, list(found.pods))
    try:
        # Before the delete, side by side (one round trip, not three, before the first signal):
        # the Events listed, so nothing the kubelet records is missed; where the Pods are
        # endpoints. Both go on without what they cannot read.
        async with anyio.create_task_group() as starting:
            starting.start_soon(kubelet.start)
            starting.start_soon(traffic.start)
        for drain in drains:
            drain.begin()
        async with anyio.create_task_group() as tg:
            tg.start_soon(kubelet.run)
            tg.start_soon(traffic.run)
            await _delete_and_follow(
                api, namespace, selector, found.resource_version, drains, grace_period_seconds
            )
            tg.cancel_scope.cancel()
    except anyio.get_cancelled_exc_class():
        with anyio.CancelScope(shield=True):
            await _kill(api, namespace, selector, drains)
        raise
    return [d.summary for d in drains if d.summary is not None]


async def drain_namespaces(
    api: PodAPI,
    parts: Sequence[PodsFound],
    *,
    grace_period_seconds: int | None,
    emit: Emit,
    margin: float = WATCH_MARGIN,
    qualified: bool = False,
    timeout: float | None = None,
) -> list[DrainSummary]:
    """Drain the Pods of one or more namespaces (``-A``) side by side, timed from one start (one
    deadline, one ``timeout``); the summaries in the order of ``parts``. A lone exception of the namespaces'
    drains (a cancellation: each finishes shielded first) is raised as itself."""
    started = anyio.current_time()
    drained: dict[int, list[DrainSummary]] = {}

    async def drain_part(index: int, part: PodsFound) -> None:
        drained[index] = await drain_pods(
            api,
            part,
            grace_period_seconds=grace_period_seconds,
            emit=emit,
            margin=margin,
            started=started,
            qualified=qualified,
            timeout=timeout,
        )

    if len(parts) == 1:
        await drain_part(0, parts[0])
    else:
        try:
            async with anyio.create_task_group() as tg:
                for index, part in enumerate(parts):
                    tg.start_soon(drain_part, index, part)
        except BaseExceptionGroup as group:
            raise lone_error(group) from None
    return [s for index in sorted(drained) for s in drained[index]]


async def remove_unused_services(api: PodAPI, found: PodsFound) -> None:
    """Delete the Service of each drained Pod's plan once no other Pod of it is left (a
    ``replace`` keeps it: its new instance carries the same label)."""
    names = {
        str(labels[LABEL_SERVICE])
        for pod in found.pods
        if LABEL_SERVICE in (labels := (pod.get("metadata") or {}).get("labels") or {})
    }
    for name in sorted(names):
        selector = f"{LABEL_SERVICE}={name}"
        try:
            pods = await api.list_pods(found.namespace, label_selector=selector)
            if any(
                not (p.get("metadata") or {}).get("deletionTimestamp")
                for p in pods.get("items") or []
            ):
                continue  # another instance of the plan serves behind it
            services = await api.list_pods(
                found.namespace, label_selector=selector, resource="services"
            )
            for service in services.get("items") or []:
                metadata = service["metadata"]
                await api.delete_service(found.namespace, metadata["name"], uid=metadata["uid"])
        except (WorkloadNotFound, WorkloadConflict):
            pass  # gone, or replaced by someone else's meanwhile
        except ENGINE_FAILURES as exc:
            _log.warning("the Service %s/%s was not removed: %s", found.namespace, name, exc)


async def _kill(api: PodAPI, namespace: str, selector: str, drains: list[PodDrainReader]) -> None:
    """The drain was cut short: a grace-0 delete of every Pod still there, then follow them
    until they are gone (``KILL_WAIT``): every drain ends with its ``DrainFinished``."""
    for drain in drains:
        if not drain.began:
            drain.begin()  # cancelled before the first event: the stream still tells it all
        drain.kill()
    left = [d for d in drains if not d.done]
    if left:
        with anyio.move_on_after(KILL_WAIT + POD_DELETE.longest):  # the shielded part's bound
            await _delete_and_follow(api, namespace, selector, None, left, 0)
    for drain in left:
        drain.fail(drain.stuck())


async def _delete_and_follow(
    api: PodAPI,
    namespace: str,
    selector: str,
    version: str | None,
    drains: list[PodDrainReader],
    grace: int | None,
) -> None:
    """Delete every Pod (uid-guarded, retried) while one watch follows them until they are gone
    or past their give-up time; ``version`` None starts the watch from a fresh list."""
    async with anyio.create_task_group() as tg:
        watching = anyio.CancelScope()

        def settled() -> None:  # a delete ended a drain: the watch may have nothing left
            if all(d.done for d in drains):
                watching.cancel()

        for drain in drains:
            tg.start_soon(_delete_one, api, namespace, drain, grace, settled)
        tg.start_soon(_check_nodes, api, drains)
        with watching:
            await _watch_until_gone(api, namespace, selector, version, drains)
        tg.cancel_scope.cancel()  # every drain is done: no delete is worth retrying


async def _check_nodes(api: PodAPI, drains: list[PodDrainReader]) -> None:
    """Shortly before each give-up time (``NODE_CHECK_LEAD``), read the nodes of the Pods still
    there then: a Pod held by a node that stopped reporting ends as ``NodeUnreachable`` rather
    than as tearing down or stuck (:meth:`PodDrainReader.suspect`). A node that cannot be read
    in time (no right to read Nodes or Leases, a slow answer) is not judged."""
    for at in sorted({d.give_up for d in drains}):
        await anyio.sleep(max(0.0, at - NODE_CHECK_LEAD - anyio.current_time()))
        due = [d for d in drains if not d.done and d.give_up <= at and d.node]
        for node in sorted({str(d.node) for d in due}):
            with anyio.move_on_after(NODE_CHECK_LEAD):
                silence = await _node_silence(api, node)
                for drain in due:
                    if drain.node == node:
                        drain.suspect(silence)


async def _node_silence(api: PodAPI, name: str) -> pod_status.NodeSilence | None:
    """What the node's Lease and Node say (:func:`._status.node_silence`); what cannot be read
    counts as unknown."""
    read: list[Mapping[str, Any] | None] = []
    for call in (api.read_node, api.read_node_lease):
        try:
            read.append(await call(name))
        except ENGINE_FAILURES as exc:
            _log.debug("node %s: %s", name, exc)
            read.append(None)
    return pod_status.node_silence(name, read[0], read[1], time.time())


def _retryable(exc: EngineFailure) -> bool:
    """Worth sending again: a lost connection, a timeout, a 429 (too many requests) or a 5xx."""
    if isinstance(exc, EngineUnavailable | EngineTimeout):
        return True
    return isinstance(exc, EngineAPIError) and (exc.status == 429 or exc.status >= 500)


async def _delete_one(
    api: PodAPI,
    namespace: str,
    drain: PodDrainReader,
    grace: int | None,
    settled: Callable[[], None],
) -> None:
    """Delete the drain's Pod, only if its uid still matches; retried until ``GIVE_UP_AFTER``
    past its deadline (or its give-up time, when killing), honouring ``Retry-After``."""
    pauses, tries, last = POD_DELETE.pauses(), 0, False
    give_up = drain.give_up if drain.killing else drain.books.deadline + GIVE_UP_AFTER
    while True:
        tries += 1
        try:
            await api.delete(namespace, drain.pod_name, uid=drain.uid, grace=grace)
            return
        except (WorkloadNotFound, WorkloadConflict):
            return  # already gone, or replaced by a successor: the watch sees our uid is gone
        except ENGINE_FAILURES as exc:
            pause = next(pauses)
            wait = exc.after if isinstance(exc, RetryLater) else pause
            left = give_up - anyio.current_time()
            if _retryable(exc) and left > 0 and not last:
                # the last try comes at the give-up time, and is the last whatever the clock
                # reads then: a clock that has not moved past it (rounding, a virtual clock)
                # left ``left`` a hair above 0 and the loop sent a delete without pause, 1,000
                # of them in one test, until one landed
                last = wait >= left
                await anyio.sleep(min(wait, left))
                continue
            if drain.killing:
                drain.fail(
                    f"kill pod {drain.pod_name} (its grace-0 delete): {exc.message}; "
                    "it may still be draining"
                )
            elif drain.deleting:
                return  # an earlier try landed after all: the watch follows it
            elif _retryable(exc):
                drain.fail(
                    f"delete pod {drain.pod_name}: {exc.message} (tried {tries} times in "
                    f"{anyio.current_time() - drain.books.started:.1f} s; it was not deleted)"
                )
            else:
                drain.fail(f"delete pod {drain.pod_name}: {exc.message} (it was not deleted)")
            settled()
            return


async def _watch_until_gone(
    api: PodAPI,
    namespace: str,
    selector: str,
    version: str | None,
    drains: list[PodDrainReader],
) -> None:
    by_uid = {d.uid: d for d in drains}
    follower = PodFollower(api, namespace, label_selector=selector)

    def handle(event: PodEvent) -> bool:
        if isinstance(event, Resync):
            present = {pod_uid(p): p for p in event.pods}
            for drain in drains:
                pod = present.get(drain.uid)
                if pod is None:
                    drain.removed(None)  # it went while no watch was open
                else:
                    drain.observe(pod)
        elif (changed := by_uid.get(pod_uid(event.pod))) is not None:
            if event.type == "DELETED":
                changed.removed(event.pod)
            else:
                changed.observe(event.pod)
        now = anyio.current_time()
        for drain in drains:
            if not drain.done and now >= drain.give_up:
                drain.ran_out(follower.last_error)
        return all(d.done for d in drains)

    def poll() -> float:
        left = [d.give_up for d in drains if not d.done]
        return min(left, default=anyio.current_time()) - anyio.current_time()

    # The follower hands control back at each give-up time (as the watch's timeoutSeconds); this
    # outer deadline only guards against a server that ignores timeoutSeconds.
    try:
        latest = max(d.give_up for d in drains)
        with anyio.move_on_at(latest + max(d.margin for d in drains)):
            await follower.run(handle, resource_version=version, poll=poll)
    except ENGINE_FAILURES as exc:  # watching is refused (403, ...): the Pods cannot be followed
        for drain in drains:
            drain.fail(f"cannot follow pod {drain.pod_name}: {exc.message}")
    for drain in drains:
        drain.ran_out(follower.last_error)
