"""Markers on Kubernetes: a ConfigMap, whose name the API server gives out once (409 after).

The record sits in its data (labels cannot hold JSON); the delete carries a UID precondition, so
a marker re-created by someone else after the look is never removed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from asyncdeploy._errors import WorkloadConflict, WorkloadNotFound
from asyncdeploy.drivers.kubernetes._api import PodAPI, resource_path
from asyncdeploy.labels import LABEL_LOCK

__all__ = ["ConfigMapMarkers"]

RECORD = "record"


class ConfigMapMarkers:
    def __init__(self, api: PodAPI, namespace: str) -> None:
        self._api = api
        self._namespace = namespace

    async def _read(self, key: str) -> dict[str, Any] | None:
        path = resource_path("configmaps", self._namespace, key)
        try:
            return await self._api.call("GET", path, f"get configmap {self._namespace}/{key}")
        except WorkloadNotFound:
            return None

    async def read(self, key: str) -> str | None:
        found = await self._read(key)
        return None if found is None else str((found.get("data") or {}).get(RECORD, ""))

    async def hold(self, key: str, record: str, *, labels: Mapping[str, str]) -> str | None:
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": key, "labels": {**labels, LABEL_LOCK: "true"}},
            "data": {RECORD: record},
        }
        path = resource_path("configmaps", self._namespace)
        try:
            await self._api.call(
                "POST", path, f"create configmap {self._namespace}/{key}", body=body
            )
            return None
        except WorkloadConflict:
            found = await self._read(key)
            return "" if found is None else str((found.get("data") or {}).get(RECORD, ""))

    async def keys(self) -> list[str]:
        """Every marker's key in the namespace (a ConfigMap labelled as one)."""
        path = resource_path("configmaps", self._namespace)
        found = await self._api.call(
            "GET",
            path,
            f"list configmaps {self._namespace}",
            query=[("labelSelector", f"{LABEL_LOCK}=true")],
        )
        return sorted(str(item["metadata"]["name"]) for item in found.get("items") or [])

    async def drop(self, key: str, record: str) -> None:
        found = await self._read(key)
        if found is None or (found.get("data") or {}).get(RECORD) != record:
            return
        path = resource_path("configmaps", self._namespace, key)
        options = {"preconditions": {"uid": found["metadata"]["uid"]}}
        try:
            await self._api.call(
                "DELETE", path, f"delete configmap {self._namespace}/{key}", body=options
            )
        except (WorkloadNotFound, WorkloadConflict):
            pass  # gone, or re-created by another replace: not ours to remove
