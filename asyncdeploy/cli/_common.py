"""What every command shares: settings, options, error mapping, JSON output."""

from __future__ import annotations

import functools
import json
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any, ParamSpec, TypeVar

import anyio
import attrs
import click

from asyncdeploy.deployer import Deployer, DriverName, open_deployer
from asyncdeploy.durations import parse_duration
from asyncdeploy.errors import AsyncDeployError, DriverNotFound, EngineUnavailable, PlanError
from asyncdeploy.results import WorkloadStatus

P = ParamSpec("P")
T = TypeVar("T")

EXIT_FAILED, EXIT_USAGE, EXIT_UNAVAILABLE = 1, 2, 3
EXIT_INTERRUPTED = 130  # Ctrl-C ended a watch or a follow, as a shell reports it


class CommandFailed(click.ClickException):
    """An asyncdeploy error, printed as ``Error: ...`` with the exit code it maps to."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code  # type: ignore[misc]


@attrs.frozen
class Settings:
    driver: DriverName | None
    namespace: str | None = None  # Kubernetes only, like kubectl's -n/--context/--kubeconfig
    context: str | None = None
    kubeconfig: str | None = None

    def open_deployer(self) -> AbstractAsyncContextManager[Deployer]:
        """The deployer these settings name; Kubernetes options choose Kubernetes."""
        kube = {"namespace": self.namespace, "context": self.context, "kubeconfig": self.kubeconfig}
        given = {k: v for k, v in kube.items() if v is not None}
        if not given:
            return open_deployer(self.driver)
        if self.driver not in (None, "kubernetes"):
            flags = ", ".join(f"--{k}" for k in given)
            raise click.UsageError(f"{flags}: Kubernetes options, but the driver is {self.driver}")
        return open_deployer(
            "kubernetes", namespace=self.namespace, context=self.context, kubeconfig=self.kubeconfig
        )


pass_settings = click.make_pass_decorator(Settings)


def run(function: Callable[P, Awaitable[T]], *args: P.args, **kwargs: P.kwargs) -> T:
    """Run one command's coroutine, mapping asyncdeploy's errors onto exit codes."""
    try:
        return anyio.run(functools.partial(function, *args, **kwargs))
    except EngineUnavailable as exc:
        raise CommandFailed(str(exc), EXIT_UNAVAILABLE) from exc
    except (PlanError, DriverNotFound) as exc:
        raise CommandFailed(str(exc), EXIT_USAGE) from exc
    except AsyncDeployError as exc:
        raise CommandFailed(str(exc), EXIT_FAILED) from exc


def output_option(function: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--output",
        "-o",
        type=click.Choice(["text", "json"]),
        default="text",
        show_default=True,
        help="Human-readable text, or JSON (one object per event for delete and delete-all).",
    )(function)


def grace_option(function: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--grace-period-seconds",
        type=click.IntRange(min=0),
        default=None,
        help="Override the workload's termination grace period for this delete (0 kills at once).",
    )(function)


def parse_selector(value: str | None) -> dict[str, str]:
    selector: dict[str, str] = {}
    for part in filter(None, (value or "").split(",")):
        key, sep, item = part.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"{part!r} is not key=value", param_hint="--selector")
        selector[key.strip()] = item.strip()
    return selector


def parse_timeout(value: str, param_hint: str = "--timeout") -> float:
    """A duration option (``60``, ``90s``, ``2m``) in seconds, or a click usage error."""
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint=param_hint) from exc


def emit_json(data: Any) -> None:
    click.echo(json.dumps(data, sort_keys=False, default=str))


def status_dict(status: WorkloadStatus) -> dict[str, Any]:
    data = attrs.asdict(status, recurse=True)
    data["labels"] = dict(status.labels)
    data["state"] = status.state
    return data
