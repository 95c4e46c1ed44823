"""What the CLI does on SIGINT and SIGTERM (the library installs no handler; only the CLI does).

The ``docker compose`` convention, for commands that change an engine:

- a drain (``delete``, ``delete-all``): the first signal does not cut it short: it runs to its
  deadline, and the command ends as it would have. A second signal kills the survivors at once
  (the drain's ``kill_now``); everything is still removed, the JSON stream still ends with
  ``DrainFinished``, and the command exits 128 + that signal (130 for Ctrl-C, 143 for SIGTERM).
- a create: the first signal cancels it; the create removes everything it had made (shielded,
  bounded) and the command exits 128 + that signal.

Signals that come after are ignored (and said to be) until the cleanup is done: the receiver
stays open for the whole command, so no default handler (KeyboardInterrupt, or death by
SIGTERM) can cut a shielded cleanup short.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Literal, TypeVar

import anyio
import attrs
import click

from asyncdeploy.cli._common import CommandFailed

__all__ = ["Interrupts"]

T = TypeVar("T")

SIGNALS = (signal.SIGINT, signal.SIGTERM)


@attrs.define
class Interrupts:
    """The signal policy of one command; ``what`` names the operation in messages."""

    mode: Literal["drain", "cancel"]
    what: str
    received: list[signal.Signals] = attrs.field(factory=list)
    settled: bool = False  # set once the operation's outcome stands: a signal no longer undoes it
    # where notices go while a live view owns the terminal (it writes them above its table)
    notice: Callable[[str], None] | None = None
    _kill_now: anyio.Event | None = None

    @property
    def kill_now(self) -> anyio.Event:
        """Set on the second signal of a drain (created in :meth:`guard`, inside the loop)."""
        assert self._kill_now is not None, "only inside guard()"
        return self._kill_now

    async def guard(self, work: Callable[[], Awaitable[T]]) -> T:
        """Run ``work`` with SIGINT and SIGTERM handled as this policy says."""
        self._kill_now = anyio.Event()
        if threading.current_thread() is not threading.main_thread():
            return (
                await work()
            )  # only the main thread can receive signals (e.g. CliRunner in a thread)
        work_scope = anyio.CancelScope()
        result: T | None = None
        error: Exception | None = None
        with anyio.open_signal_receiver(*SIGNALS) as signals:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._watch, signals, work_scope)
                try:
                    with work_scope:
                        result = await work()
                except Exception as exc:  # noqa: BLE001 - re-raised below, unwrapped by the group
                    error = exc
                tg.cancel_scope.cancel()
        if error is not None:
            raise error
        cut_short = work_scope.cancelled_caught or self.kill_now.is_set()
        # (a signal after ``settled`` changes nothing: the outcome stood already)
        if cut_short:
            # the signal that cut it short: the first of a create, the second of a drain
            signum = self.received[0 if self.mode == "cancel" else 1]
            raise CommandFailed(self._ending(signum), 128 + signum)
        return result  # type: ignore[return-value]  # work returned: result is its value

    def _say(self, message: str) -> None:
        if self.notice is not None:
            self.notice(f"asyncdeploy: {message}")
        else:
            _say(message)

    async def _watch(self, signals: AsyncIterator[int], work_scope: anyio.CancelScope) -> None:
        async for number in signals:
            signum = signal.Signals(number)
            self.received.append(signum)
            name = signum.name
            if self.settled:
                self._say(f"got {name}: the {self.what} is done; finishing")
            elif len(self.received) == 1 and self.mode == "drain":
                self._say(
                    f"got {name}: the drain goes on until its deadline; "
                    "press Ctrl-C again to kill the remaining containers now"
                )
            elif len(self.received) == 2 and self.mode == "drain":
                self._say(
                    f"got {name} again: killing the remaining containers now, then removing "
                    "everything (further signals are ignored until that is done)"
                )
                self.kill_now.set()
            elif len(self.received) == 1:
                self._say(
                    f"got {name}: stopping the {self.what} and removing everything it made "
                    "(further signals are ignored until that is done)"
                )
                work_scope.cancel()
            else:
                self._say(f"got {name}: still cleaning up, please wait")

    def _ending(self, signum: signal.Signals) -> str:
        if self.mode == "drain":
            return (
                f"{self.what} cut short by {signum.name}: the remaining containers were killed "
                "and everything was removed"
            )
        return f"{self.what} interrupted by {signum.name}: everything it had created was removed"


def _say(message: str) -> None:
    click.echo(f"asyncdeploy: {message}", err=True)
