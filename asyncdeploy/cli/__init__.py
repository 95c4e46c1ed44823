"""The ``asyncdeploy`` command line: thin click commands over the async API.

Exit codes: 0 success, 1 the operation failed, 2 usage (bad arguments or an invalid plan),
3 no engine answers, 128 + the signal when SIGINT/SIGTERM cut a command short (``_signals``).
"""

from __future__ import annotations

from typing import cast

import click

from asyncdeploy._log import configure_cli_logging
from asyncdeploy.cli import (
    containers,
    drain,
    lint,
    reconcile,
    replace,
    schema,
    verify,
    views,
    workloads,
)
from asyncdeploy.cli._common import Settings
from asyncdeploy.cli._kube_options import cluster_options, with_cluster_options
from asyncdeploy.drivers import DRIVER_NAMES, DriverName

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
def main(
    ctx: click.Context,
    driver: str | None,
    verbose: int,
    namespace: str | None,
    context: str | None,
    kubeconfig: str | None,
) -> None:
    """Deploy inference workloads and take them down without losing a request.

    Shell completion: eval "$(_ASYNCDEPLOY_COMPLETE=bash_source asyncdeploy)" (zsh_source,
    fish_source for the other shells).
    """
    configure_cli_logging(verbose)
    ctx.obj = Settings(
        driver=cast(DriverName | None, driver),
        namespace=namespace,
        context=context,
        kubeconfig=kubeconfig,
    )


main.params.extend(cluster_options(expose_value=True))

# Commands that open a deployer take the cluster options after their name too (kubectl habit).
for name, command in {
    "create": workloads.create,
    "delete": workloads.delete,
    "delete-all": workloads.delete_all,
    "list": views.list_,
    "get": views.get,
    "logs": containers.logs,
    "exec": containers.exec_,
    "replace": replace.replace,
    "reconcile": reconcile.reconcile,
    "inspect": workloads.inspect,
    "verify": verify.verify,
}.items():
    main.add_command(with_cluster_options(command), name)
for name, command in {"lint": lint.lint, "drain": drain.drain, "schema": schema.schema}.items():
    main.add_command(command, name)
