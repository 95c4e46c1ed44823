"""A plan's Service made to say what the plan says: created, updated in place (its name and
ClusterIP kept) when the plan changed its ports, removed when a replacement's plan dropped it.

The Service is shared by every instance of the plan. While an older instance still serves behind
it (a surge), the new plan's ports would send its traffic where the old Pod does not listen: the
update then waits until the new instance is ready (``wait_ready`` applies it), and the drain of
the old one follows. With no other instance (a create, a recreate) it is applied at once.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from asyncdeploy._errors import WorkloadConflict, WorkloadNotFound
from asyncdeploy.drivers.kubernetes._api import PodAPI
from asyncdeploy.drivers.kubernetes._manifest import service_manifest, service_name
from asyncdeploy.labels import LABEL_SERVICE
from asyncdeploy.plan import WorkloadPlan

__all__ = ["apply_service"]

_COMPARED = ("type", "selector")
TRIES = 3  # a Service another writer changed between the read and the write is read again


async def apply_service(
    api: PodAPI, plan: WorkloadPlan, namespace: str, *, wait_for_others: bool
) -> None:
    """Create the plan's Service, or update the one there to the plan (ports, type, selector).
    ``wait_for_others``: leave an existing Service as it is while a Pod other than this plan's
    own selects it (its ``wait_ready`` applies the change later)."""
    if plan.service is None:
        if plan.instance_of is not None:  # a replacement: its plan may have dropped it
            await _remove_dropped(api, namespace, plan.instance_of, plan.name)
        return
    wanted = service_manifest(plan, namespace=namespace)
    name = service_name(plan)
    for attempt in range(TRIES):
        try:
            await api.create_service(namespace, wanted)
            return
        except WorkloadConflict:
            pass  # made with an earlier instance of the plan: it selects this one too
        try:
            live = await api.read_service(namespace, name)
        except WorkloadNotFound:
            continue  # removed meanwhile (the last other instance drained): create it
        if not _differs(live.get("spec") or {}, wanted["spec"]):
            return
        if wait_for_others and await _others_selected(api, namespace, name, plan.name):
            return
        body = copy.deepcopy(live)
        body["spec"].update({key: wanted["spec"][key] for key in (*_COMPARED, "ports")})
        try:
            await api.replace_service(namespace, body)  # at the resourceVersion read
            return
        except WorkloadConflict:
            if attempt == TRIES - 1:
                raise  # changed by someone else each time: said, not overwritten blindly


def _port(entry: Mapping[str, Any]) -> tuple[object, ...]:
    return (
        entry.get("name") or "",
        entry.get("protocol") or "TCP",
        entry.get("port"),
        entry.get("targetPort") or entry.get("port"),
    )


def _differs(live: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    if any(live.get(key) != wanted.get(key) for key in _COMPARED):
        return True
    ports = sorted(map(_port, live.get("ports") or []), key=repr)
    return ports != sorted(map(_port, wanted.get("ports") or []), key=repr)


async def _remove_dropped(api: PodAPI, namespace: str, service: str, pod: str) -> None:
    """The plan's Service, which its new plan no longer asks for (a recreate kept it), removed
    once no other Pod is behind it (a surge's old instance: its drain removes it then)."""
    try:
        live = await api.read_service(namespace, service)
    except WorkloadNotFound:
        return
    metadata = live.get("metadata") or {}
    if (metadata.get("labels") or {}).get(LABEL_SERVICE) != service:
        return  # not asyncdeploy's
    if await _others_selected(api, namespace, service, pod):
        return
    try:
        await api.delete_service(namespace, service, uid=str(metadata.get("uid")))
    except (WorkloadNotFound, WorkloadConflict):
        pass  # gone, or made again by someone else meanwhile


async def _others_selected(api: PodAPI, namespace: str, service: str, pod: str) -> bool:
    """Whether a Pod other than ``pod`` (and not being deleted) is behind the Service."""
    pods = await api.list_pods(namespace, label_selector=f"{LABEL_SERVICE}={service}")
    return any(
        (p.get("metadata") or {}).get("name") != pod
        and not (p.get("metadata") or {}).get("deletionTimestamp")
        for p in pods.get("items") or []
    )
