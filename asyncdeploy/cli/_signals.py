"""What the CLI does on SIGINT and SIGTERM (the library installs no handler; only the CLI does).

The ``docker compose`` convention, for commands that change an engine:

- a drain (``delete``, ``delete-all``): the first signal does not cut it short: it runs to its
  deadline, and the command ends as it would have. A second signal kills the survivors at once
  (the operation's ``stop(kill=True)``); everything is still removed, the JSON stream still ends with
  ``DrainFinished``, and the command exits 128 + that signal (130 for Ctrl-C, 143 for SIGTERM).
- a create: the first signal cancels it; the create removes everything it had made (shielded,
  bounded) and the command exits 128 + that signal. A create of a changed plan is a replace,
  and follows the replace's policy below. A create that repairs a dead workload of the same
  plan never kills it on that signal: a drain of the old workload that has begun runs to its end (the
  library shields it from the cancellation), then the create stops and nothing new is made; a
  second signal during that drain kills the old workload's survivors at once, as for a delete.
  The create's events keep flowing meanwhile: the CLI stops only the create (its handle's
  ``stop()``), not the loop that prints them.
- a replace: until the old instance's drain begins, the first signal stops it: the new instance
  is removed (drained, when it had started) and the old one keeps serving; exit 128 + that
  signal. Once the old instance's drain has begun (:meth:`Interrupts.now_draining`), it is a
  drain as above. In both phases a second signal kills what is being drained at once.

Signals that come after are ignored (and said to be) until the cleanup is done: the receiver
stays open for the whole command, so no default handler (KeyboardInterrupt, or death by
SIGTERM) can cut a shielded cleanup short.

The policy is one table (:data:`TABLE`): for each phase of a command and each thing that
happens (a signal; a drain that begins or ends; a workload made; the outcome settled), the next
phase, what to do (nothing, cancel, kill) and what to say.
"""

from __future__ import annotations

import enum
import signal
import sys
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Literal, Protocol, TypeVar

import anyio
import attrs
import click

from asyncdeploy.cli._common import CommandFailed
from asyncdeploy.cli._terminal import fold, terminal_width

__all__ = ["TABLE", "Act", "Happened", "Interrupts", "Phase"]

T = TypeVar("T")

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Phase(enum.Enum):
    """Where a command stands, as far as a signal is concerned."""

    # a drain: delete, delete-all, reconcile, and a replace once the old instances' drain began
    DRAINING = "draining"
    FINISHING = "finishing"  # one signal came: the drain runs to its deadline
    KILLING = "killing"  # a second: the survivors are killed, everything removed
    # a replace before the old instances' drain began
    REPLACING = "replacing"
    ROLLING_BACK = "rolling back"  # a signal stopped it: the new instance is removed
    ROLLING_BACK_KILLED = "rolling back, killed"  # a second killed the new instance now
    # a create
    CREATING = "creating"
    REPLACED_DRAINING = "draining what it replaces"
    CREATED = "created"  # made; a wait for it to be ready may follow
    STOPPING = "stopping"  # a signal stopped it: it removes what it made
    STOPPING_AFTER_DRAIN = "stopping after the drain"  # signalled at (or just before) that drain
    DRAINED_THEN_STOPPED = "drained, then stopped"
    REPLACED_KILLED = "what it replaces killed"  # a second signal killed that drain
    WAIT_STOPPED = "wait stopped"  # a signal stopped the wait: the workload is left as it is
    DONE = "done"  # the outcome stands: a signal changes nothing


class Happened(enum.Enum):
    SIGNAL = "signal"
    DRAIN_BEGAN = "drain began"  # a create's drain of what it replaces; a replace's old ones'
    DRAIN_ENDED = "drain ended"
    MADE = "made"  # a create has made its workload
    SETTLED = "settled"  # the outcome stands
    CHANGED = "changed"  # a create's plan changed: it runs as a replace


class Act(enum.Enum):
    NOTHING = "nothing"
    CANCEL = "cancel"  # the operation stops (a create removes what it made)
    KILL = "kill"  # its drains are cut short


_DRAIN_GOES_ON = (
    "got {name}: the drain goes on until its deadline; press Ctrl-C again to kill the "
    "remaining containers now"
)
_STOP_THE_REPLACE = (
    "got {name}: stopping the {what}: the new instance is removed and the old one keeps "
    "serving; press Ctrl-C again to kill the new instance now"
)
_KILL_THE_NEW = (
    "got {name} again: killing the new instance's remaining containers now (further "
    "signals are ignored until that is done)"
)
_STOP_AFTER_THE_DRAIN = (
    "got {name}: the drain of the workload this create replaces goes on until its "
    "deadline, then the create stops (nothing new is made); press Ctrl-C again to kill its "
    "remaining containers now"
)
_KILL_THE_REPLACED = (
    "got {name} again: killing the replaced workload's remaining containers now, then "
    "removing everything (further signals are ignored until that is done)"
)
_CLEANING = "got {name}: still cleaning up, please wait"
_KILL_THE_DRAIN = (
    "got {name} again: killing the remaining containers now, then removing everything "
    "(further signals are ignored until that is done)"
)
_STOP_THE_CREATE = (
    "got {name}: stopping the {what} and removing everything it made (a drain of a workload it "
    "replaces goes on until its end; further signals are ignored until that is done)"
)

TABLE: dict[tuple[Phase, Happened], tuple[Phase, Act, str | None]] = {
    # a drain: the first signal changes nothing, the second kills
    (Phase.DRAINING, Happened.SIGNAL): (
        Phase.FINISHING,
        Act.NOTHING,
        _DRAIN_GOES_ON,
    ),
    (Phase.FINISHING, Happened.SIGNAL): (Phase.KILLING, Act.KILL, _KILL_THE_DRAIN),
    (Phase.KILLING, Happened.SIGNAL): (Phase.KILLING, Act.NOTHING, _CLEANING),
    # a replace: until the old ones' drain begins, a signal stops it; from then on, a drain
    (Phase.REPLACING, Happened.SIGNAL): (
        Phase.ROLLING_BACK,
        Act.CANCEL,
        _STOP_THE_REPLACE,
    ),
    (Phase.REPLACING, Happened.DRAIN_BEGAN): (Phase.DRAINING, Act.NOTHING, None),
    (Phase.ROLLING_BACK, Happened.SIGNAL): (
        Phase.ROLLING_BACK_KILLED,
        Act.KILL,
        _KILL_THE_NEW,
    ),
    (Phase.ROLLING_BACK_KILLED, Happened.SIGNAL): (
        Phase.ROLLING_BACK_KILLED,
        Act.NOTHING,
        _CLEANING,
    ),
    # a create: a signal stops it; a drain of what it replaces runs to its end all the same,
    # and only a second signal kills that drain
    (Phase.CREATING, Happened.SIGNAL): (Phase.STOPPING, Act.CANCEL, _STOP_THE_CREATE),
    # a create of a changed plan is a replace (before anything is touched)
    (Phase.CREATING, Happened.CHANGED): (Phase.REPLACING, Act.NOTHING, None),
    (Phase.CREATING, Happened.DRAIN_BEGAN): (Phase.REPLACED_DRAINING, Act.NOTHING, None),
    (Phase.CREATING, Happened.MADE): (Phase.CREATED, Act.NOTHING, None),
    (Phase.REPLACED_DRAINING, Happened.DRAIN_ENDED): (Phase.CREATING, Act.NOTHING, None),
    (Phase.REPLACED_DRAINING, Happened.SIGNAL): (
        Phase.STOPPING_AFTER_DRAIN,
        Act.CANCEL,
        _STOP_AFTER_THE_DRAIN,
    ),
    (Phase.STOPPING, Happened.SIGNAL): (Phase.STOPPING, Act.NOTHING, _CLEANING),
    # cancelled a moment before the drain began: the drain goes on all the same
    (Phase.STOPPING, Happened.DRAIN_BEGAN): (Phase.STOPPING_AFTER_DRAIN, Act.NOTHING, None),
    (Phase.STOPPING_AFTER_DRAIN, Happened.SIGNAL): (
        Phase.REPLACED_KILLED,
        Act.KILL,
        _KILL_THE_REPLACED,
    ),
    (Phase.STOPPING_AFTER_DRAIN, Happened.DRAIN_ENDED): (
        Phase.DRAINED_THEN_STOPPED,
        Act.NOTHING,
        None,
    ),
    (Phase.DRAINED_THEN_STOPPED, Happened.SIGNAL): (
        Phase.DRAINED_THEN_STOPPED,
        Act.NOTHING,
        _CLEANING,
    ),
    (Phase.REPLACED_KILLED, Happened.SIGNAL): (Phase.REPLACED_KILLED, Act.NOTHING, _CLEANING),
    (Phase.CREATED, Happened.SIGNAL): (Phase.WAIT_STOPPED, Act.CANCEL, _STOP_THE_CREATE),
    (Phase.WAIT_STOPPED, Happened.SIGNAL): (Phase.WAIT_STOPPED, Act.NOTHING, _CLEANING),
    (Phase.DONE, Happened.SIGNAL): (
        Phase.DONE,
        Act.NOTHING,
        "got {name}: the {what} is done; finishing",
    ),
}
"""Every pair not here leaves the phase as it is, silently; ``SETTLED`` always leads to DONE."""

ENDINGS: dict[Phase, str] = {
    Phase.KILLING: "{what} cut short by {name}: the remaining containers were killed and "
    "everything was removed",
    Phase.ROLLING_BACK: "{what} interrupted by {name}: the new instance was removed; the old one "
    "was not touched",
    Phase.REPLACED_KILLED: "{what} interrupted by {name}: the replaced workload's remaining "
    "containers were killed and removed; nothing new was created",
    Phase.STOPPING_AFTER_DRAIN: "{what} interrupted by {name}: the replaced workload was drained "
    "and removed; nothing new was created",
    Phase.WAIT_STOPPED: "{what} interrupted by {name} while waiting for the workload to become "
    "ready: it was created and is left as it is (delete it to remove it)",
    Phase.STOPPING: "{what} interrupted by {name}: everything it had created was removed",
}
ENDINGS[Phase.ROLLING_BACK_KILLED] = ENDINGS[Phase.ROLLING_BACK]
ENDINGS[Phase.DRAINED_THEN_STOPPED] = ENDINGS[Phase.STOPPING_AFTER_DRAIN]
"""What the command says when a signal cut it short, by the phase it ended in."""

FIRST_PHASE: dict[str, Phase] = {
    "drain": Phase.DRAINING,
    "cancel": Phase.CREATING,
    "replace": Phase.REPLACING,
}


class Stoppable(Protocol):
    """What a signal acts on: the operation's handle (``Drain``, ``CreateEvents``,
    ``Replacement``): its one verb, ``stop`` (``kill=True``: its drains cut short)."""

    def stop(self, *, kill: bool = False) -> None: ...


@attrs.define
class Interrupts:
    """The signal policy of one command; ``what`` names the operation in messages."""

    mode: Literal["drain", "cancel", "replace"]
    what: str
    phase: Phase = attrs.field(init=False)
    # where notices go while a live view owns the terminal (it writes them above its table)
    notice: Callable[[str], None] | None = None
    _cut_by: signal.Signals | None = None  # the signal that cancelled or killed
    _ended_in: Phase | None = None  # the phase the outcome settled in
    _operation: Stoppable | None = None
    _kill_asked: bool = False
    _work: anyio.CancelScope | None = None

    def __attrs_post_init__(self) -> None:
        self.phase = FIRST_PHASE[self.mode]

    def attach(self, operation: Stoppable) -> None:
        """The operation signals act on from now (a kill asked before reaches it at once)."""
        self._operation = operation
        if self._kill_asked:
            operation.stop(kill=True)

    def happened(self, what: Happened, name: str = "") -> Act:
        """Step the table; act and say as it says; return the act (for tests)."""
        if what is Happened.SETTLED:
            self._ended_in = self._ended_in or self.phase
            self.phase = Phase.DONE
            return Act.NOTHING
        self.phase, act, notice = TABLE.get((self.phase, what), (self.phase, Act.NOTHING, None))
        if notice is not None:
            self._say(notice.format(name=name, what=self.what))
        if act is Act.KILL:
            self._kill_asked = True
            if self._operation is not None:
                self._operation.stop(kill=True)
        elif act is Act.CANCEL:
            if self._operation is not None:
                # the operation alone: what prints its events goes on to their end
                self._operation.stop()
            if (self.mode == "replace" or self._operation is None) and self._work is not None:
                # a replacement runs in the command's own task (it is entered, not read): it
                # stops as that task's work is cancelled; so does a create not yet attached
                self._work.cancel()
        return act

    def now_draining(self) -> None:
        """(replace) The old instance's drain begins: from now on signals follow the drain's
        policy; one that came before has already stopped the replacement."""
        self.happened(Happened.DRAIN_BEGAN)

    def replaces(self) -> None:
        """(create) The plan changed: the create runs as a replace, under the replace's policy."""
        self.happened(Happened.CHANGED)

    def drain_began(self) -> None:
        """A create began draining the workload it replaces."""
        self.happened(Happened.DRAIN_BEGAN)

    def drain_ended(self) -> None:
        self.happened(Happened.DRAIN_ENDED)

    def made(self) -> None:
        """A create has made its workload (a signal now stops only its wait)."""
        self.happened(Happened.MADE)

    def settled(self) -> None:
        """The operation's outcome stands: a signal no longer undoes it."""
        self.happened(Happened.SETTLED)

    def signalled(self, signum: signal.Signals) -> Act:
        act = self.happened(Happened.SIGNAL, signum.name)
        if act is not Act.NOTHING and self._cut_by is None:
            self._cut_by = signum
        return act

    async def guard(self, work: Callable[[], Awaitable[T]]) -> T:
        """Run ``work`` with SIGINT and SIGTERM handled as this policy says."""
        if threading.current_thread() is not threading.main_thread():
            return (
                await work()
            )  # only the main thread can receive signals (e.g. CliRunner in a thread)
        self._work = anyio.CancelScope()
        result: T | None = None
        error: Exception | None = None
        with anyio.open_signal_receiver(*SIGNALS) as signals:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._watch, signals)
                try:
                    with self._work:
                        result = await work()
                except Exception as exc:  # noqa: BLE001 - re-raised below, unwrapped by the group
                    error = exc
                tg.cancel_scope.cancel()
        if error is not None:
            raise error
        ending = self.ending()
        if ending is not None:
            raise CommandFailed(*ending)
        return result  # type: ignore[return-value]  # work returned: result is its value

    def ending(self) -> tuple[str, int] | None:
        """What the command says and exits with when a signal cancelled or killed (even if the
        outcome settled after): None when none did."""
        if self._cut_by is None:
            return None
        ending = ENDINGS[self._ended_in or self.phase]
        return ending.format(what=self.what, name=self._cut_by.name), 128 + self._cut_by

    async def _watch(self, signals: AsyncIterator[int]) -> None:
        async for number in signals:
            self.signalled(signal.Signals(number))

    def _say(self, message: str) -> None:
        if self.notice is not None:
            self.notice(f"asyncdeploy: {message}")
        else:
            # folded at words to a terminal's width: never cut, never left to wrap
            click.echo(fold(f"asyncdeploy: {message}", terminal_width(sys.stderr)), err=True)
