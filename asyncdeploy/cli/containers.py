"""Commands on one workload's containers, docker/kubectl-style: ``logs`` and ``exec``."""

from __future__ import annotations

import contextlib
import datetime
import os
import sys
import time
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING

import anyio
import click

from asyncdeploy.cli._common import (
    DURATION,
    EXIT_INTERRUPTED,
    WORKLOAD_NAME,
    Settings,
    complete_container,
    emit_json,
    output_option,
    pass_settings,
    run,
)
from asyncdeploy.durations import parse_duration

if TYPE_CHECKING:
    from asyncdeploy.deployer import Deployer

__all__ = ["exec_", "logs", "since_to_unix_time"]


def since_to_unix_time(value: str, *, now: float | None = None) -> float:
    """``--since``: a duration back from now (``10s``, ``5m``) or an RFC 3339 time."""
    try:
        return (time.time() if now is None else now) - parse_duration(value)
    except ValueError:
        pass
    try:
        moment = datetime.datetime.fromisoformat(value)  # 3.11 reads a trailing Z
    except ValueError:
        raise click.BadParameter(
            f"{value!r} is neither a duration (10s, 5m, 1h) nor an RFC 3339 time",
            param_hint="--since",
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return moment.timestamp()


class _Prefixer:
    """Prefixes each whole line with ``[container] `` (chunks need not end at a newline)."""

    def __init__(self, container: str) -> None:
        self.prefix = f"[{container}] "
        self.at_line_start = True

    def __call__(self, chunk: str) -> str:
        out = []
        for piece in chunk.splitlines(keepends=True):
            out.append(self.prefix + piece if self.at_line_start else piece)
            self.at_line_start = piece.endswith("\n")
        return "".join(out)


@click.command()
@click.argument("name", type=WORKLOAD_NAME)
@click.option("-f", "--follow", is_flag=True, help="Keep streaming new output.")
@click.option(
    "--container",
    "-c",
    default=None,
    shell_complete=complete_container,
    help="Container name [default: the plan's first run].",
)
@click.option(
    "--all-containers",
    is_flag=True,
    help="Every container in plan order (init, run, autoheal), each line prefixed [name].",
)
@click.option(
    "--tail", type=int, default=-1, show_default=True, help="Last lines to show; -1 shows all."
)
@click.option("--since", default=None, help="Newer than a duration (10s, 5m) or an RFC 3339 time.")
@click.option("--timestamps", "-t", is_flag=True, help="Prefix each line with its time.")
@output_option
@pass_settings
def logs(
    settings: Settings,
    name: str,
    follow: bool,
    container: str | None,
    all_containers: bool,
    tail: int,
    since: str | None,
    timestamps: bool,
    output: str,
) -> None:
    """Print a container's logs (stdout and stderr as the engine interleaves them)."""
    if all_containers and container is not None:
        raise click.UsageError("--container and --all-containers exclude each other")
    since_time = None if since is None else since_to_unix_time(since)

    async def one(deployer: Deployer, chosen: str | None, prefixed: bool) -> None:
        prefix = _Prefixer(chosen or "") if prefixed else None
        async for chunk in deployer.logs(
            name,
            container=chosen,
            follow=follow,
            tail=None if tail < 0 else tail,
            since=since_time,
            timestamps=timestamps,
        ):
            if output == "json":
                emit_json({"workload": name, "container": chosen, "text": chunk})
            else:
                click.echo(prefix(chunk) if prefix else chunk, nl=False)

    async def impl() -> None:
        async with settings.open_deployer() as deployer:
            if not all_containers:
                await one(deployer, container, False)
                return
            status = await deployer.get(name)
            names = [c.name for c in status.containers if c.role != "pause"]
            if not follow:
                for each in names:
                    await one(deployer, each, True)
                return
            async with anyio.create_task_group() as tg:
                for each in names:
                    tg.start_soon(one, deployer, each, True)

    try:
        run(impl)
    except KeyboardInterrupt:
        raise click.exceptions.Exit(EXIT_INTERRUPTED) from None


DEFAULT_EXEC_TIMEOUT = 600.0


async def _stdin_chunks() -> AsyncIterator[bytes]:
    """This process's stdin as it comes, to its end: a terminal or a pipe is waited on by the
    event loop (no thread left blocked in a read when the command ends first), a regular file
    read in a worker thread."""
    fd = sys.stdin.fileno()
    while True:
        try:
            await anyio.wait_readable(fd)
        except OSError:  # a regular file: the loop cannot watch it, and a read never waits
            chunk = await anyio.to_thread.run_sync(os.read, fd, 65536)
        else:
            chunk = os.read(fd, 65536)  # readable: returns what is there
        if not chunk:
            return
        yield chunk


def _terminal_size() -> tuple[int, int] | None:
    try:
        size = os.get_terminal_size(sys.stdout.fileno())
    except (OSError, ValueError):
        return None
    return size.columns, size.lines


@contextlib.contextmanager
def _raw_terminal(wanted: bool) -> Iterator[None]:
    """stdin's terminal in raw mode meanwhile (keys go to the command as typed: Ctrl-C too),
    restored whatever happens; nothing when stdin is no terminal."""
    if not wanted or not sys.stdin.isatty():
        yield
        return
    import termios
    import tty

    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    try:
        tty.setraw(fd)
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


@click.command("exec", context_settings={"ignore_unknown_options": True})
@click.argument("name", type=WORKLOAD_NAME)
@click.option(
    "--container",
    "-c",
    default=None,
    shell_complete=complete_container,
    help="Container name [default: the plan's first run].",
)
@click.option("-i", "--stdin", "interactive", is_flag=True, help="Pass stdin to the command.")
@click.option("-t", "--tty", is_flag=True, help="Run the command in a terminal (-it: a shell).")
@click.option(
    "--timeout",
    type=DURATION,
    default=None,
    help="Fail (exit 1) when the command has not ended by then; 0: no bound "
    "[default: 10m; with -i or -t no bound].",
)
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@pass_settings
def exec_(
    settings: Settings,
    name: str,
    container: str | None,
    interactive: bool,
    tty: bool,
    timeout: float | None,
    command: tuple[str, ...],
) -> None:
    """Run COMMAND in a container and exit with its exit code: exec NAME [-c C] -- CMD [ARG...]

    Without -i the command gets no stdin; stdout and stderr come back interleaved on stdout,
    as they come. -i passes stdin (its end is the command's end of file); -t runs the command
    in a terminal, this one put in raw mode meanwhile (exec -it NAME -- sh: a shell, as with
    docker and kubectl; Docker and Podman). A container that stops before the command ends,
    or a command still running after --timeout, fails the exec (exit 1).
    """
    if timeout is None:
        timeout = 0.0 if (interactive or tty) else DEFAULT_EXEC_TIMEOUT

    def show(text: str) -> None:
        sys.stdout.write(text)
        sys.stdout.flush()

    async def impl() -> int:
        async with settings.open_deployer() as deployer:
            result = await deployer.exec(
                name,
                list(command),
                container=container,
                timeout=timeout or None,
                on_output=show,
                stdin=_stdin_chunks() if interactive else None,
                tty=tty,
                size=_terminal_size() if tty else None,
            )
        return result.exit_code

    with _raw_terminal(tty and interactive):
        code = run(impl)
    if code != 0:
        # -1: the engine reported no exit code; a shell could not tell it from 255 anyway
        raise click.exceptions.Exit(code if 0 < code < 256 else 1)
