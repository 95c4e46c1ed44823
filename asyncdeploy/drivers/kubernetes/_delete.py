"""Draining Pods: one list, one delete, a watch of the Pods and of their Events.

For the workloads of one ``drain`` call:

1. one list by label (:func:`find_pods`, the driver's ``find``) finds every Pod (a missing one
   raises ``WorkloadNotFound`` before anything is touched) and gives the ``resourceVersion`` the
   watch starts from; the drain takes what it found and lists no Pods again;
2. ``DrainStarted`` for each, then one collection delete by label, with ``gracePeriodSeconds``
   only when the caller overrides it (otherwise each Pod's own
   ``terminationGracePeriodSeconds`` applies, server-side). When the collection delete is refused
   (405, or 403 from an RBAC role without ``deletecollection``) or misses a Pod, that Pod is
   deleted on its own, with a ``uid`` precondition so a same-named successor is never hit;
3. one watch over all of them until every Pod is gone, resumed from a fresh list whenever it
   ends (:mod:`._watch`), under a deadline of each Pod's grace plus ``WATCH_MARGIN``.

What the watches show is handed to :class:`._drain.PodDrain`, which turns it into events.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import anyio
import attrs

from asyncdeploy.drivers.base import Found
from asyncdeploy.drivers.kubernetes import _status as pod_status
from asyncdeploy.drivers.kubernetes._api import PodAPI
from asyncdeploy.drivers.kubernetes._drain import WATCH_MARGIN, PodDrain, pod_uid
from asyncdeploy.drivers.kubernetes._errors import ENGINE
from asyncdeploy.drivers.kubernetes._watch import KubeletEvents, PodEvent, PodFollower, Resync
from asyncdeploy.errors import EngineAPIError, EngineError, WorkloadConflict, WorkloadNotFound
from asyncdeploy.events import DrainSummary, Emit
from asyncdeploy.labels import LABEL_WORKLOAD
from asyncdeploy.selectors import Selector

__all__ = ["PodsFound", "drain_pods", "find_pods"]


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
            status=404,
        )
    return PodsFound(
        names=tuple(names),
        namespace=namespace,
        pods=tuple(found[n] for n in names),
        resource_version=str(listing["metadata"]["resourceVersion"]),
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
) -> list[DrainSummary]:
    """Drain the Pods ``found`` concurrently, all timed from one start; one summary each."""
    if not found.names:
        return []
    namespace, selector = found.namespace, _named(found.names)
    started = anyio.current_time()
    drains = [
        PodDrain.of(pod, grace=grace_period_seconds, started=started, margin=margin, emit=emit)
        for pod in found.pods
    ]
    by_uid = {d.uid: d for d in drains}
    kubelet = KubeletEvents(api, namespace, set(by_uid), lambda e: by_uid[e.uid].kubelet(e))
    await kubelet.start()  # before the delete: nothing the kubelet records is missed
    for drain in drains:
        drain.begin()
    await _delete(api, namespace, selector, drains, grace_period_seconds)
    if not all(d.done for d in drains):
        async with anyio.create_task_group() as tg:
            tg.start_soon(kubelet.run)
            await _watch_until_gone(
                api, namespace, selector, found.resource_version, drains, margin
            )
            tg.cancel_scope.cancel()
    return [d.summary for d in drains if d.summary is not None]


async def _delete(
    api: PodAPI, namespace: str, selector: str, drains: list[PodDrain], grace: int | None
) -> None:
    """One collection delete; each Pod it did not reach is deleted on its own (uid-guarded)."""
    reached: set[str] = set()
    try:
        result = await api.delete_collection(namespace, label_selector=selector, grace=grace)
    except EngineError:
        pass  # 405, 403 without deletecollection, or worse: per-Pod deletes settle it
    else:
        by_workload = {d.workload: d for d in drains}
        for item in result.get("items") or []:
            reached.add(pod_uid(item))
            drain = by_workload.get(pod_status.workload_name(item))
            if drain is not None and pod_uid(item) != drain.uid:
                drain.errors.append(
                    f"the collection delete also hit pod {item['metadata']['name']} "
                    f"(uid {pod_uid(item)}), created after the drain began"
                )
    async with anyio.create_task_group() as tg:
        for drain in drains:
            if drain.uid not in reached:
                tg.start_soon(_delete_one, api, namespace, drain, grace)


async def _delete_one(api: PodAPI, namespace: str, drain: PodDrain, grace: int | None) -> None:
    try:
        await api.delete(namespace, drain.pod_name, uid=drain.uid, grace=grace)
    except (WorkloadNotFound, WorkloadConflict):
        pass  # already gone, or replaced by a successor: the watch sees our uid is gone
    except EngineAPIError as exc:
        drain.fail(f"delete pod {drain.pod_name}: {exc.message}")  # refused: it stays
    except EngineError as exc:
        drain.errors.append(f"delete pod {drain.pod_name}: {exc.message}")  # it may have landed


async def _watch_until_gone(
    api: PodAPI,
    namespace: str,
    selector: str,
    version: str,
    drains: list[PodDrain],
    margin: float,
) -> None:
    by_uid = {d.uid: d for d in drains}
    follower = PodFollower(api, namespace, label_selector=selector)

    def stuck(drain: PodDrain) -> str:
        why = f"; last watch error: {follower.last_error}" if follower.last_error else ""
        return (
            f"pod {drain.pod_name} was still there {margin:g} s after its "
            f"{drain.grace} s grace period{why}"
        )

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
                drain.fail(stuck(drain))
        return all(d.done for d in drains)

    def poll() -> float:
        return min(d.give_up for d in drains if not d.done) - anyio.current_time()

    # The follower hands control back at each give-up time (as the watch's timeoutSeconds); this
    # outer deadline only guards against a server that ignores timeoutSeconds.
    try:
        with anyio.move_on_at(max(d.give_up for d in drains) + margin):
            await follower.run(handle, resource_version=version, poll=poll)
    except EngineError as exc:  # watching is refused (403, ...): the Pods cannot be followed
        for drain in drains:
            drain.fail(f"cannot follow pod {drain.pod_name}: {exc.message}")
    for drain in drains:
        drain.fail(stuck(drain))
