"""The words the engine drain's core and its loop speak: the timings, the commands the core gives
(an engine operation, a timer, a cancellation, an event) and the observations it is given back
(an operation's answer, a timer that fired, the caller's kill request). Values only.

Every engine operation is one verb over :class:`~._ops.ContainerOps`; the loop
(:mod:`.loop`) carries it out and answers with its result, or the ``EngineError`` it
raised, as a value: the core (:mod:`.core`) never awaits and never calls the engine.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeAlias

import attrs

from asyncdeploy._backoff import ENGINE_CALL, FOLLOW, RESTART_POLL, Backoff
from asyncdeploy._errors import EngineFailure
from asyncdeploy._events import Event
from asyncdeploy.drivers._books import TrackedContainer
from asyncdeploy.drivers.engine._claim import ClaimRecord, Owner
from asyncdeploy.drivers.engine._ops import ContainerRef

__all__ = [
    "SIGKILLED",
    "Answer",
    "AwaitExit",
    "AwaitKilled",
    "Cancel",
    "Claim",
    "ClaimSeen",
    "Command",
    "Do",
    "DrainTimings",
    "DropClaim",
    "EngineOp",
    "FollowLook",
    "Hooked",
    "Key",
    "Kill",
    "KillPause",
    "LookPause",
    "OwnerAlive",
    "ReadClaim",
    "Remove",
    "RemoveSidecar",
    "RemoveVolumes",
    "RunHook",
    "Sent",
    "Signal",
    "SignalledBefore",
    "Stop",
    "Tell",
    "Then",
    "TrackedRef",
    "Wake",
    "WriteClaim",
    "code_of",
]


@attrs.frozen(kw_only=True)
class DrainTimings:
    """Every delay and bound of an engine drain, in seconds: one value, passed in (tests pass a
    short one; nothing is read from module constants)."""

    give_up_after: float = 5.0  # past the deadline: how long the engine may stay unreachable
    # past the deadline: how long one engine call may go unanswered (Podman, eight deleters of
    # forty workloads at once on two loaded cores, took over 10 s to answer some removals)
    call_margin: float = 30.0
    engine_call: Backoff = ENGINE_CALL  # between tries of a call lost with the connection
    kill_wait: float = 10.0  # how long a SIGKILLed container may take to be reported gone
    cleanup_timeout: float = 60.0  # bound on the kill-and-remove part
    # A drain still running this long after its start writes its claim record (once): the
    # signals go first, and a drain over by then never writes one.
    record_delay: float = 1.0
    record_wait: float = 4.0  # paused, but no record for this long: nobody drains it
    # An owner still recorded this long past its deadline is stuck: past its give-up and
    # cleanup bounds, with room to spare (an owner on another host is trusted until then).
    owner_bound: float = 80.0
    takeover_settle: float = 0.3  # between writing a takeover's record and reading it back
    follow: Backoff = FOLLOW  # a follower's steps (and its checks of a live owner: the longest)
    # A follower learns exits and removals from the exit stream; it looks at the containers
    # itself once, this long in (what happened before its stream opened), and then rarely.
    follow_catch_up: float = 2.0
    follow_look_every: float = 30.0
    restart: Backoff = RESTART_POLL  # a container restarting under its policy, looked at


Key: TypeAlias = tuple[str, str]  # (step, container name or ""): one outstanding command each


# --- engine operations (the loop answers each with its result, or an EngineError) -----------


@attrs.frozen
class RemoveSidecar:
    """SIGKILL (when running) and remove an autoheal sidecar → None."""

    ref: ContainerRef


@attrs.frozen
class Claim:
    """Claim the drain, atomically on the engine → :class:`~._ops.ClaimAnswer`. Where
    the claim is the record (Docker: a volume created with it), ``record`` is written at once."""

    pause: ContainerRef
    record: ClaimRecord


@attrs.frozen
class LookPause:
    """The pause container's state → ``ContainerLook | None``."""

    pause: ContainerRef


@attrs.frozen
class ReadClaim:
    """The claim record → :class:`ClaimSeen` (whether its owner lives is read by the loop)."""

    pause: ContainerRef


@attrs.frozen
class OwnerAlive:
    """Whether the process ``owner`` still runs → ``bool | None`` (None: not from here)."""

    owner: Owner


@attrs.frozen
class WriteClaim:
    """Write (or replace) the claim record → None."""

    pause: ContainerRef
    record: ClaimRecord


@attrs.frozen
class DropClaim:
    """Remove this drain's claim record once its pause container is gone → None."""

    pause: ContainerRef
    record: ClaimRecord


@attrs.frozen
class SignalledBefore:
    """The names of ``refs`` the engine saw signalled (its kill events) since its pause →
    ``frozenset[str]``: what a dead owner had signalled, from the engine's own record."""

    pause: ContainerRef
    refs: tuple[ContainerRef, ...]


@attrs.frozen
class RunHook:
    """The container's ``pre_stop`` hook (exec, or the HTTP GET sent to ``pause``'s address),
    ended early by the container's death → :class:`Hooked`."""

    ref: ContainerRef
    pause: ContainerRef | None


@attrs.frozen
class Signal:
    """Send the stop signal once (sent again only when it surely never reached the engine, or
    refused while the container restarts) → :class:`Sent`."""

    ref: ContainerRef


@attrs.frozen
class Stop:
    """The engine's stop with ``timeout`` (a restart policy a kill would undo) → exit code."""

    ref: ContainerRef
    timeout: float


@attrs.frozen
class AwaitExit:
    """The exit code of the container's first death after mark ``since``: from the exit
    stream, else the engine's wait; ``restartable``: a death during a restart does not count."""

    ref: ContainerRef
    since: int
    before_stream: bool
    restartable: bool = False
    wait_only: bool = False  # not signalled (it was not running): the engine's wait


@attrs.frozen
class Kill:
    """SIGKILL → :class:`Sent`."""

    ref: ContainerRef


@attrs.frozen
class AwaitKilled:
    """The exit code of a container just sent SIGKILL (the stream, or the engine's answer)."""

    ref: ContainerRef
    since: int


@attrs.frozen
class KillPause:
    """SIGKILL the pause container → None."""

    pause: ContainerRef


@attrs.frozen
class Remove:
    """Force-remove → None (a removal in progress elsewhere is waited for)."""

    ref: ContainerRef


@attrs.frozen
class RemoveVolumes:
    """Remove the volumes asyncdeploy created for the plan ``owner`` that nothing uses → None."""

    owner: str


@attrs.frozen
class FollowLook:
    """What became of ``refs`` (a follower's view) → ``dict[id, ContainerLook | None]`` for the
    ones whose state is known: a look at each when ``fresh`` (or without a usable exit stream),
    else what the exit stream reported since mark ``since``, once something did or at ``until``."""

    refs: tuple[ContainerRef, ...]
    fresh: bool
    since: int
    until: float


EngineOp: TypeAlias = (
    RemoveSidecar
    | Claim
    | LookPause
    | ReadClaim
    | OwnerAlive
    | WriteClaim
    | DropClaim
    | SignalledBefore
    | RunHook
    | Signal
    | Stop
    | AwaitExit
    | Kill
    | AwaitKilled
    | KillPause
    | Remove
    | RemoveVolumes
    | FollowLook
)


# --- answers that are more than one value -----------------------------------------------------


@attrs.frozen
class Sent:
    """A signal's answer: ``delivered`` (False: the container was not running), and the exit
    stream's mark taken just before it, so the wait that follows counts deaths after it."""

    delivered: bool
    since: int
    before_stream: bool  # sent before the exit stream was open


@attrs.frozen
class Hooked:
    exit_code: int | None
    failed: bool  # it could not run, or its container died under it: on to the signal
    error: EngineFailure | None = None  # a failure worth a line in the summary


@attrs.frozen
class ClaimSeen:
    record: ClaimRecord | None
    owner_alive: bool | None  # None: its owner cannot be told from here (another host)


# --- commands ---------------------------------------------------------------------------------


@attrs.frozen
class Do:
    """Carry out ``operation``; answer under ``key``."""

    key: Key
    operation: EngineOp


@attrs.frozen
class Wake:
    """Answer under ``key`` (with None) at ``at`` on the loop's clock."""

    key: Key
    at: float


@attrs.frozen
class Cancel:
    """Stop the command under ``key``; no answer comes for it."""

    key: Key


@attrs.frozen
class Tell:
    """Hand ``event`` to the caller (never waiting for it)."""

    event: Event


Command: TypeAlias = Do | Wake | Cancel | Tell
Answer: TypeAlias = object  # an operation's result, an EngineError, or None for a Wake
Then: TypeAlias = Callable[[Answer], None]  # what the core does with an answer

SIGKILLED = 137  # the exit code of a container the kill ended


@attrs.define(kw_only=True)
class TrackedRef(TrackedContainer):
    """What a drain knows of one init, run or sidecar container, and the container."""

    ref: ContainerRef


def code_of(answer: Answer) -> int | None:
    """An operation's answer as an exit code (None: the engine gave none)."""
    return answer if isinstance(answer, int) and not isinstance(answer, bool) else None
