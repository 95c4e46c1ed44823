"""Following Pods (or their Events) through a watch that is resumed, never abandoned.

:class:`PodFollower` hands every change of the matching Pods (``resource="events"``: of the
matching Events) to a callback, in order:

* it watches from a given ``resourceVersion`` (so nothing between a list and the watch is lost);
* whenever a watch ends — the server's ``timeoutSeconds``, a ``410 Expired`` (an ``ERROR`` event
  in a 200 stream, or a plain 410), a dropped connection, a 429 or 5xx (as an ``ERROR`` event or
  an answer) — it lists the Pods afresh, hands the whole list over as a :class:`Resync` (so Pods
  that vanished meanwhile are noticed), and watches again from that list's ``resourceVersion``;
* those failures (but 410, the normal end of an old watch) are retried after a growing pause
  and remembered in ``last_error``; any other error (401, 403, ...) is raised.

It returns when the callback says it is done. It never gives up by itself: the caller bounds it
with a deadline (a cancel scope), and asks for control back through ``poll`` (the number of
seconds until it next wants a fresh list: the watch's ``timeoutSeconds``, rounded up, and a
cancel scope that ends the watch on time).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

import anyio
import attrs

from asyncdeploy._backoff import WATCH
from asyncdeploy._errors import (
    ENGINE_FAILURES,
    EngineAPIError,
    EngineFailure,
    EngineTimeout,
    EngineUnavailable,
)
from asyncdeploy.drivers.kubernetes._api import PodAPI, Resource
from asyncdeploy.drivers.kubernetes._errors import status_error
from asyncdeploy.drivers.kubernetes._kubelet import KubeletEvent, read_event

__all__ = ["MAX_WATCH_SECONDS", "KubeletEvents", "PodChange", "PodEvent", "PodFollower", "Resync"]

MAX_WATCH_SECONDS = 300
MIN_WATCH_SECONDS = 0.05
# a watch that ends sooner than this with nothing new is followed by a pause (WATCH's) before
# the next list
QUICK_END_SECONDS = 1.0
_log = logging.getLogger(__name__)


@attrs.frozen
class PodChange:
    """One watch event: ``ADDED``, ``MODIFIED`` or ``DELETED`` and the Pod as the server sent it."""

    type: str
    pod: dict[str, Any]


@attrs.frozen
class Resync:
    """Every matching Pod, from a fresh list (the first look, or after a watch ended)."""

    pods: list[dict[str, Any]]


PodEvent = PodChange | Resync
Handler = Callable[[PodEvent], bool]


@attrs.define
class PodFollower:
    api: PodAPI
    namespace: str
    label_selector: str | None = None
    field_selector: str | None = None
    resource: Resource = "pods"
    last_error: str | None = attrs.field(default=None, init=False)
    _failures: int = attrs.field(default=0, init=False)
    _done: bool = attrs.field(default=False, init=False)
    _quick_ends: int = attrs.field(default=0, init=False)  # watches in a row that ended at once

    async def run(
        self,
        handle: Handler,
        *,
        resource_version: str | None = None,
        poll: Callable[[], float] = lambda: MAX_WATCH_SECONDS,
    ) -> None:
        """Feed ``handle`` until it returns True; start with a list unless given a version."""
        version = resource_version
        self._done = False
        while True:
            if version is None:
                version = await self._resync(handle)
                if version is None:
                    return
            await self._watch(handle, version, poll)
            if self._done:
                return
            version = None  # whatever ended the watch, look again from a fresh list

    async def _resync(self, handle: Handler) -> str | None:
        """List afresh (retrying connection failures); None when ``handle`` is done."""
        while True:
            try:
                listing = await self.api.list_pods(
                    self.namespace,
                    label_selector=self.label_selector,
                    field_selector=self.field_selector,
                    resource=self.resource,
                )
                break
            except ENGINE_FAILURES as exc:
                if not _transient(exc):
                    raise
                await self._failed(exc)
        if handle(Resync(list(listing.get("items") or []))):
            self._done = True
            return None
        return str(listing["metadata"]["resourceVersion"])

    async def _watch(self, handle: Handler, version: str, poll: Callable[[], float]) -> None:
        wanted = min(max(poll(), MIN_WATCH_SECONDS), MAX_WATCH_SECONDS)
        started, news = anyio.current_time(), False
        # timeoutSeconds is whole seconds: the cancel scope hands control back on time.
        with anyio.move_on_after(wanted) as scope:
            news = await self._stream(handle, version, math.ceil(wanted))
        if self._done or news or scope.cancelled_caught:
            self._quick_ends = 0
            return
        if anyio.current_time() - started < min(QUICK_END_SECONDS, wanted / 2):
            # ended at once with nothing new (a 410 again and again, a proxy that closes every
            # watch): listing again at once would hammer the API server, and did (a list and a
            # watch a few milliseconds apart, for minutes)
            self._quick_ends += 1
            await anyio.sleep(WATCH.after(self._quick_ends))

    async def _stream(self, handle: Handler, version: str, seconds: int) -> bool:
        """One watch; whether it handed an event over."""
        news = False
        try:
            async with self.api.watch(
                self.namespace,
                resource_version=version,
                timeout_seconds=seconds,
                label_selector=self.label_selector,
                field_selector=self.field_selector,
                resource=self.resource,
            ) as events:
                async for event in events:
                    kind = event.get("type")
                    body = event.get("object") or {}
                    if kind == "BOOKMARK":
                        continue
                    if kind == "ERROR":
                        code = int(body.get("code") or 0)
                        raise status_error(code, body, f"watch {self.resource} in {self.namespace}")
                    self._failures = 0
                    news = True
                    if handle(PodChange(str(kind), body)):
                        self._done = True
                        return news
        except ENGINE_FAILURES as exc:
            if not _transient(exc):
                raise
            if isinstance(exc, EngineAPIError) and exc.status == 410:
                self.last_error = exc.message  # expired: the normal life of a watch
                _log.debug("%s; listing afresh", exc.message)
            else:
                await self._failed(exc)
                return True  # paused already: no second pause for it
        return news

    async def _failed(self, exc: EngineFailure) -> None:
        self._failures += 1
        self.last_error = exc.message
        pause = WATCH.after(self._failures)
        _log.debug("%s; retrying in %.1f s", exc.message, pause)
        await anyio.sleep(pause)


@attrs.define
class KubeletEvents:
    """The Events of some Pods, from just before their delete, each occurrence handed to
    ``deliver`` once.

    One watch (``involvedObject.uid`` for one Pod, every Pod's Events for several, filtered
    here), resumed as the Pod watch is. An occurrence is an Event's name and its ``count``: the
    kubelet records a repeat (the same reason and message about the same container: an
    earlier restart's ``FailedPreStopHook``) by bumping the count of the Event it made then, so
    a bumped count is news; an occurrence already listed before :meth:`start`, or seen again in
    a fresh list, is not delivered. When Events
    cannot be read (a 403 from a role without them) nothing is delivered and :meth:`run`
    returns: the caller goes on without.
    """

    api: PodAPI
    namespace: str
    uids: set[str]
    deliver: Callable[[KubeletEvent], None]
    version: str | None = None
    seen: set[tuple[str, int]] = attrs.field(factory=set)  # (name, count) occurrences

    @property
    def selector(self) -> str:
        if len(self.uids) == 1:
            return f"involvedObject.uid={next(iter(self.uids))}"
        return "involvedObject.kind=Pod"

    async def start(self) -> None:
        """List what is there (it is not about this delete) and where the watch starts."""
        try:
            listing = await self.api.list_events(self.namespace, field_selector=self.selector)
        except ENGINE_FAILURES as exc:
            _log.debug("the Pods' Events cannot be read (%s)", exc)
            return
        for item in listing.get("items") or []:
            if (event := read_event(item)) is not None:
                self.seen.add((event.key, event.count))
        self.version = str(listing["metadata"]["resourceVersion"])

    async def run(self) -> None:
        """Deliver until cancelled (the caller ends it when its Pods are gone)."""
        if self.version is None:
            return
        follower = PodFollower(
            self.api, self.namespace, field_selector=self.selector, resource="events"
        )

        def handle(change: PodEvent) -> bool:
            for item in change.pods if isinstance(change, Resync) else [change.pod]:
                event = read_event(item)
                occurrence = None if event is None else (event.key, event.count)
                if event is None or event.uid not in self.uids or occurrence in self.seen:
                    continue
                self.seen.add((event.key, event.count))
                self.deliver(event)
            return False

        try:
            await follower.run(handle, resource_version=self.version)
        except ENGINE_FAILURES as exc:
            _log.debug("following the Pods' Events stopped (%s)", exc)


def _transient(exc: EngineFailure) -> bool:
    """Worth a fresh list: a lost connection, a timeout, 410 Expired, 429 or a 5xx."""
    if isinstance(exc, EngineUnavailable | EngineTimeout):
        return True
    return isinstance(exc, EngineAPIError) and (exc.status in (410, 429) or exc.status >= 500)
