"""The ``asyncdeploy`` command line: thin click commands over the async API.

Exit codes: 0 success, 1 the operation failed, 2 usage (bad arguments or an invalid plan),
3 no engine answers.
"""

from __future__ import annotations

import click

from asyncdeploy._log import configure_cli_logging
from asyncdeploy.cli import proof, workloads
from asyncdeploy.cli._common import Settings
from asyncdeploy.deployer import DRIVER_NAMES

__all__ = ["main"]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--driver",
    type=click.Choice(DRIVER_NAMES),
    envvar="ASYNCDEPLOY_DRIVER",
    default=None,
    help="Engine to use [env ASYNCDEPLOY_DRIVER; default: the first of docker, podman, "
    "kubernetes that answers].",
)
@click.option(
    "-v", "--verbose", count=True, help="Log each drain step on stderr (-vv: every detail)."
)
@click.version_option(package_name="asyncdeploy")
@click.pass_context
def main(ctx: click.Context, driver: str | None, verbose: int) -> None:
    """Deploy inference workloads and take them down without losing a request."""
    configure_cli_logging(verbose)
    ctx.obj = Settings(driver=driver)


for name, command in {
    "create": workloads.create,
    "delete": workloads.delete,
    "delete-all": workloads.delete_all,
    "list": workloads.list_,
    "get": workloads.get,
    "logs": workloads.logs,
    "inspect": workloads.inspect,
    "lint": proof.lint,
    "verify": proof.verify,
    "drain": proof.drain,
}.items():
    main.add_command(command, name)
