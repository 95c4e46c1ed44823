"""``asyncdeploy wait``: until workloads are ready, or gone (kubectl's ``wait``, compose's
``up --wait``)."""

from __future__ import annotations

import anyio
import click

from asyncdeploy import Deployer
from asyncdeploy._errors import EngineTimeout, WorkloadNotFound
from asyncdeploy.cli._common import (
    DURATION,
    EXIT_FAILED,
    WORKLOAD_NAME,
    CommandFailed,
    NamesArgument,
    Settings,
    echo_out,
    emit_json,
    output_option,
    pass_settings,
    run,
    status_dict,
)

__all__ = ["wait"]

POLL_SECONDS = 0.5  # how often a wait for deleted looks again
# The wait's own deadline ends it (naming what it waited for, with the figure the user gave);
# the driver's wait is given this much longer so that it never ends first with its own words.
DRIVER_MARGIN = 1.0


@click.command()
@click.argument(
    "names", nargs=-1, required=True, metavar="NAME", type=WORKLOAD_NAME, cls=NamesArgument
)
@click.option(
    "--for",
    "condition",
    type=click.Choice(["ready", "deleted"]),
    default="ready",
    show_default=True,
    help="ready: every run container ready (a container that exits fails the wait at once); "
    "deleted: no such workload any more.",
)
@click.option(
    "--timeout",
    type=DURATION,
    default="60s",
    show_default=True,
    help="The longest wait for them all (exit 1 when it passes).",
)
@output_option
@pass_settings
def wait(
    settings: Settings, names: tuple[str, ...], condition: str, timeout: float, output: str
) -> None:
    """Wait until the named workloads are ready (--for ready) or gone (--for deleted).

    Prints NAME: ready (or deleted) for each as it happens; exit 0 when all are, 1 when the
    timeout passes first or one will not start (its exit code and last log lines said), 2 on
    bad input, 3 when no engine answers. A workload that does not exist fails --for ready at
    once (a plan's name finds its current instance, as everywhere).
    """

    async def one(deployer: Deployer, name: str, deadline: float) -> None:
        left = max(0.0, deadline - anyio.current_time())
        if condition == "ready":
            with anyio.fail_after(left):
                status = await deployer.wait_ready(name, timeout=left + DRIVER_MARGIN)
            if output == "json":
                emit_json({"workload": name, "condition": "ready", "status": status_dict(status)})
            else:
                echo_out(f"{name}: ready")
            return
        with anyio.fail_after(left):
            while True:
                try:
                    await deployer.get(name)
                except WorkloadNotFound:
                    break
                await anyio.sleep(POLL_SECONDS)
        if output == "json":
            emit_json({"workload": name, "condition": "deleted"})
        else:
            echo_out(f"{name}: deleted")

    async def impl() -> None:
        async with settings.open_deployer() as deployer:
            deadline = anyio.current_time() + timeout
            failures: list[Exception] = []
            late: list[str] = []  # the workloads the deadline found not there yet

            async def each(name: str) -> None:
                try:
                    await one(deployer, name, deadline)
                except TimeoutError as exc:
                    if isinstance(exc, EngineTimeout):
                        failures.append(exc)
                    else:
                        late.append(name)
                except Exception as exc:  # noqa: BLE001 - raised below, not as a group
                    failures.append(exc)

            async with anyio.create_task_group() as tg:
                for name in dict.fromkeys(names):
                    tg.start_soon(each, name)
            if late:
                waited = ", ".join(sorted(late))
                state = "ready" if condition == "ready" else "deleted"
                raise CommandFailed(
                    f"{waited} {'was' if len(late) == 1 else 'were'} not {state} within "
                    f"{timeout:g} s (--timeout)",
                    EXIT_FAILED,
                ) from None
            if failures:
                raise failures[0]

    run(impl)
