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
from typing import Literal, Self

import anyio

from .state import DrainController

__all__ = ["RepeatedSigterm", "SignalHandlers", "TerminationRequest", "install_sigterm_handler"]

logger = logging.getLogger("asyncdeploy.workload")

#: What a repeated SIGTERM does during a drain.
RepeatedSigterm = Literal["ignore", "cut"]


class TerminationRequest:
    """The process was asked to exit: the first request begins the drain.

    What a repeat does is a choice (``repeated_sigterm``): an engine or an orchestrator may
    send SIGTERM again (a retried stop call, a second ``docker stop``, a supervisor's own
    stop), so by default a repeated SIGTERM is logged and changes nothing: the drain goes on
    to its deadline. ``repeated_sigterm="cut"`` makes it cut every open stream at once. A
    SIGINT after any earlier request (an operator's second Ctrl-C) always cuts, and so does a
    repeated :meth:`request` from code unless it passes ``repeat_cuts=False``.
    """

    def __init__(
        self, controller: DrainController, *, repeated_sigterm: RepeatedSigterm = "ignore"
    ) -> None:
        if repeated_sigterm not in ("ignore", "cut"):
            raise ValueError("repeated_sigterm must be 'ignore' or 'cut'")
        self._controller = controller
        self._event = anyio.Event()
        self.repeated_sigterm: RepeatedSigterm = repeated_sigterm
        self.count = 0
        #: Repeats that were ignored (logged only).
        self.ignored = 0

    @property
    def is_requested(self) -> bool:
        return self._event.is_set()

    def request(self, reason: str = "requested", *, repeat_cuts: bool = True) -> None:
        """Safe to call from a signal callback: never blocks, never awaits."""
        self.count += 1
        if self.count == 1:
            logger.info("termination requested (%s): draining", reason)
            self._controller.begin_drain()
            self._event.set()
        elif repeat_cuts:
            logger.warning("termination requested again (%s): cutting open streams now", reason)
            self._controller.cut("forced")
        else:
            self.ignored += 1
            logger.warning(
                "termination requested again (%s): ignored, the drain goes on "
                "(in_flight=%d; SIGINT cuts at once)",
                reason,
                self._controller.in_flight,
            )

    def on_signal(self, sig: signal.Signals) -> None:
        """What the installed handlers call: SIGTERM repeats follow ``repeated_sigterm``."""
        repeat_cuts = sig is not signal.SIGTERM or self.repeated_sigterm == "cut"
        self.request(f"signal {sig.name}", repeat_cuts=repeat_cuts)

    async def wait(self) -> None:
        await self._event.wait()


class SignalHandlers:
    """Handlers installed by :func:`install_sigterm_handler`; a context manager that removes them."""

    def __init__(self, termination: TerminationRequest, signals: Sequence[signal.Signals]) -> None:
        self.termination = termination
        self.signals = tuple(signals)
        self._loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        for sig in self.signals:
            self._loop.add_signal_handler(sig, termination.on_signal, sig)

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
    """Make ``signals`` request termination (drain first; see :class:`TerminationRequest` for
    what a repeat does).

    Call it from the entry point, inside the running asyncio loop; the handlers stay until
    :meth:`SignalHandlers.remove` (or the end of a ``with`` block).
    """
    return SignalHandlers(termination or TerminationRequest(controller), signals)
