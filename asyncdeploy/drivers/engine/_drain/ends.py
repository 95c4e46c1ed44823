"""A container's end, as the drain learns it: from the exit stream, the engine's wait, or a
look. Pure: the decisions of the waits, each step a single operation the loop carries out.

- a container signalled: the stream's first death after the signal's mark; signalled before the
  stream opened, a look once it is open finds an exit in between; no stream (lost, or never
  opened), the engine's wait;
- a container with a restart policy: the stream's death, or the first look that sees it
  stopped (a kill during Docker's restart back-off ends it with no new death), whichever comes
  first; and if it runs again after all, the death was an earlier life's: waited for again;
- a container just sent SIGKILL: the stream's death or the engine's wait, whichever answers
  first (Podman's stream comes from an events file read every 250 ms); the engine's failure
  is the answer only when the stream cannot tell either.

A wait answers its continuation once, with :class:`Exited` or the ``EngineError`` that ended
it (a container gone is ``WorkloadNotFound``). Its operations go under its key and keys
derived from it (:func:`keys`), all cancelled with :meth:`Ends.cancel`.
"""

from __future__ import annotations

from collections.abc import Callable

from asyncdeploy._errors import ENGINE_FAILURES, EngineFailure, WorkloadNotFound
from asyncdeploy.drivers.engine._drain.context import DrainContext
from asyncdeploy.drivers.engine._drain.protocol import (
    AwaitExit,
    Exited,
    Fired,
    Key,
    Look,
    NoStream,
    Settled,
    StreamExit,
    StreamSettled,
    Then,
    WaitExit,
    WaitKilled,
)
from asyncdeploy.drivers.engine._ops import ContainerLook, ContainerRef

__all__ = ["Ends", "keys"]

_END = Callable[[Exited | EngineFailure], None]


def keys(key: Key) -> tuple[Key, Key]:
    """The key of a wait's stream and of its engine side (its looks, the engine's wait)."""
    step, name = key
    return key, (f"{step}-engine", name)


def _gone(ref: ContainerRef) -> WorkloadNotFound:
    return WorkloadNotFound(f"{ref.name} is gone", engine="", status=404)


class Ends:
    def __init__(self, m: DrainContext) -> None:
        self.m = m

    def cancel(self, key: Key) -> None:
        self.m.cancel(keys(key))

    # --- a container signalled ---------------------------------------------------------------

    def exit(self, key: Key, wait: AwaitExit, then: Then[Exited]) -> None:
        """The end of ``wait.ref`` under ``key``."""
        ref = wait.ref
        if wait.wait_only:  # not signalled (it was not running): the engine's wait
            self.m.do(key, WaitExit(ref), then)
        elif wait.restartable:
            self._restartable(key, ref, wait.since, then)
        elif wait.before_stream:
            # Signalled before the stream opened: an exit in between is not in the stream;
            # one look once it is open finds it.
            self.m.do(key, StreamSettled(ref, wait.since), self._settled(key, ref, then))
        else:
            self._from_stream(key, ref, wait.since, then)

    def _settled(self, key: Key, ref: ContainerRef, then: Then[Exited]) -> Then[Settled]:
        def settled(answer: Settled | EngineFailure) -> None:
            if isinstance(answer, ENGINE_FAILURES):
                then(answer)
            elif answer.lost or answer.reported:
                self._from_stream(key, ref, answer.since, then)
            else:
                self.m.do(key, Look(ref), looked(answer.since))

        def looked(since: int) -> Then[ContainerLook | None]:
            def then_(answer: ContainerLook | EngineFailure | None) -> None:
                if answer is None:
                    then(_gone(ref))
                elif isinstance(answer, ENGINE_FAILURES):
                    then(answer)
                elif not answer.running:
                    then(Exited(answer.exit_code))
                else:
                    self._from_stream(key, ref, since, then)

            return then_

        return settled

    def _from_stream(self, key: Key, ref: ContainerRef, since: int, then: Then[Exited]) -> None:
        def streamed(answer: Exited | NoStream | EngineFailure) -> None:
            if answer is NoStream.LOST:  # the engine's wait: the stream cannot tell
                self.m.do(key, WaitExit(ref), then)
            else:
                then(answer)

        self.m.do(key, StreamExit(ref, since), streamed)

    # --- a container with a restart policy ---------------------------------------------------

    def _restartable(self, key: Key, ref: ContainerRef, since: int, then: Then[Exited]) -> None:
        """The stream's first death after ``since`` or the first look that sees it stopped;
        then, if its restart policy runs it again, that death was an earlier life's: again,
        from now on."""

        def ended(answer: Exited | EngineFailure) -> None:
            if isinstance(answer, ENGINE_FAILURES) or self.m.kill_triggers_restart:
                then(answer)  # (where a kill restarts, the drain stops it with the engine's stop)
                return
            self.m.do(key, Look(ref), restarting(answer))

        def restarting(code: Exited) -> Then[ContainerLook | None]:
            def then_(answer: ContainerLook | EngineFailure | None) -> None:
                if isinstance(answer, ContainerLook) and answer.running:
                    self._restartable(key, ref, -1, then)
                elif isinstance(answer, ENGINE_FAILURES):
                    then(answer)
                else:
                    then(code)

            return then_

        self._first(key, ref, since, Look(ref), ended)

    # --- a container just sent SIGKILL -------------------------------------------------------

    def killed(self, key: Key, ref: ContainerRef, since: int, then: _END) -> None:
        """The stream's death after ``since`` or the engine's wait, whichever answers first."""
        self._first(key, ref, since, WaitKilled(ref), then)

    # --- the stream against the engine -------------------------------------------------------

    def _first(
        self,
        key: Key,
        ref: ContainerRef,
        since: int,
        engine: Look | WaitKilled,
        then: _END,
    ) -> None:
        """The first end of the stream's and the engine's (its wait; or a look, repeated with
        the restart back-off until it sees the container stopped). The engine's failure is the
        answer only once the stream cannot tell."""
        stream_key, engine_key = keys(key)
        state: dict[str, EngineFailure | bool] = {}
        pauses = self.m.timings.restart.pauses()

        def end(answer: Exited | EngineFailure) -> None:
            self.cancel(key)
            then(answer)

        def streamed(answer: Exited | NoStream | EngineFailure) -> None:
            if answer is NoStream.LOST:
                state["lost"] = True
                failure = state.get("failure")
                if isinstance(failure, ENGINE_FAILURES):
                    end(failure)
            else:
                end(answer)

        def failed(answer: EngineFailure) -> None:
            state["failure"] = answer
            if state.get("lost"):
                end(answer)

        def waited(answer: Exited | EngineFailure) -> None:
            if isinstance(answer, ENGINE_FAILURES):
                failed(answer)
            else:
                end(answer)

        def looked(answer: ContainerLook | EngineFailure | None) -> None:
            if answer is None:
                failed(_gone(ref))
            elif isinstance(answer, ENGINE_FAILURES):
                failed(answer)
            elif not answer.running:
                end(Exited(answer.exit_code))
            else:  # still running: look again after a pause
                self.m.wake(engine_key, self.m.now + next(pauses), look_again)

        def look_again(_: Fired) -> None:
            self.m.do(engine_key, Look(ref), looked)

        self.m.do(stream_key, StreamExit(ref, since), streamed)
        if isinstance(engine, WaitKilled):
            self.m.do(engine_key, engine, waited)
        else:
            self.m.do(engine_key, engine, looked)
