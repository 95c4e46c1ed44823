"""What the CLI does on SIGINT and SIGTERM (the library installs no handler; only the CLI does).

The ``docker compose`` convention, for commands that change an engine:

- a drain (``delete``, ``delete-all``): the first signal does not cut it short: it runs to its
  deadline, and the command ends as it would have. A second signal kills the survivors at once
  (the drain's ``kill_now``); everything is still removed, the JSON stream still ends with
  ``DrainFinished``, and the command exits 128 + that signal (130 for Ctrl-C, 143 for SIGTERM).
- a create: the first signal cancels it; the create removes everything it had made (shielded,
  bounded) and the command exits 128 + that signal. A create of a changed plan is a replace,
  and follows the replace's policy below. A create that repairs a dead workload of the same
  plan never kills it on that signal: a drain of the old workload that has begun runs to its end (the
  library shields it from the cancellation), then the create stops and nothing new is made; a
  second signal during that drain kills the old workload's survivors at once, as for a delete.
  The create's events keep flowing meanwhile: the CLI cancels only the create
  (:meth:`Interrupts.cancelling`), not the loop that prints them.
- a replace: until the old instance's drain begins, the first signal stops it: the new instance
  is removed (drained, when it had started) and the old one keeps serving; exit 128 + that
  signal. Once the old instance's drain has begun (:meth:`Interrupts.now_draining`), it is a
  drain as above. In both phases a second signal kills what is being drained at once.

Signals that come after are ignored (and said to be) until the cleanup is done: the receiver
stays open for the whole command, so no default handler (KeyboardInterrupt, or death by
SIGTERM) can cut a shielded cleanup short.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import contextmanager
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

    mode: Literal["drain", "cancel", "replace"]
    what: str
    received: list[signal.Signals] = attrs.field(factory=list)
    settled: bool = False  # set once the operation's outcome stands: a signal no longer undoes it
    draining: bool = False  # a create is draining the workload it replaces (for the words)
    cancelled: bool = False  # a signal cancelled the operation
    drain_killed: bool = False  # a second signal killed a replaced workload's survivors
    stopped_during_drain: bool = False
    made: bool = False  # a create has made its workload (a signal now stops only its wait)
    # where notices go while a live view owns the terminal (it writes them above its table)
    notice: Callable[[str], None] | None = None
    _kill_now: anyio.Event | None = None
    _target: anyio.CancelScope | None = None

    def now_draining(self) -> None:
        """(replace) The old instance's drain begins: from now on signals follow the drain's
        policy; one that came before has already stopped the replacement."""
        if self.mode == "replace" and not self.received:
            self.mode = "drain"

    @property
    def kill_now(self) -> anyio.Event:
        """Set on the second signal of a drain (created in :meth:`guard`, inside the loop)."""
        assert self._kill_now is not None, "only inside guard()"
        return self._kill_now

    @contextmanager
    def cancelling(self) -> Iterator[anyio.CancelScope]:
        """A scope (a create's own) that a cancelling signal cancels instead of the whole
        command, so that what prints the create's events goes on until the create has ended."""
        with anyio.CancelScope() as scope:
            self._target = scope
            try:
                yield scope
            finally:
                self._target = None

    def drain_began(self) -> None:
        """A create began draining the workload it replaces."""
        self.draining = True
        if self.cancelled:  # cancelled a moment before: the drain goes on all the same
            self.stopped_during_drain = True

    def drain_ended(self) -> None:
        self.draining = False

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
        cut_short = work_scope.cancelled_caught or self.cancelled or self.kill_now.is_set()
        # (a signal after ``settled`` changes nothing: the outcome stood already)
        if cut_short:
            # the signal that cut it short: the first of a create, the second of a drain
            signum = self.received[0 if self.mode in ("cancel", "replace") else 1]
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
            elif self.mode == "drain":
                self._say(f"got {name}: still cleaning up, please wait")
            elif len(self.received) == 1 and self.mode == "replace":
                self.cancelled = True
                self._say(
                    f"got {name}: stopping the {self.what}: the new instance is removed and the "
                    "old one keeps serving; press Ctrl-C again to kill the new instance now"
                )
                (self._target or work_scope).cancel()
            elif len(self.received) == 2 and self.mode == "replace":
                self._say(
                    f"got {name} again: killing the new instance's remaining containers now "
                    "(further signals are ignored until that is done)"
                )
                self.kill_now.set()
            elif self.mode == "replace":
                self._say(f"got {name}: still cleaning up, please wait")
            elif not self.cancelled:
                self.cancelled = True
                if self.draining:
                    self.stopped_during_drain = True
                    self._say(
                        f"got {name}: the drain of the workload this create replaces goes on "
                        "until its deadline, then the create stops (nothing new is made); "
                        "press Ctrl-C again to kill its remaining containers now"
                    )
                else:
                    self._say(
                        f"got {name}: stopping the {self.what} and removing everything it made "
                        "(a drain of a workload it replaces goes on until its end; further "
                        "signals are ignored until that is done)"
                    )
                (self._target or work_scope).cancel()
            elif self.draining and not self.drain_killed:
                self.drain_killed = True
                self._say(
                    f"got {name} again: killing the replaced workload's remaining containers "
                    "now, then removing everything (further signals are ignored until that is "
                    "done)"
                )
                self.kill_now.set()
            else:
                self._say(f"got {name}: still cleaning up, please wait")

    def _ending(self, signum: signal.Signals) -> str:
        if self.mode == "replace":
            return (
                f"{self.what} interrupted by {signum.name}: the new instance was removed; the "
                "old one was not touched"
            )
        if self.drain_killed:
            return (
                f"{self.what} interrupted by {signum.name}: the replaced workload's remaining "
                "containers were killed and removed; nothing new was created"
            )
        if self.stopped_during_drain:
            return (
                f"{self.what} interrupted by {signum.name}: the replaced workload was drained "
                "and removed; nothing new was created"
            )
        if self.made:
            return (
                f"{self.what} interrupted by {signum.name} while waiting for the workload to "
                "become ready: it was created and is left as it is (delete it to remove it)"
            )
        if self.mode == "drain":
            return (
                f"{self.what} cut short by {signum.name}: the remaining containers were killed "
                "and everything was removed"
            )
        return f"{self.what} interrupted by {signum.name}: everything it had created was removed"


def _say(message: str) -> None:
    click.echo(f"asyncdeploy: {message}", err=True)
