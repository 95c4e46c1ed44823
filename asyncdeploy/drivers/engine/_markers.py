"""Markers on Docker and Podman: a labelled volume, whose name the engine gives out once.

A volume is the one engine object that needs no image and holds labels. Creation is atomic on
both engines, but they answer a taken name differently: Podman refuses it (409), Docker returns
the existing volume as if created. So every create is followed by a look: the marker is ours
when it holds our record.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from asyncdeploy.drivers.engine._session import EngineSession
from asyncdeploy.errors import WorkloadConflict, WorkloadNotFound
from asyncdeploy.labels import LABEL_LOCK, LABEL_LOCK_RECORD

__all__ = ["EngineMarkers"]


@attrs.frozen
class EngineMarkers:
    """``hold_marker`` and ``drop_marker`` of the ``Driver`` contract, over a session."""

    session: EngineSession

    async def _marker_record(self, key: str) -> str | None:
        try:
            with self.session.errors(f"inspect marker {key}"):
                volume = await self.session.show_volume(key)
        except WorkloadNotFound:
            return None
        return str((volume.get("Labels") or {}).get(LABEL_LOCK_RECORD, ""))

    async def hold_marker(self, key: str, record: str, *, labels: Mapping[str, str]) -> str | None:
        try:
            with self.session.errors(f"create marker {key}"):
                await self.session.create_volume(
                    key, {**labels, LABEL_LOCK: key, LABEL_LOCK_RECORD: record}
                )
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
            with self.session.errors(f"remove marker {key}"):
                await self.session.remove_volume(key)
        except WorkloadNotFound:
            pass
