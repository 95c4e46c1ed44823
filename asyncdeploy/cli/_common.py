"""What every command shares: settings, options, error mapping, JSON output."""

from __future__ import annotations

import functools
import json
import math
import os
import sys
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

import anyio
import attrs
import click
import click.shell_completion

from asyncdeploy._errors import (
    ENGINE_FAILURES,
    AsyncDeployError,
    CreateError,
    DrainError,
    DriverNotFound,
    EngineUnavailable,
    PlanError,
    SelectorError,
)
from asyncdeploy._results import WorkloadStatus
from asyncdeploy._selectors import Selector, parse_selector
from asyncdeploy.cli._states import status_dict as status_dict_at
from asyncdeploy.cli._terminal import fold, terminal_width
from asyncdeploy.drivers.registry import DriverName
from asyncdeploy.durations import parse_duration
from asyncdeploy.namespaces import workload_namespace
from asyncdeploy.plan import MAX_SECONDS, WorkloadPlan

if TYPE_CHECKING:
    from asyncdeploy.deployer import Deployer

P = ParamSpec("P")
T = TypeVar("T")

EXIT_FAILED, EXIT_USAGE, EXIT_UNAVAILABLE = 1, 2, 3
EXIT_TEARING_DOWN = 4  # drained, every container ended; a Pod was still being torn down
EXIT_NODE_UNREACHABLE = 5  # a Pod was held by a Kubernetes node that stopped reporting
EXIT_INTERRUPTED = 130  # Ctrl-C ended a watch or a follow, as a shell reports it


class CommandFailed(click.ClickException):
    """An asyncdeploy error, printed as ``Error: ...`` with the exit code it maps to.

    Under ``--output json`` it is also one JSON object on stdout, the stream a program reads:
    ``{"error": {"type", "message", "exit_code", ...}}`` with what the error carries (a
    container's ``container_exit_code`` and ``logs``, a plan error's ``path``). Not for an
    interruption (exit 128 + the signal) nor a failed drain (its ``DrainFinished`` said what
    failed): a drain's JSON stream always ends with its ``DrainFinished``, as promised, and the
    sentence goes to stderr."""

    def __init__(self, message: str, exit_code: int, cause: BaseException | None = None) -> None:
        super().__init__(message)
        self.exit_code = exit_code  # type: ignore[misc]
        self.cause = cause
        context = click.get_current_context(silent=True)
        self.as_json = context is not None and context.params.get("output") == "json"

    def show(self, file: Any = None) -> None:
        if self.as_json and self.exit_code < 128 and not isinstance(self.cause, DrainError):
            emit_json({"error": error_dict(self.cause or self, self.exit_code, self.message)})
        stream = file or sys.stderr
        width = terminal_width(stream)
        if width is None:
            super().show(file)
            return
        # on a terminal each line folded at its words: never left for the terminal to wrap
        text = "\n".join(
            fold(line, width) for line in f"Error: {self.format_message()}".split("\n")
        )
        click.echo(text, file=stream)


def error_dict(error: BaseException, exit_code: int, message: str) -> dict[str, Any]:
    """An error as JSON-ready data (see :class:`CommandFailed`)."""
    data: dict[str, Any] = {
        "type": type(error).__name__,
        "message": message,
        "exit_code": exit_code,
    }
    if isinstance(error, CreateError):
        data.update(container_exit_code=error.exit_code, logs=error.logs)
    if isinstance(error, PlanError):
        data["path"] = error.path
        data["problems"] = [
            {"file": p.source, "line": p.line, "path": p.path, "message": p.message}
            for p in error.problems
        ]
    if isinstance(error, ENGINE_FAILURES):
        data["engine"] = error.engine
    return data


@attrs.frozen
class Settings:
    driver: DriverName | None
    namespace: str | None = None  # Kubernetes only, like kubectl's -n/--context/--kubeconfig
    context: str | None = None
    kubeconfig: str | None = None
    plan_namespace: str | None = None  # a plan's; on Kubernetes only, never chooses it
    all_namespaces: bool = False  # -A: list and drain in every namespace (Kubernetes only)
    drain_timeout: float | None = None  # --timeout of delete, delete-all (Kubernetes only)
    docker_context: str | None = None  # --docker-context: a docker context (Docker only)

    def for_plan(self, plan: WorkloadPlan) -> Settings:
        """These settings for a command on ``plan``: on Kubernetes the deployer opens where the
        plan's workload lives (``workload_namespace``; -n naming another one: exit 2)."""
        return attrs.evolve(self, plan_namespace=workload_namespace(plan.namespace, self.namespace))

    def open_deployer(self) -> AbstractAsyncContextManager[Deployer]:
        """The deployer these settings name; Kubernetes options choose Kubernetes."""
        from asyncdeploy._opening import open_deployer  # on use: a command's --help needs none

        kube = {"namespace": self.namespace, "context": self.context, "kubeconfig": self.kubeconfig}
        given = {k: v for k, v in kube.items() if v is not None}
        namespace = self.namespace or self.plan_namespace
        waits = self.drain_timeout is not None
        if self.docker_context is not None:
            return self._open_docker_context(given)
        if waits and self.driver not in (None, "kubernetes"):
            raise click.UsageError(
                f"--timeout: a Kubernetes option (how long to wait for the Pods to go), but the "
                f"driver is {self.driver} (its drain ends with its grace period and kill)"
            )
        if self.all_namespaces:
            if self.namespace is not None:
                raise click.UsageError("-A/--all-namespaces and -n/--namespace: choose one")
            if self.driver not in (None, "kubernetes"):
                raise click.UsageError(
                    f"-A/--all-namespaces: a Kubernetes option, but the driver is {self.driver} "
                    "(its engine has no namespaces: list and delete-all already see everything)"
                )
            return open_deployer(
                "kubernetes",
                context=self.context,
                kubeconfig=self.kubeconfig,
                all_namespaces=True,
                drain_timeout=self.drain_timeout,
            )
        if not given:
            if (namespace is not None and self.driver == "kubernetes") or waits:
                return open_deployer(
                    "kubernetes", namespace=namespace, drain_timeout=self.drain_timeout
                )
            return open_deployer(self.driver)
        if self.driver not in (None, "kubernetes"):
            flags = ", ".join(f"--{k}" for k in given)
            raise click.UsageError(f"{flags}: Kubernetes options, but the driver is {self.driver}")
        return open_deployer(
            "kubernetes",
            namespace=namespace,
            context=self.context,
            kubeconfig=self.kubeconfig,
            drain_timeout=self.drain_timeout,
        )

    def _open_docker_context(
        self, kube: Mapping[str, Any]
    ) -> AbstractAsyncContextManager[Deployer]:
        """``--docker-context``: Docker, in that context; with another engine's options, exit 2."""
        from asyncdeploy._opening import open_deployer

        others = [f"--{k}" for k in kube] + ["-A"] * self.all_namespaces
        others += ["--timeout"] * (self.drain_timeout is not None)
        if self.driver not in (None, "docker") or others:
            engine = f"the driver is {self.driver}" if self.driver not in (None, "docker") else ""
            raise click.UsageError(
                "--docker-context: a Docker option, but "
                + (engine or f"{', '.join(others)} (Kubernetes options) are given too")
            )
        return open_deployer("docker", docker_context=self.docker_context)


pass_settings = click.make_pass_decorator(Settings)


def run(function: Callable[P, Awaitable[T]], *args: P.args, **kwargs: P.kwargs) -> T:
    """Run one command's coroutine, mapping asyncdeploy's errors onto exit codes."""
    try:
        return anyio.run(functools.partial(function, *args, **kwargs))
    except DrainError as exc:
        if any(s.unreachable_node for s in exc.summaries):
            code = EXIT_NODE_UNREACHABLE  # not the engine's absence, not a plain failed step
        else:
            code = EXIT_UNAVAILABLE if isinstance(exc, EngineUnavailable) else EXIT_FAILED
        raise CommandFailed(str(exc), code, exc) from exc
    except EngineUnavailable as exc:
        raise CommandFailed(str(exc), EXIT_UNAVAILABLE, exc) from exc
    except (PlanError, SelectorError, DriverNotFound) as exc:
        raise CommandFailed(str(exc), EXIT_USAGE, exc) from exc
    except AsyncDeployError as exc:
        raise CommandFailed(str(exc), EXIT_FAILED, exc) from exc


PLAN_FILES_HELP = (
    "A plan file (YAML or JSON; several plans in one file separated by ---), a folder of them, "
    "or - for stdin."
)


def read_plan_files(files: Sequence[str]) -> list[WorkloadPlan]:
    """The plans ``-f`` names, read before any engine is touched: every problem of every plan
    at once, each at its file and line (exit 2)."""
    from asyncdeploy.plan import read_plans

    try:
        return read_plans(files, stdin=sys.stdin.buffer)
    except PlanError as exc:
        raise CommandFailed(str(exc), EXIT_USAGE, exc) from exc


def read_one_plan(files: Sequence[str], command: str) -> WorkloadPlan:
    """The one plan a command on one workload takes (exit 2 when the files hold more)."""
    plans = read_plan_files(files)
    if len(plans) != 1:
        names = ", ".join(plan.name for plan in plans)
        raise click.UsageError(f"{command} takes one plan; the files hold {len(plans)}: {names}")
    return plans[0]


GRACE_SECONDS = click.IntRange(0, MAX_SECONDS)
"""A grace period in seconds, bounded as in plans."""


def output_option(function: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--output",
        "-o",
        type=click.Choice(["text", "json"]),
        default="text",
        show_default=True,
        help="Human-readable text, or JSON (one object per event for delete and delete-all).",
    )(function)


def strategy_option(function: Callable[..., Any]) -> Callable[..., Any]:
    """``--strategy`` of ``replace``, and of ``create`` when its plan changed."""
    return click.option(
        "--strategy",
        type=click.Choice(["auto", "surge", "recreate"]),
        default="auto",
        show_default=True,
        help="How a changed plan replaces the workload. surge: the new instance ready, then "
        "the old drained (needs room for both); recreate: the old drained, then the new "
        "started (a downtime, reported); auto: surge when both fit (no fixed host port on one "
        "host; on Kubernetes, the new Pod scheduled beside the old), else recreate.",
    )(function)


def grace_option(function: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--grace-period-seconds",
        type=GRACE_SECONDS,
        default=None,
        help="Override the workload's termination grace period for this delete (0 kills at once).",
    )(function)


class SelectorParam(click.ParamType):  # type: ignore[type-arg]  # generic from click 8.2 on
    """A Kubernetes label selector, parsed before any engine is touched (a bad one: exit 2)."""

    name = "selector"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> Selector:
        if isinstance(value, Selector):
            return value
        try:
            return parse_selector(value)
        except SelectorError as exc:
            self.fail(str(exc), param, ctx)


class DurationParam(click.ParamType):  # type: ignore[type-arg]  # generic from click 8.2 on
    """``10s``, ``500ms``, ``1m30s`` or a bare number of seconds, up to a day (a bad one: exit 2)."""

    name = "duration"
    longest = 86_400.0

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        if isinstance(value, float):
            return value
        try:
            seconds = parse_duration(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)
        if seconds > self.longest:
            self.fail(f"{value!r} is longer than a day", param, ctx)
        return seconds


DURATION = DurationParam()


class OutputFileParam(click.ParamType):  # type: ignore[type-arg]  # generic from click 8.2 on
    """A file a command writes when its work is done (``--report``, ``--timeline``): checked
    before the work, so a path that cannot be written is exit 2 at once, not a result lost."""

    name = "file"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        problem = output_path_problem(str(value))
        if problem is not None:
            self.fail(f"cannot write {value!r}: {problem}", param, ctx)
        return str(value)


def output_path_problem(path: str) -> str | None:
    """Why ``path`` cannot be written as a file (None: it can, as far as can be told)."""
    target = os.path.abspath(path)
    folder = os.path.dirname(target)
    if os.path.isdir(target):
        return "it is a folder"
    if not os.path.isdir(folder):
        what = "is not a folder" if os.path.exists(folder) else "does not exist"
        return f"the folder {folder} {what}"
    if os.path.exists(target):
        if not os.access(target, os.W_OK):
            return "it is not writable"
    elif not os.access(folder, os.W_OK | os.X_OK):
        return f"the folder {folder} is not writable"
    return None


def write_output_file(path: str, text: str, what: str) -> bool:
    """Write a result file; a failure (the disk filled up, the folder went away) is said on
    stderr in one line, never a traceback: False, and the caller exits 1 after its output."""
    try:
        with open(path, "w", encoding="utf-8") as file:
            file.write(text)
    except OSError as exc:
        click.echo(f"Error: writing the {what} to {path!r} failed: {exc.strerror or exc}", err=True)
        return False
    return True


OUTPUT_FILE = OutputFileParam()


class FiniteRange(click.FloatRange):
    """``click.FloatRange`` that also refuses ``nan`` (which passes every comparison test)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if math.isnan(number):
            self.fail(f"{value!r} is not a number", param, ctx)
        return number


class WorkloadNameParam(click.ParamType):  # type: ignore[type-arg]  # generic from click 8.2 on
    """A workload name, checked by the plan's own rule: no other name can exist, and none
    reaches an engine filter or a Kubernetes selector as anything but a name."""

    name = "workload"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        field = attrs.fields(WorkloadPlan).name
        try:
            if field.validator is not None:
                field.validator(None, field, value)
        except PlanError as exc:
            self.fail(exc.message, param, ctx)
        return str(value)

    def shell_complete(
        self, ctx: click.Context, param: click.Parameter, incomplete: str
    ) -> list[click.shell_completion.CompletionItem]:
        """The workloads on the engine the line names (``--driver``, ``-n`` ...) whose names
        begin with what is typed."""
        return complete(ctx, incomplete, _workload_names)


COMPLETION_SECONDS = 5.0
"""The longest a completion asks the engine: a slow one completes nothing, never hangs a shell."""


def _settings_of(ctx: click.Context) -> Settings:
    """The settings a command line names, read while completing (no callback has run)."""
    root = ctx.find_root().params
    return Settings(
        driver=root.get("driver") or os.environ.get("ASYNCDEPLOY_DRIVER") or None,  # type: ignore[arg-type]
        namespace=ctx.params.get("namespace") or root.get("namespace"),
        context=ctx.params.get("context") or root.get("context"),
        kubeconfig=ctx.params.get("kubeconfig") or root.get("kubeconfig"),
        docker_context=root.get("docker_context"),
    )


def complete(
    ctx: click.Context,
    incomplete: str,
    names: Callable[[Deployer, click.Context], Awaitable[list[str]]],
) -> list[click.shell_completion.CompletionItem]:
    """Completion items from the engine: ``names`` asked within :data:`COMPLETION_SECONDS`;
    nothing when the engine does not answer (a completion never prints an error)."""
    settings = _settings_of(ctx)

    async def ask() -> list[str]:
        with anyio.move_on_after(COMPLETION_SECONDS):
            async with settings.open_deployer() as deployer:
                return await names(deployer, ctx)
        return []

    try:
        found = anyio.run(ask)
    except (AsyncDeployError, click.ClickException, OSError):
        return []
    return [click.shell_completion.CompletionItem(n) for n in found if n.startswith(incomplete)]


async def _workload_names(deployer: Deployer, ctx: click.Context) -> list[str]:
    return sorted(status.name for status in await deployer.list())


def _name_on_line(ctx: click.Context) -> str | None:
    """The workload named on the line being completed. click leaves the command's arguments
    unparsed when the line ends in an option awaiting its value (``logs NAME -c <TAB>``):
    then the first word after the command that is neither an option nor an option's value."""
    if ctx.params.get("name"):
        return str(ctx.params["name"])
    words = click.shell_completion.split_arg_string(os.environ.get("COMP_WORDS", ""))
    if ctx.info_name not in words:
        return None
    options = [p for c in (ctx.command, ctx.find_root().command) for p in c.params]
    valued = {
        opt
        for p in options
        if isinstance(p, click.Option) and not p.is_flag and not p.count
        for opt in p.opts
    }
    skip = False
    for word in words[words.index(ctx.info_name) + 1 :]:
        if skip or word == "--":
            skip = False
            continue
        if word.startswith("-"):
            skip = word in valued
            continue
        return word
    return None


async def _container_names(deployer: Deployer, ctx: click.Context) -> list[str]:
    name = _name_on_line(ctx)
    if not name:
        return []
    status = await deployer.get(str(name))
    return [c.name for c in status.containers if c.role != "pause"]


def complete_container(
    ctx: click.Context, param: click.Parameter, incomplete: str
) -> list[click.shell_completion.CompletionItem]:
    """``-c``: the containers of the workload named before it on the line."""
    return complete(ctx, incomplete, _container_names)


WORKLOAD_NAME = WorkloadNameParam()


def drain_timeout_option(function: Callable[..., Any]) -> Callable[..., Any]:
    """kubectl's ``delete --timeout``: how long to wait for the Pods to be gone (Kubernetes)."""

    def store(ctx: click.Context, param: click.Parameter, value: float | None) -> None:
        settings = ctx.find_object(Settings)
        if value is not None and settings is not None:
            ctx.obj = attrs.evolve(settings, drain_timeout=value)

    return click.option(
        "--timeout",
        type=DURATION,
        default=None,
        expose_value=False,
        callback=store,
        help="Kubernetes: how long to wait for the Pods to be gone, from the delete (10s, 2m) "
        "[default: the grace period plus a teardown margin]. A Pod whose containers all ended "
        "but that is still being torn down then is reported so (exit 4), not as a failure.",
    )(function)


class NamesArgument(click.Argument):
    """Workload names (``nargs=-1``): ``NAME...`` in the usage line, ``NAME`` in errors."""

    def make_metavar(self, *args: Any) -> str:
        return "NAME..."

    def get_error_hint(self, ctx: click.Context | None) -> str:
        return "'NAME'"


def selector_option(function: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--selector",
        "-l",
        type=SelectorParam(),
        default=None,
        help="Only workloads whose labels match, in Kubernetes' syntax: "
        "'team=ml', 'team!=ml', 'tier in (a,b)', 'tier notin (a)', 'gpu', '!gpu', comma-joined.",
    )(function)


def echo_out(text: str) -> None:
    """Print a line on stdout. A closed pipe (``| head -1``) never stops a command: the rest of
    its output goes to /dev/null, one note says so on stderr, and the command goes on to its
    end (a drain included) and exits as that end says."""
    try:
        click.echo(text)
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # later writes (and the exit's flush) succeed
        os.close(devnull)
        click.echo(
            "asyncdeploy: stdout was closed; the rest of the output is dropped and the command "
            "goes on to its end",
            err=True,
        )


def emit_json(data: Any) -> None:
    echo_out(json.dumps(data, sort_keys=False, default=str))


def status_dict(status: WorkloadStatus) -> dict[str, Any]:
    """A workload's JSON form, now (``_states.py``: state, ready, age and every field)."""
    return status_dict_at(status, time.time())
