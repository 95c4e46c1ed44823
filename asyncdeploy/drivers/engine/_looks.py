"""The driver's looks at the engine, shared by the calls that run at once.

A control plane deletes and creates through one long-lived deployer, many calls at once: each
looking for itself cost forty list calls for forty deletes (on Podman, whose API serves a few
requests at a time, they held back the first drains' signals). Here every look is a round
(:class:`~._coalesce.Rounds`): the workloads asked for by name meanwhile share one list call (a
lone caller's is filtered by its name), lists of every workload share one, volume lists one per
label, image checks one inspect per image. An answer never predates its question.
"""

from __future__ import annotations

import builtins
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

import anyio

from asyncdeploy.drivers.engine._coalesce import Rounds
from asyncdeploy.drivers.engine._pull import ImagePuller
from asyncdeploy.drivers.engine._session import EngineSession
from asyncdeploy.labels import LABEL_WORKLOAD

__all__ = ["EngineLooks"]

Grouped = dict[str, builtins.list[dict[str, Any]]]
K = TypeVar("K")
V = TypeVar("V")


class EngineLooks:
    def __init__(self, session: EngineSession) -> None:
        self.session = session
        self._named: Rounds[str, Grouped] = Rounds(self._list_named)
        self._everything: Rounds[None, Grouped] = Rounds(lambda _: self.by_workload())
        self._volumes = Rounds(self._list_volumes)
        self._images = Rounds(self._images_present)

    async def everything(self) -> Grouped:
        """asyncdeploy's containers, by workload."""
        return await self._everything.ask(None)

    async def volumes(self, label: str) -> builtins.list[dict[str, Any]]:
        """The volumes carrying ``label`` (``key`` or ``key=value``)."""
        return (await self._volumes.ask(label))[label]

    async def by_workload(
        self, labels: Mapping[str, str] | None = None
    ) -> dict[str, builtins.list[dict[str, Any]]]:
        grouped: dict[str, builtins.list[dict[str, Any]]] = {}
        for item in await self.session.containers(labels or {}):
            grouped.setdefault(item["Labels"][LABEL_WORKLOAD], []).append(item)
        return grouped

    async def _list_named(self, names: frozenset[str]) -> dict[str, builtins.list[dict[str, Any]]]:
        if len(names) == 1:
            return await self.by_workload({LABEL_WORKLOAD: next(iter(names))})
        return await self.by_workload()  # several at once: every workload, one call

    async def _list_volumes(self, labels: frozenset[str]) -> dict[str, builtins.list[Any]]:
        return await _each(labels, self.session.volumes)

    async def _images_present(self, images: frozenset[str]) -> dict[str, bool]:
        return await _each(images, ImagePuller(self.session).present)

    async def image_present(self, image: str) -> bool:
        return (await self._images.ask(image))[image]

    async def named(self, name: str) -> dict[str, builtins.list[dict[str, Any]]]:
        """The workload's list entries by its name (none: not there), from a list call shared
        with every concurrent look for a workload."""
        grouped = await self._named.ask(name)
        return {name: grouped[name]} if name in grouped else {}


async def _each(keys: frozenset[K], look: Callable[[K], Awaitable[V]]) -> dict[K, V]:
    """``look`` of every key at once; the first error raised as it is (not grouped)."""
    found: dict[K, V] = {}
    failed: list[Exception] = []

    async def one(key: K) -> None:
        try:
            found[key] = await look(key)
        except Exception as exc:  # noqa: BLE001 - raised below, to every caller of the round
            failed.append(exc)

    async with anyio.create_task_group() as tg:
        for key in keys:
            tg.start_soon(one, key)
    if failed:
        raise failed[0]
    return found
