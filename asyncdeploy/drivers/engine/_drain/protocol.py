"""The words the engine drain's core and its loop speak: the timings, the commands the core gives
(an engine operation, a timer, a cancellation, an event) and the observations it is given back
(an operation's answer, a timer that fired, the caller's kill request). Values only.

Every engine operation is one verb over :class:`~._ops.ContainerOps`; the loop
(:mod:`.loop`) carries it out and answers with its result, or the ``EngineError`` it
raised, as a value: the core (:mod:`.core`) never awaits and never calls the engine.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from typing import ClassVar, Generic, TypeAlias, TypeVar

import attrs

from asyncdeploy._backoff import ENGINE_CALL, FOLLOW, RESTART_POLL, Backoff
from asyncdeploy._errors import EngineFailure
from asyncdeploy._events import Event
from asyncdeploy.drivers._books import TrackedContainer
from asyncdeploy.drivers.engine._claim import ClaimRecord, Owner
from asyncdeploy.drivers.engine._ops import ClaimAnswer, ContainerLook, ContainerRef

__all__ = [
    "SIGKILLED",
    "Answer",
    "Answers",
    "AwaitExit",
    "Cancel",
    "Claim",
    "ClaimSeen",
    "Command",
    "Do",
    "Done",
    "DrainTimings",
    "DropClaim",
    "EngineOp",
    "Exited",
    "Fired",
    "FollowLook",
    "FollowStream",
    "Hooked",
    "Key",
    "Kill",
    "KillPause",
    "Look",
    "LookPause",
    "NoStream",
    "OwnerAlive",
    "OwnerState",
    "ReadClaim",
    "Remove",
    "RemoveVolumes",
    "RunHook",
    "Seen",
    "Sent",
    "Settled",
    "Signal",
    "SignalledBefore",
    "Stop",
    "StreamExit",
    "StreamSettled",
    "Tell",
    "Then",
    "TrackedRef",
    "WaitExit",
    "WaitKilled",
    "Wake",
    "WriteClaim",
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
    """A ``pre_stop`` hook's answer."""

    exit_code: int | None
    failed: bool  # it could not run, or its container died under it: on to the signal
    error: EngineFailure | None = None  # a failure worth a line in the summary


@attrs.frozen
class ClaimSeen:
    """A claim record as read, and whether its owner lives."""

    record: ClaimRecord | None
    owner_alive: bool | None  # None: its owner cannot be told from here (another host)


@attrs.frozen
class Settled:
    """The exit stream, settled: its mark ``since``, whether it reported the container's death
    after it, whether it is lost."""

    since: int
    reported: bool
    lost: bool


@attrs.frozen
class Exited:
    """A container's end: its exit code (None: the engine gave none)."""

    code: int | None


@attrs.frozen
class Seen:
    """A follower's view: the state of each container (by id) whose state is known; None:
    gone."""

    looks: Mapping[str, ContainerLook | None]


@attrs.frozen
class OwnerState:
    """Whether a claim's owner process still runs (None: not from here)."""

    alive: bool | None


class Done(enum.Enum):
    """The answer of an operation that returns nothing: it was carried out."""

    DONE = enum.auto()


class NoStream(enum.Enum):
    """The exit stream cannot tell (it was lost, or could not be opened): an engine call
    must."""

    LOST = enum.auto()


class Fired(enum.Enum):
    """A timer's answer (:class:`Wake`)."""

    FIRED = enum.auto()


# --- engine operations (the loop answers each with its answer, or the EngineError it raised) --

A = TypeVar("A")


class Answers(Generic[A]):
    """An engine operation that answers an ``A`` (or the ``EngineError`` it raised): the
    core's continuation for it is typed by it (:meth:`~.context.DrainContext.do`).

    An operation lost with the connection is asked again by the core, after a pause, until its
    give-up rule says no more; unless it is ``once`` (it may have landed: a stop signal), or not
    an engine call whose answer says whether the engine is reached (``engine``)."""

    __slots__ = ()
    once: ClassVar[bool] = False
    engine: ClassVar[bool] = True


@attrs.frozen
class Claim(Answers[ClaimAnswer]):
    """Claim the drain, atomically on the engine → :class:`~._ops.ClaimAnswer`. Where
    the claim is the record (Docker: a volume created with it), ``record`` is written at once."""

    pause: ContainerRef
    record: ClaimRecord


@attrs.frozen
class Look(Answers[ContainerLook | None]):
    """A container's state → ``ContainerLook | None`` (None: it is gone)."""

    ref: ContainerRef


@attrs.frozen
class LookPause(Answers[ContainerLook | None]):
    """The pause container's state → ``ContainerLook | None``."""

    pause: ContainerRef


@attrs.frozen
class ReadClaim(Answers[ClaimSeen]):
    """The claim record → :class:`ClaimSeen` (whether its owner lives is read by the loop)."""

    pause: ContainerRef


@attrs.frozen
class OwnerAlive(Answers[OwnerState]):
    """Whether the process ``owner`` still runs → :class:`OwnerState`."""

    engine: ClassVar[bool] = False  # read from this host
    owner: Owner


@attrs.frozen
class WriteClaim(Answers[Done]):
    """Write (or replace) the claim record → ``Done``."""

    pause: ContainerRef
    record: ClaimRecord


@attrs.frozen
class DropClaim(Answers[Done]):
    """Remove this drain's claim record once its pause container is gone → ``Done``."""

    pause: ContainerRef
    record: ClaimRecord


@attrs.frozen
class SignalledBefore(Answers[frozenset[str]]):
    """The names of ``refs`` the engine saw signalled (its kill events) since its pause →
    ``frozenset[str]``: what a dead owner had signalled, from the engine's own record."""

    pause: ContainerRef
    refs: tuple[ContainerRef, ...]


@attrs.frozen
class RunHook(Answers[Hooked]):
    """The container's ``pre_stop`` hook (exec, or the HTTP GET sent to ``pause``'s address)
    → :class:`Hooked` (a failure is its answer: on to the signal)."""

    engine: ClassVar[bool] = False  # its failures are its answer (on to the signal)
    ref: ContainerRef
    pause: ContainerRef | None


@attrs.frozen
class StreamExit(Answers[Exited | NoStream]):
    """The container's first death after mark ``since`` (-1: from now on), as the exit stream
    reports it → :class:`Exited`, or ``NoStream.LOST`` once the stream is lost (or never
    opened)."""

    engine: ClassVar[bool] = False
    ref: ContainerRef
    since: int = -1


@attrs.frozen
class StreamSettled(Answers[Settled]):
    """Once the exit stream is open (or known lost) → :class:`Settled`: whether it reported a
    death of ``ref`` after mark ``since`` (-1: the mark now, which it answers with)."""

    engine: ClassVar[bool] = False
    ref: ContainerRef
    since: int


@attrs.frozen
class WaitExit(Answers[Exited]):
    """The engine's wait for the container to stop → :class:`Exited`."""

    ref: ContainerRef


@attrs.frozen
class WaitKilled(Answers[Exited]):
    """The engine's wait for a container just sent SIGKILL (it waits on nothing else) →
    :class:`Exited`."""

    ref: ContainerRef


@attrs.frozen
class Signal(Answers[Sent]):
    """Send the stop signal, one call → :class:`Sent`. Asked again only when it surely never
    reached the engine (``CallNotSent``); a lost answer is its continuation's (it may have
    landed), as is a refusal while the container restarts."""

    once: ClassVar[bool] = True
    ref: ContainerRef


@attrs.frozen
class Stop(Answers[Exited]):
    """The engine's stop with ``timeout`` (a restart policy a kill would undo) → :class:`Exited`;
    one call (a lost answer is its continuation's: the container stops all the same)."""

    once: ClassVar[bool] = True
    ref: ContainerRef
    timeout: float


@attrs.frozen
class AwaitExit:
    """A wait for the container's first death after mark ``since`` (-1: from the wait's
    start), not an operation: the core's (:mod:`.ends`) from the exit stream, the engine's wait
    and looks; ``restartable``: a death during a restart does not count."""

    ref: ContainerRef
    since: int
    before_stream: bool
    restartable: bool = False
    wait_only: bool = False  # not signalled (it was not running): the engine's wait


@attrs.frozen
class Kill(Answers[Sent]):
    """SIGKILL → :class:`Sent`."""

    ref: ContainerRef


@attrs.frozen
class KillPause(Answers[Done]):
    """SIGKILL the pause container → ``Done``."""

    pause: ContainerRef


@attrs.frozen
class Remove(Answers[Done]):
    """Force-remove → ``Done`` (a removal in progress elsewhere is waited for)."""

    ref: ContainerRef


@attrs.frozen
class RemoveVolumes(Answers[Done]):
    """Remove the volumes asyncdeploy created for the plan ``owner`` that nothing uses →
    ``Done``."""

    owner: str


@attrs.frozen
class FollowLook(Answers[Seen]):
    """What became of ``refs`` (a follower's view), a look at each → :class:`Seen`."""

    refs: tuple[ContainerRef, ...]


@attrs.frozen
class FollowStream(Answers[Seen | NoStream]):
    """What became of ``refs`` (a follower's view) as the exit stream tells it, once it reports
    a death or a removal of one of them, or at ``until`` → :class:`Seen` (the ones whose state
    it knows); ``NoStream.LOST`` at once when it cannot tell (it waits for the stream's
    opening until then)."""

    engine: ClassVar[bool] = False
    refs: tuple[ContainerRef, ...]
    until: float


EngineOp: TypeAlias = (
    Claim
    | Look
    | LookPause
    | ReadClaim
    | OwnerAlive
    | WriteClaim
    | DropClaim
    | SignalledBefore
    | RunHook
    | Signal
    | Stop
    | Kill
    | KillPause
    | Remove
    | RemoveVolumes
    | FollowLook
    | FollowStream
    | StreamExit
    | StreamSettled
    | WaitExit
    | WaitKilled
)


# --- commands ---------------------------------------------------------------------------------


@attrs.frozen
class Do:
    """Carry out ``operation``; answer under ``key``."""

    key: Key
    operation: EngineOp


@attrs.frozen
class Wake:
    """Answer under ``key`` (with ``Fired.FIRED``) at ``at`` on the loop's clock."""

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
# What the core is told under a key: an operation's answer, the EngineError it raised, or a
# timer that fired. Each continuation takes only its own operation's (``Then[A]``).
Answer: TypeAlias = (
    Done
    | ClaimAnswer
    | ContainerLook
    | ClaimSeen
    | OwnerState
    | frozenset[str]
    | Hooked
    | Sent
    | Exited
    | Seen
    | Settled
    | NoStream
    | EngineFailure
    | Fired
    | None  # a look at a container that is gone
)
Then: TypeAlias = Callable[[A | EngineFailure], None]  # what the core does with an answer

SIGKILLED = 137  # the exit code of a container the kill ended


@attrs.define(kw_only=True)
class TrackedRef(TrackedContainer):
    """What a drain knows of one init, run or sidecar container, and the container."""

    ref: ContainerRef
