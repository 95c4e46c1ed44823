"""The whole exception tree of asyncdeploy.

::

    AsyncDeployError
    ├── PlanError(ValueError)            an invalid plan; ``.path`` names the field
    ├── SelectorError(ValueError)        an invalid label selector
    ├── DriverNotFound(LookupError)      an unknown driver name
    │   └── DriverNotInstalled           its extra is not installed; the message says how
    │       └── NoDriverInstalled        auto-detection found no driver installed at all
    ├── EngineError                      ``.engine`` names the driver
    │   ├── EngineUnavailable            the socket or API server cannot be reached
    │   ├── EngineAPIError               the engine refused a call; ``.status``, its answer
    │   ├── EngineTimeout(TimeoutError)  a call did not answer in time
    │   └── ExecInterrupted              the container stopped while an exec ran in it
    ├── WorkloadNotFound(LookupError)    no such workload or container; ``.engine``, and
    │                                    ``.status`` when an API call answered 404 (else None)
    ├── WorkloadConflict                 a name taken, or a state that forbids the call; the
    │   │                                same ``.engine`` and ``.status`` (409, Podman's 500s)
    │   └── ReplaceInProgress            another replace of the plan holds its lock (no status)
    ├── UnsupportedEventLoop(RuntimeError) the deployer runs on asyncio only (not trio)
    ├── OperationTimeout(TimeoutError)   an operation passed its own deadline (a replace: its
    │                                    lock's bound; a verify run: its phases' sum)
    ├── CreateError                      a create failed (image, init container, start): on Docker and
    │                                    Podman its call rolled back what it made; from wait_ready
    │                                    (a container exited), nothing is removed (see the class)
    │   └── ReplaceFailed                a recreate's new instance failed after the old one's drain:
    │                                    ``.serving`` says what was brought back (or nothing)
    ├── DrainError                       a drain finished, but some steps failed; ``.summaries``
    │   └── DrainUnreachable             ... because the engine stopped answering (also an
    │                                    EngineUnavailable: the CLI exits 3); delete again later
    └── WorkloadError                    the server-side drain kit (asyncdeploy.workload.errors)
        └── ControlSocketError           its control socket cannot be served or reached

Engine-specific exceptions are translated at each driver's edge, always ``raise ... from exc``.
A workload that is not there, or a name that is taken, is not an engine failure: an engine may
have answered so (``.status``), or a list may simply not hold it; code that handles every
answer but success alike catches :data:`ENGINE_FAILURES`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from asyncdeploy._events import DrainSummary

__all__ = [
    "AsyncDeployError",
    "CreateError",
    "DrainError",
    "DrainUnreachable",
    "DriverNotFound",
    "DriverNotInstalled",
    "EngineAPIError",
    "EngineError",
    "EngineTimeout",
    "EngineUnavailable",
    "ExecInterrupted",
    "NoDriverInstalled",
    "OperationTimeout",
    "PlanError",
    "ReplaceFailed",
    "ReplaceInProgress",
    "SelectorError",
    "UnsupportedEventLoop",
    "WorkloadConflict",
    "WorkloadNotFound",
]


class AsyncDeployError(Exception):
    """The root of every error asyncdeploy raises on purpose."""


class PlanError(AsyncDeployError, ValueError):
    """A plan (or one of its values) is invalid; ``path`` names the field, e.g. ``containers[1].image``.

    A plan read from a file names it (``source``) and the line (``line``) of the field. A plan
    with several problems raises one ``PlanError`` holding each in ``problems`` (itself when it
    is the only one): ``path`` and ``message`` are the first's, ``str()`` lists them all, one a
    line (``plan.yaml:4: containers[0].image: ...``).
    """

    def __init__(
        self,
        path: str,
        message: str,
        *,
        source: str | None = None,
        line: int | None = None,
        problems: Sequence[PlanError] = (),
    ) -> None:
        self.path = path
        self.message = message
        self.source = source
        self.line = line
        self.problems: tuple[PlanError, ...] = tuple(problems) or (self,)
        if len(self.problems) > 1:
            text = "\n".join(p.located() for p in self.problems)
        else:
            text = self.located()
        super().__init__(text)

    @classmethod
    def of(cls, problems: Sequence[PlanError]) -> PlanError:
        """One error for every problem found (the problem itself when there is one)."""
        flat = [p for problem in problems for p in problem.problems]
        if len(flat) == 1:
            return flat[0]
        first = flat[0]
        return cls(first.path, first.message, source=first.source, line=first.line, problems=flat)

    def located(self) -> str:
        """``source:line: path: message``, as much of it as is known."""
        where = self.source or ""
        if where and self.line is not None:
            where = f"{where}:{self.line}"
        text = f"{self.path}: {self.message}" if self.path else self.message
        return f"{where}: {text}" if where else text

    def at(self, source: str | None, line: int | None) -> PlanError:
        """The same problem, located in a file."""
        return PlanError(self.path, self.message, source=source, line=line)

    def within(self, prefix: str) -> PlanError:
        """The same error, with its path (each problem's) nested under ``prefix``."""
        if not prefix:
            return self
        if len(self.problems) > 1:
            return PlanError.of([p.within(prefix) for p in self.problems])
        if not self.path:
            path = prefix
        elif self.path.startswith("["):
            path = f"{prefix}{self.path}"
        else:
            path = f"{prefix}.{self.path}"
        return PlanError(path, self.message, source=self.source, line=self.line)


class SelectorError(AsyncDeployError, ValueError):
    """A label selector that does not parse, or one that would select everything by accident."""


class DriverNotFound(AsyncDeployError, LookupError):
    """No driver has this name."""


class DriverNotInstalled(DriverNotFound):
    """The driver exists but its client library (a pip extra) is not installed."""

    def __init__(self, driver: str, extra: str, missing: str) -> None:
        self.driver = driver
        self.extra = extra
        self.missing = missing
        super().__init__(
            f"the {driver} driver needs {missing}, which is not installed: "
            f"pip install 'asyncdeploy[{extra}]'"
        )


class NoDriverInstalled(DriverNotInstalled):
    """No driver named, and none of them installed (a core-only install): a usage error, like
    one driver named without its extra (the CLI exits 2), not an engine that does not answer."""

    def __init__(self, missing: Sequence[DriverNotInstalled]) -> None:
        extras = sorted({m.extra for m in missing})
        self.driver, self.extra, self.missing = "any", extras[0], missing[0].missing
        AsyncDeployError.__init__(
            self,
            "no driver is installed (a core-only install): "
            + " or ".join(f"pip install 'asyncdeploy[{e}]'" for e in extras)
            + " ("
            + "; ".join(str(m) for m in missing)
            + ")",
        )


class UnsupportedEventLoop(AsyncDeployError, RuntimeError):
    """The deployer was opened outside asyncio (e.g. under trio): its engine clients need asyncio.

    The server kit (:mod:`asyncdeploy.workload`) runs on both asyncio and trio.
    """


class OperationTimeout(AsyncDeployError, TimeoutError):
    """An operation did not end by its own deadline (what it made was cleaned, bounded, as on a
    cancellation). Its steps each wait on something outside this process (an engine, a
    balancer): a deadline turns one that never answers into this error instead of a hang."""


class EngineError(AsyncDeployError):
    """Something went wrong talking to an engine."""

    def __init__(self, message: str, *, engine: str) -> None:
        self.engine = engine
        self.message = message
        super().__init__(f"{message} (engine={engine})")


class EngineUnavailable(EngineError):
    """The engine's socket or API server cannot be reached."""


class EngineAPIError(EngineError):
    """The engine answered a call with an error status."""

    def __init__(self, message: str, *, engine: str, status: int) -> None:
        self.status = status
        super().__init__(f"[{status}] {message}", engine=engine)


class EngineTimeout(EngineError, TimeoutError):
    """An engine call did not answer in time."""


class ExecInterrupted(EngineError):
    """The container stopped (or went) while an ``exec`` ran in it: the command has no end."""


class WorkloadNotFound(AsyncDeployError, LookupError):
    """The workload (or one of its containers) does not exist on ``engine``.

    ``status`` is the engine's answer when an API call said so (404), None when a list did not
    hold it."""

    def __init__(self, message: str, *, engine: str, status: int | None = None) -> None:
        self.engine = engine
        self.message = message
        self.status = status
        super().__init__(_described(message, engine, status))


class WorkloadConflict(AsyncDeployError):
    """A name is taken, or the object is in a state that forbids the call.

    ``status`` is the engine's answer when an API call refused (409, or Podman's 500 naming a
    conflict), None when asyncdeploy found the conflict itself (a name a workload holds)."""

    def __init__(self, message: str, *, engine: str, status: int | None = None) -> None:
        self.engine = engine
        self.message = message
        self.status = status
        super().__init__(_described(message, engine, status))


class ReplaceInProgress(WorkloadConflict):
    """Another replace of the same plan name holds its lock (a live owner); nothing was done.

    No engine refused anything: the lock is asyncdeploy's own (``status`` is None)."""


def _described(message: str, engine: str, status: int | None) -> str:
    """As an engine error reads: the status first when an engine answered with one."""
    return f"[{status}] {message} (engine={engine})" if status else f"{message} (engine={engine})"


EngineFailure = EngineError | WorkloadNotFound | WorkloadConflict
ENGINE_FAILURES = (EngineError, WorkloadNotFound, WorkloadConflict)
"""Every error an engine call can end in: its failures, and the not-found and conflict its
answers mean (``except ENGINE_FAILURES:`` where any answer but success is handled alike)."""


class CreateError(AsyncDeployError):
    """Creating a workload failed, or it will not start.

    Raised by ``create`` on Docker and Podman (an image, an init container, a start), the call
    has rolled back what it made; what the roll-back could not remove is named in the message.
    Raised by ``wait_ready`` (a container exited or restarted before it was ready; on Kubernetes,
    where the kubelet starts the Pod after the create call, this is where a start fails), nothing
    is removed: the workload is left to inspect (``exit_code``, the last ``logs``). The CLI's
    ``create --wait`` then drains and removes it when that create made it, unless
    ``--keep-failed``.
    """

    def __init__(self, message: str, *, exit_code: int | None = None, logs: str = "") -> None:
        self.exit_code = exit_code
        self.logs = logs
        detail = f"{message} (exit code {exit_code})" if exit_code is not None else message
        if logs:
            detail = f"{detail}\n--- logs ---\n{logs.rstrip()}"
        super().__init__(detail)


class ReplaceFailed(CreateError):
    """A ``recreate`` whose new instance failed after the old ones were drained.

    ``serving`` names what serves the plan now: the old instances brought back from the plans
    they recorded, or nothing (the message then says what to run). The plan's named volumes and
    its Kubernetes Service are kept either way; the new instance's error is the ``__cause__``.
    """

    def __init__(self, message: str, *, serving: Sequence[str] = ()) -> None:
        self.serving = tuple(serving)
        super().__init__(message)


class DrainError(AsyncDeployError):
    """A drain ran to the end, but some of its steps failed; everything that could be was cleaned."""

    def __init__(self, summaries: Sequence[DrainSummary]) -> None:
        self.summaries = tuple(summaries)
        problems = [f"{s.workload}: {e}" for s in self.summaries for e in s.errors]
        super().__init__("drain finished with errors: " + "; ".join(problems))


class DrainUnreachable(DrainError, EngineUnavailable):
    """The engine stopped answering during a drain and did not come back before the deadline.

    Containers whose end was not seen are ``unreachable`` in ``.summaries``; a delete once the
    engine answers again finishes the job.
    """

    def __init__(self, summaries: Sequence[DrainSummary], *, engine: str) -> None:
        self.summaries = tuple(summaries)
        problems = "; ".join(f"{s.workload}: {e}" for s in self.summaries for e in s.errors)
        EngineUnavailable.__init__(
            self, f"engine unreachable during the drain: {problems}", engine=engine
        )
