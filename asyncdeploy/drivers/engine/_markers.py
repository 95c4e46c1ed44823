"""Markers on Docker and Podman: labelled volumes, whose names the engine gives out once.

A volume is the one engine object that needs no image and holds labels. Creation is atomic on
both engines, but they answer a taken name differently: Podman refuses it (409), Docker returns
the existing volume as if created. So every create is followed by a look: a volume is ours
when it holds our record.

A volume cannot be removed on a condition (the engines take a name, nothing else), so a marker
is never one volume that is removed and made again: a slow removal could take away the one
another replace has just made. A marker is a sequence of generations, ``KEY.1``, ``KEY.2``, ...
(each labelled ``LABEL_LOCK=KEY``); the highest one is the marker, and its record the holder.
- holding: the next generation above the highest (free: none, or a tombstone) is created; the
  engine gives that name to one creator only. Looking again, a creator that finds a higher
  generation than its own has lost. The holder removes the generations below its own.
- dropping (a stale record taken over): a tombstone (an empty record) is created
  above the generation that holds the record, then that generation is removed. Only names
  below the highest are ever removed, so no removal, however slow, can take the marker from
  whoever holds it; the tombstone stays until the next holder removes it.
- retiring (a replace's release; after a killed one, the delete of a plan's last instance or
  ``reconcile``):
  its caller holds the marker (its generation is the highest, with its live record), so no one
  else creates a generation meanwhile (a holder found live is never taken over). It removes
  every generation below its own, then its own: nothing is left. The name it removes last is
  its own, which no one else was given; a replace that looks afterwards finds no generation
  and starts again at ``KEY.1``. (Names are given out again after a retire: this relies on
  the engine carrying out a removal it was sent before the retire's own, as engines do, not
  holding it until a new replace has made ``KEY.1``.)
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from asyncdeploy._errors import WorkloadConflict, WorkloadNotFound
from asyncdeploy.drivers.engine._session import EngineSession
from asyncdeploy.labels import LABEL_LOCK, LABEL_LOCK_RECORD

__all__ = ["EngineMarkers", "Generation"]

TOMBSTONE = ""  # the record of a generation that only says "free"


@attrs.frozen
class Generation:
    number: int
    volume: str
    record: str


@attrs.frozen
class EngineMarkers:
    """``hold_marker``, ``read_marker`` and ``drop_marker`` of the ``Driver`` contract."""

    session: EngineSession

    async def generations(self, key: str) -> list[Generation]:
        """The marker's generations, lowest first (a marker made by an older asyncdeploy, the
        volume ``KEY`` itself, is generation 0)."""
        with self.session.errors(f"list markers {key}"):
            listed = await self.session.volumes(f"{LABEL_LOCK}={key}")
        found = []
        for volume in listed:
            name, labels = str(volume.get("Name")), volume.get("Labels") or {}
            if labels.get(LABEL_LOCK) != key:
                continue  # Podman reads a label filter loosely
            stem, _, number = name.rpartition(".")
            if name == key:
                found.append(Generation(0, name, str(labels.get(LABEL_LOCK_RECORD, ""))))
            elif stem == key and number.isdigit():
                found.append(Generation(int(number), name, str(labels.get(LABEL_LOCK_RECORD, ""))))
        return sorted(found, key=lambda g: g.number)

    async def read_marker(self, key: str) -> str | None:
        found = await self.generations(key)
        if not found or found[-1].record == TOMBSTONE:
            return None
        return found[-1].record

    async def hold_marker(self, key: str, record: str, *, labels: Mapping[str, str]) -> str | None:
        found = await self.generations(key)
        if found and found[-1].record != TOMBSTONE:
            return found[-1].record  # held: whether its holder lives, the caller judges
        number = found[-1].number + 1 if found else 1
        held = await self._create(key, number, record, labels)
        if held != record:
            return held  # another creator had this generation
        mine = f"{key}.{number}"
        found = await self.generations(key)
        if found and found[-1].number > number:  # a newer generation: ours was never the marker
            await self._remove(mine)
            return found[-1].record
        for below in found:
            if below.number < number:
                await self._remove(below.volume)
        return None

    async def drop_marker(self, key: str, record: str) -> None:
        found = await self.generations(key)
        holding = [g for g in found if g.record == record]
        if not holding:
            return  # gone already
        generation = holding[-1]
        if generation is found[-1]:  # it is the marker: free it first, above it
            await self._create(key, generation.number + 1, TOMBSTONE, {})
        await self._remove(generation.volume)

    async def keys(self) -> list[str]:
        """Every marker's key (one list of the labelled volumes)."""
        with self.session.errors("list markers"):
            listed = await self.session.volumes(LABEL_LOCK)
        return sorted({str((v.get("Labels") or {}).get(LABEL_LOCK, "")) for v in listed} - {""})

    async def retire(self, key: str, record: str) -> None:
        found = await self.generations(key)
        if not found or found[-1].record != record:
            return  # not held by this record (any more): not the caller's to remove
        for generation in found:  # its own last: it keeps the marker held until then
            await self._remove(generation.volume)

    async def _create(self, key: str, number: int, record: str, labels: Mapping[str, str]) -> str:
        """Create generation ``number`` holding ``record``; the record it holds then (ours, or
        the other creator's)."""
        name = f"{key}.{number}"
        try:
            with self.session.errors(f"create marker {name}"):
                await self.session.create_volume(
                    name, {**labels, LABEL_LOCK: key, LABEL_LOCK_RECORD: record}
                )
        except WorkloadConflict:
            pass  # Podman: the name is taken; whose it is, the look says
        try:
            with self.session.errors(f"inspect marker {name}"):
                volume = await self.session.show_volume(name)
        except WorkloadNotFound:
            return TOMBSTONE  # made and removed meanwhile: free again, never ours
        return str((volume.get("Labels") or {}).get(LABEL_LOCK_RECORD, ""))

    async def _remove(self, volume: str) -> None:
        try:
            with self.session.errors(f"remove marker {volume}"):
                await self.session.remove_volume(volume)
        except WorkloadNotFound:
            pass
