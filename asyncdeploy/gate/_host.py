"""What a client connection needs of the gate it belongs to: the data port's or the admin's.

Split from :mod:`._client` so the hosts (``_server._Gate``, ``_admin.AdminHost``) and the
protocol meet through this contract, not each other's classes.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, MutableSet
from typing import Any, Protocol

from asyncdeploy.workload import DrainController

from ._exchange import Exchange
from ._limits import Limits
from ._upstream import UpstreamConnection

__all__ = ["LocalAnswer", "RelayHost"]

LocalAnswer = bytes | Callable[[], Coroutine[Any, Any, bytes]]
"""What the gate answers itself: the bytes now, or a coroutine function that makes them."""


class RelayHost(Protocol):
    """What a client connection needs of the gate (``_server._Gate``, ``_admin.AdminHost``)."""

    @property
    def controller(self) -> DrainController: ...
    @property
    def connections(self) -> MutableSet[Any]: ...  # its ClientConnections
    @property
    def limits(self) -> Limits: ...
    def local(self, exchange: Exchange) -> LocalAnswer | None: ...
    def refusal(self, *, close: bool) -> bytes: ...
    def spawn(self, function: Callable[..., Coroutine[Any, Any, None]], *args: Any) -> None: ...
    async def connect_upstream(self) -> UpstreamConnection: ...
