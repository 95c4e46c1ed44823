"""Termination triggers: a request object, and the SIGTERM handler an entry point installs.

Library code never installs handlers by itself; a server's entry point calls
:func:`install_sigterm_handler` from inside its running event loop.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Sequence
from types import TracebackType
from typing import Self

import anyio

from .state import DrainController

__all__ = ["SignalHandlers", "TerminationRequest", "install_sigterm_handler"]

logger = logging.getLogger("asyncdeploy.workload")


class TerminationRequest:
    """The process was asked to exit: the first request begins the drain, a second cuts at once."""

    def __init__(self, controller: DrainController) -> None:
        self._controller = controller
        self._event = anyio.Event()
        self.count = 0

    @property
    def is_requested(self) -> bool:
        return self._event.is_set()

    def request(self, reason: str = "requested") -> None:
        """Safe to call from a signal callback: never blocks, never awaits."""
        self.count += 1
        if self.count == 1:
            logger.info("termination requested (%s): draining", reason)
            self._controller.begin_drain()
            self._event.set()
        else:
            logger.warning("termination requested again (%s): cutting open streams now", reason)
            self._controller.cut("forced")

    async def wait(self) -> None:
        await self._event.wait()


class SignalHandlers:
    """Handlers installed by :func:`install_sigterm_handler`; a context manager that removes them."""

    def __init__(self, termination: TerminationRequest, signals: Sequence[signal.Signals]) -> None:
        self.termination = termination
        self.signals = tuple(signals)
        self._loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        for sig in self.signals:
            self._loop.add_signal_handler(sig, termination.request, f"signal {sig.name}")

    def remove(self) -> None:
        """Restore the default dispositions (idempotent)."""
        if self._loop is None:
            return
        for sig in self.signals:
            self._loop.remove_signal_handler(sig)
        self._loop = None

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.remove()


def install_sigterm_handler(
    controller: DrainController,
    *,
    termination: TerminationRequest | None = None,
    signals: Sequence[signal.Signals] = (signal.SIGTERM, signal.SIGINT),
) -> SignalHandlers:
    """Make ``signals`` request termination (drain first, cut on the second signal).

    Call it from the entry point, inside the running asyncio loop; the handlers stay until
    :meth:`SignalHandlers.remove` (or the end of a ``with`` block).
    """
    return SignalHandlers(termination or TerminationRequest(controller), signals)
