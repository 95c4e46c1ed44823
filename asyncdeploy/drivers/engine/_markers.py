"""Markers on Docker and Podman: a labelled volume, whose name the engine gives out once.

A volume is the one engine object that needs no image and holds labels. Creation is atomic on
both engines, but they answer a taken name differently: Podman refuses it (409), Docker returns
the existing volume as if created. So every create is followed by a look: the marker is ours
when it holds our record.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import Any, ClassVar

import aiodocker

from asyncdeploy.drivers.engine import _spec as spec
from asyncdeploy.errors import WorkloadConflict, WorkloadNotFound
from asyncdeploy.labels import LABEL_LOCK, LABEL_LOCK_RECORD

__all__ = ["EngineMarkers"]


class EngineMarkers:
    name: ClassVar[str]
    _client: aiodocker.Docker

    def _errors(self, what: str) -> AbstractContextManager[None]:
        raise NotImplementedError  # the driver's one translation of engine errors

    async def _marker_record(self, key: str) -> str | None:
        try:
            with self._errors(f"inspect marker {key}"):
                handle = aiodocker.volumes.DockerVolume(self._client, spec.path_segment(key))  # type: ignore[no-untyped-call]
                volume: Any = await handle.show()  # type: ignore[no-untyped-call]
        except WorkloadNotFound:
            return None
        return str((volume.get("Labels") or {}).get(LABEL_LOCK_RECORD, ""))

    async def hold_marker(self, key: str, record: str, *, labels: Mapping[str, str]) -> str | None:
        body = {
            "Name": key,
            "Labels": {**labels, LABEL_LOCK: key, LABEL_LOCK_RECORD: record},
        }
        try:
            with self._errors(f"create marker {key}"):
                await self._client.volumes.create(body)  # type: ignore[no-untyped-call]
        except WorkloadConflict:
            pass  # Podman: the name is taken; whose it is, the look says
        held = await self._marker_record(key)
        if held == record:
            return None
        return held if held is not None else ""  # removed meanwhile: unreadable, so stale

    async def drop_marker(self, key: str, record: str) -> None:
        if await self._marker_record(key) != record:
            return  # someone else's now (or gone)
        try:
            with self._errors(f"remove marker {key}"):
                handle = aiodocker.volumes.DockerVolume(self._client, spec.path_segment(key))  # type: ignore[no-untyped-call]
                await handle.delete()  # type: ignore[no-untyped-call]
        except WorkloadNotFound:
            pass
