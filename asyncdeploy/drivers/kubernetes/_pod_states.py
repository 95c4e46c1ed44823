"""One Pod's drain as the API shows it, in the container engines' event vocabulary.

:class:`PodDrainReader` is pure: :mod:`._drain` feeds it the Pods and the kubelet's Events it watches.
What the API shows becomes events. Beside the Pod watch, a second watch follows the Pod's
Events (resumed the same way), where the kubelet records what it does (:mod:`._kubelet`):
``DrainStarted`` lists the init and run containers; at the kubelet's ``Killing`` ("Stopping
container X") ``PreStopStarted`` for a container with a preStop hook, else ``SignalSent`` (the
kubelet signals right after that record); at ``FailedPreStopHook`` ``PreStopFinished`` (exit code
unknown: the kubelet does not record it; ``timed_out`` when it came at the deadline) and then
``SignalSent``; ``ContainerExited`` from ``state.terminated``, before which any step the Events
did not show is emitted (a hook that succeeds is not recorded, so its ``PreStopFinished`` (exit
0) and the ``SignalSent`` after it are known only then; likewise when Events cannot be read);
``ContainerForceKilled`` first when that is exit 137 at the deadline (or ``ExceededGracePeriod``
is recorded); ``ContainerRemoved`` for each container seen ended and one ``PauseRemoved`` for the
sandbox (``<pod>-sandbox``) when the Pod is gone; ``DrainFinished`` with the summary.

A native sidecar (an init container with ``restartPolicy: Always``, role ``sidecar``) is recorded
``Killing`` at the start like the others, but the kubelet signals it only in its turn: once the
run containers, and the sidecars after it, have exited. Its ``SignalSent`` comes then, and a Pod
update that shows several ends emits them in the kubelet's order (run containers, then the
sidecars, the last one first).

Outcomes: ``exited`` / ``killed`` as seen; ``already-exited`` for containers that had ended before
the delete took effect (init containers, always); ``killed`` also for the containers of a
Pod deleted with grace 0 (the API removes the object at once, the kubelet kills what runs: a
``Killing`` Event, then SIGKILL after its minimum grace of 2 s, with no status left to show it);
``missing`` for containers that went with the Pod without a terminated state otherwise (a
container never started).
The wait for a Pod to go ends at the caller's ``timeout`` (seconds from the drain's start, as
kubectl's ``delete --timeout``), else past its deadline plus a margin (:func:`teardown_margin`:
at least ``WATCH_MARGIN``, half the grace period for longer ones, as a GPU Pod's teardown is
slow). A Pod still there then whose containers were all seen to end after the delete is not a
failed drain: the kubelet is still tearing it down (a slow node, volumes, devices), which
``TeardownPending`` says and the summary's ``tearing_down`` marks, with no error. A Pod still
there with containers not seen to end, or that cannot be followed (a watch refused with 403),
is an error in its summary, which says what was seen. A Pod still there whose node had stopped
reporting (:meth:`PodDrainReader.suspect`, read by :mod:`._drain` just before the give-up time)
is neither: ``NodeUnreachable`` names the node and what to run, the summary's
``unreachable_node`` and error say that nobody saw what became of its containers.
A drain cut short (:meth:`PodDrainReader.kill`: the caller cancelled, e.g. a second Ctrl-C) is
finished by a grace-0 delete: the containers still running are ``killed`` (reason
``cancelled``), and ``KILL_WAIT`` bounds the wait for the Pod to go.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import anyio
import attrs

from asyncdeploy._events import (
    ContainerEnd,
    ContainerExited,
    ContainerForceKilled,
    ContainerRemoved,
    DrainStarted,
    DrainSummary,
    Emit,
    NodeUnreachable,
    PauseRemoved,
    PreStopFinished,
    PreStopStarted,
    SignalSent,
    TeardownPending,
)
from asyncdeploy.drivers._books import DrainBooks, TrackedContainer, effective_grace
from asyncdeploy.drivers.kubernetes import _status as pod_status
from asyncdeploy.drivers.kubernetes._kubelet import (
    EXCEEDED_GRACE_PERIOD,
    FAILED_PRE_STOP_HOOK,
    KILLING,
    KubeletEvent,
)

__all__ = [
    "KILL_TOLERANCE",
    "KILL_WAIT",
    "WATCH_MARGIN",
    "PodDrainReader",
    "pod_uid",
    "sandbox_name",
    "teardown_margin",
]

WATCH_MARGIN = 15.0  # seconds past a Pod's grace before it counts as stuck, at least
TEARDOWN_SHARE = 0.5  # ... and this share of its grace: long graces are GPU Pods, slow to free
KILL_WAIT = 15.0  # after a grace-0 delete: how long the Pod may take to go
KILL_TOLERANCE = 1.0  # deletionTimestamp has whole seconds: the kubelet's deadline may be earlier
SIGKILLED = 137


def sandbox_name(pod_name: str) -> str:
    """The name ``PauseRemoved`` carries: the Pod sandbox, the kubelet's pause container."""
    return f"{pod_name}-sandbox"


def teardown_margin(grace: int, minimum: float = WATCH_MARGIN) -> float:
    """How long past its deadline a Pod may take to go before it is reported: the kubelet
    SIGKILLs at the deadline, but a process freeing a GPU's memory, the volumes' unmount and the
    sandbox's end can take tens of seconds more, and longest for the Pods given long graces."""
    return max(minimum, grace * TEARDOWN_SHARE)


def pod_uid(pod: Mapping[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("uid", ""))


@attrs.define(kw_only=True)
class _Tracked(TrackedContainer):
    signal: str
    running_at_start: bool
    pre_stop: bool = False  # it has a preStop hook
    stopping: bool = False  # the kubelet began to stop it (Killing)
    pre_stop_ended: bool = False
    signalled: bool = False
    awaiting_turn: bool = False  # a native sidecar told to stop, signalled in its turn
    force_killed: bool = False


@attrs.define(kw_only=True)
class PodDrainReader:
    """One Pod's drain read from what the API shows; every step is emitted as it is seen, and
    written down in its :class:`~asyncdeploy.drivers._books.DrainBooks` (the clock, the
    deadline, the error lines, once each, and the summary), as the engine drain keeps its own.
    """

    books: DrainBooks
    pod_name: str
    uid: str
    margin: float
    containers: list[_Tracked]
    deleting: bool = False  # the delete took effect (deletionTimestamp seen)
    killing: bool = False  # cut short: a grace-0 delete follows (kill)
    began: bool = False  # DrainStarted emitted
    summary: DrainSummary | None = None
    timeout: float | None = None  # the caller's bound on the wait, from the drain's start
    namespace: str = ""
    node: str | None = None  # where the Pod is bound (spec.nodeName)
    node_silent: pod_status.NodeSilence | None = None  # its node stopped reporting (suspect)
    _give_up_at: float | None = None

    @classmethod
    def of(
        cls,
        pod: Mapping[str, Any],
        *,
        grace: int | None,
        started: float,
        margin: float,
        emit: Emit,
        clock: Callable[[], float] = anyio.current_time,
        workload: str | None = None,
        timeout: float | None = None,
    ) -> PodDrainReader:
        """``workload``: the name the events carry (default: the Pod's workload label);
        ``timeout``: how long from ``started`` to wait for the Pod to go (default: its deadline
        plus ``margin``)."""
        metadata = pod.get("metadata") or {}
        spec_grace = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")
        effective = effective_grace(spec_grace, grace)
        pending = metadata.get("deletionGracePeriodSeconds")
        if pending is not None:  # already terminating: a longer grace would not be honoured
            effective = min(effective, int(pending))
        statuses = pod_status.container_statuses(pod)
        containers = []
        for role, spec in pod_status.container_specs(pod):
            entry = statuses.get(spec["name"])
            tracked = _Tracked(
                name=spec["name"],
                role=role,
                signal=pod_status.stop_signal(spec),
                running_at_start=pod_status.container_state(entry) == "running",
                pre_stop=bool((spec.get("lifecycle") or {}).get("preStop")),
            )
            ended = pod_status.terminated(entry) or (
                pod_status.terminated({"state": (entry or {}).get("lastState")})
                if pod_status.container_state(entry) == "restarting"
                else None
            )
            if ended is not None:
                tracked.outcome, tracked.exit_code = "already-exited", ended.get("exitCode")
            containers.append(tracked)
        books = DrainBooks(
            workload=workload or pod_status.workload_name(pod),
            grace=effective,
            started=started,
            emit=emit,
            clock=clock,
        )
        return cls(
            books=books,
            pod_name=str(metadata.get("name", "")),
            uid=pod_uid(pod),
            margin=teardown_margin(effective, margin),
            containers=containers,
            timeout=timeout,
            namespace=str(metadata.get("namespace", "")),
            node=pod_status.pod_node(pod),
        )

    @property
    def give_up(self) -> float:
        """When the wait for the Pod to go ends."""
        if self._give_up_at is not None:
            return self._give_up_at
        if self.timeout is not None:
            return self.books.started + self.timeout
        return self.books.deadline + self.margin

    def kill(self) -> None:
        """The drain is cut short: what still runs is killed (the caller sends a grace-0
        delete), and the Pod has ``KILL_WAIT`` from now to go."""
        if not self.done and not self.killing:
            self.killing = True
            self._give_up_at = self.books.clock() + KILL_WAIT

    def stuck(self, last_error: str | None = None) -> str:
        """The error for a Pod still there at :attr:`give_up`, saying what was seen."""
        running = [c.name for c in self.containers if c.outcome is None]
        if self.killing:
            when = f"{KILL_WAIT:g} s after its grace-0 delete"
        elif self.timeout is not None:
            when = f"at the {self.timeout:g} s timeout"
        else:
            when = f"{self.margin:g} s after its {self.books.grace} s grace period"
        if running:
            seen = f"{', '.join(running)} not seen to end"
            if not self.deleting:
                seen += "; the delete was never seen to take effect"
        else:
            seen = (
                "every container ended; the kubelet is still tearing it down (volumes, "
                "devices, the sandbox), and it holds its name until then"
            )
        why = f"; last watch error: {last_error}" if last_error else ""
        return f"pod {self.pod_name} was still there {when}: {seen}{why}"

    def suspect(self, silence: pod_status.NodeSilence | None) -> None:
        """What was read of the Pod's node shortly before :attr:`give_up` (None: it reports)."""
        self.node_silent = silence

    def ran_out(self, last_error: str | None = None) -> None:
        """The wait for the Pod ended (:attr:`give_up`) with the Pod still there: its node lost
        when it had stopped reporting (:meth:`suspect`), else tearing down when every container
        was seen to end after the delete took effect, else stuck."""
        if self.done:
            return
        if self.node_silent is not None:
            self._node_lost(self.node_silent, last_error)
            return
        if self.killing or not self.deleting or any(c.outcome is None for c in self.containers):
            self.fail(self.stuck(last_error))
            return
        waited = self.give_up - self.books.started
        self.books.emit(TeardownPending(**self.books.at(), timeout=round(waited, 3)))
        self.summary = self.books.finish(self.containers, tearing_down=True)

    def _node_lost(self, silence: pod_status.NodeSilence, last_error: str | None) -> None:
        """The Pod is held by a node that stopped reporting: what became of the containers not
        seen to end is unknown (they may still run there), and the Pod stays until its kubelet
        comes back; the truth, and what to run, not a teardown nor a plain stuck drain."""
        remedy = silence.remedy(self.namespace, self.pod_name)
        self.books.emit(
            NodeUnreachable(
                **self.books.at(),
                node=silence.node,
                pod=self.pod_name,
                silent_for=silence.silent_for,
                remedy=remedy,
            )
        )
        unseen = [c.name for c in self.containers if c.outcome is None]
        how = (
            "its Ready condition is Unknown"
            if silence.silent_for is None
            else f"its kubelet has not renewed its lease for {silence.silent_for:g} s"
        )
        seen = (
            f"{', '.join(unseen)} not seen to end (nobody could see them)"
            if unseen
            else "every container was seen to end before it went silent"
        )
        why = f"; last watch error: {last_error}" if last_error else ""
        self.books.error(
            f"pod {self.pod_name} on node {silence.node} was still there when the wait ended "
            f"and the node had stopped reporting ({how}): {seen}; {remedy}{why}"
        )
        for c in self.containers:
            if c.outcome is None:
                c.outcome = "missing"
        self.summary = self.books.finish(self.containers, unreachable_node=silence.node)

    @property
    def done(self) -> bool:
        return self.summary is not None

    def begin(self) -> None:
        self.began = True
        self.books.emit(
            DrainStarted(
                workload=self.books.workload,
                elapsed=self.books.elapsed(),
                grace_period_seconds=self.books.grace,
                deadline=time.time() + (self.books.deadline - self.books.clock()),
                containers=tuple(c.name for c in self.containers),
            )
        )

    def observe(self, pod: Mapping[str, Any]) -> None:
        """A newer state of the Pod: the delete taking effect, containers ended."""
        if self.done:
            return
        if (pod.get("metadata") or {}).get("deletionTimestamp"):
            self.deleting = True
        statuses = pod_status.container_statuses(pod)
        for c in self._stop_order():
            ended = pod_status.terminated(statuses.get(c.name))
            if c.outcome is None and ended is not None:
                self._exited(c, ended)

    def _stop_order(self) -> list[_Tracked]:
        """The kubelet's order of ends: the run containers, then the native sidecars, the
        last started first (init containers had ended before)."""
        sidecars = [c for c in self.containers if c.role == "sidecar"]
        rest = [c for c in self.containers if c.role != "sidecar"]
        return (
            [c for c in rest if c.role == "run"]
            + sidecars[::-1]
            + [c for c in rest if c.role != "run"]
        )

    def _turn_came(self, c: _Tracked) -> bool:
        """A native sidecar's stop signal waits for the run containers and the sidecars after
        it (still running) to exit; any other container's does not wait."""
        if c.role != "sidecar":
            return True
        after = self.containers[self.containers.index(c) + 1 :]
        return not any(
            o.outcome is None and (o.running_at_start or o.stopping)
            for o in after
            if o.role in ("run", "sidecar")
        )

    def _signal_in_turn(self, c: _Tracked) -> None:
        if self._turn_came(c):
            self._signal(c)
        else:
            c.awaiting_turn = True

    def kubelet(self, event: KubeletEvent) -> None:
        """An Event the kubelet recorded about one of the Pod's containers (:mod:`._kubelet`)."""
        if self.done:
            return
        c = next((c for c in self.containers if c.name == event.container), None)
        if c is None or c.outcome is not None:
            return
        self.deleting = True  # the kubelet acts on the delete before the Pod watch may show it
        if event.reason == KILLING:
            self._stopping(c)
            if not c.pre_stop:
                self._signal_in_turn(c)
        elif event.reason == FAILED_PRE_STOP_HOOK:
            self._stopping(c)
            self._pre_stop_ended(c, failed=True)
            self._signal_in_turn(c)
        elif event.reason == EXCEEDED_GRACE_PERIOD:
            self._force_killed(c)

    def _stopping(self, c: _Tracked) -> None:
        if c.stopping:
            return
        c.stopping = True
        if c.pre_stop:
            self.books.emit(PreStopStarted(**self.books.at(c)))

    def _pre_stop_ended(self, c: _Tracked, *, failed: bool) -> None:
        if not c.pre_stop or c.pre_stop_ended:
            return
        c.pre_stop_ended = True
        late = failed and self.books.clock() >= self.books.deadline - KILL_TOLERANCE
        self.books.emit(
            PreStopFinished(
                **self.books.at(c),
                exit_code=None if failed else 0,  # the kubelet records no exit code
                timed_out=late,
            )
        )

    def _signal(self, c: _Tracked) -> None:
        if c.signalled:
            return
        c.signalled = True
        self.books.emit(
            SignalSent(
                **self.books.at(c),
                signal=c.signal,
            )
        )

    def _force_killed(self, c: _Tracked, reason: str = "deadline") -> None:
        if c.force_killed:
            return
        c.force_killed = True
        self.books.emit(
            ContainerForceKilled(
                **self.books.at(c),
                reason=reason,
            )
        )

    def _exited(self, c: _Tracked, ended: Mapping[str, Any]) -> None:
        code = ended.get("exitCode")
        exit_code = None if code is None else int(code)
        outcome: ContainerEnd = "exited"
        if not self.deleting:
            outcome = "already-exited"  # it ended on its own before the delete took effect
        else:
            # the steps the Events did not show (a hook that succeeded is not recorded)
            self._stopping(c)
            self._pre_stop_ended(c, failed=False)
            self._signal(c)
            late = self.killing or self.books.clock() >= self.books.deadline - KILL_TOLERANCE
            if c.force_killed or (exit_code == SIGKILLED and late):
                outcome = "killed"
                self._force_killed(c, reason="cancelled" if self.killing else "deadline")
        c.outcome, c.exit_code, c.seconds = outcome, exit_code, self.books.elapsed()
        self.books.emit(
            ContainerExited(
                **self.books.at(c, elapsed=c.seconds),
                exit_code=exit_code,
                graceful=outcome != "killed" and exit_code != SIGKILLED,
            )
        )
        for waiting in self._stop_order():  # a sidecar whose turn this exit brought
            if waiting.awaiting_turn and waiting.outcome is None and self._turn_came(waiting):
                waiting.awaiting_turn = False
                self._signal(waiting)

    def removed(self, pod: Mapping[str, Any] | None) -> None:
        """The Pod is gone: its last state (if known), the removals, the summary."""
        if self.done:
            return
        if pod is not None:
            self.observe(pod)
        for c in self.containers:
            at_once = self.books.grace == 0 or self.killing
            if c.outcome is None and at_once and (c.running_at_start or c.stopping):
                # removed at once; the kubelet kills it with no status left to show the end
                c.outcome = "killed"
                self._force_killed(c, reason="cancelled" if self.killing else "grace period 0")
            elif c.outcome is None:
                c.outcome = "missing"  # gone without a terminated state (never started)
            else:
                self.books.emit(
                    ContainerRemoved(
                        **self.books.at(c),
                    )
                )
        self.books.emit(
            PauseRemoved(
                workload=self.books.workload,
                elapsed=self.books.elapsed(),
                container=sandbox_name(self.pod_name),
            )
        )
        self._finish()

    def fail(self, message: str) -> None:
        """End the drain without seeing the Pod go: ``message`` goes into the summary."""
        if self.done:
            return
        self.books.error(message)
        for c in self.containers:
            if c.outcome is None:
                c.outcome = "missing"
        self._finish()

    def _finish(self) -> None:
        self.summary = self.books.finish(self.containers)
