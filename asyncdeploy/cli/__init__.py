"""The ``asyncdeploy`` command line: thin click commands over the async API.

Exit codes: 0 success, 1 the operation failed, 2 usage (bad arguments or an invalid plan),
3 no engine answers, 4 drained but a Pod was still being torn down when the wait for it ended
(Kubernetes ``delete``/``delete-all``: every container ended; ``--timeout`` waits longer),
128 + the signal when SIGINT/SIGTERM cut a command short (``_signals``).
"""

from __future__ import annotations

import difflib
import importlib
from typing import cast

import click

from asyncdeploy.cli._kube_options import cluster_options, with_cluster_options
from asyncdeploy.drivers.registry import DRIVER_NAMES, DriverName

__all__ = ["ALIASES", "COMMANDS", "SUGGESTIONS", "main"]

COMMANDS: dict[str, tuple[str, bool, str]] = {
    # name: ("module:function", takes the cluster options after its name, its one-line help)
    "completion": (
        "completion:completion",
        False,
        "Print the shell completion script for bash, zsh or fish.",
    ),
    "create": (
        "workloads:create",
        True,
        "Create a workload from a YAML or JSON plan, as kubectl apply does.",
    ),
    "delete": (
        "workloads:delete",
        True,
        "Drain workloads gracefully, then remove them, showing every step.",
    ),
    "delete-all": (
        "workloads:delete_all",
        True,
        "Drain every matching workload at once, under one deadline.",
    ),
    "drain": (
        "drain:drain",
        False,
        "Tell a server to drain, then wait until it has no request in flight (a preStop hook).",
    ),
    "exec": (
        "containers:exec_",
        True,
        "Run COMMAND in a container and exit with its exit code: exec NAME [-c C] -- CMD [ARG...]",
    ),
    "get": ("views:get", True, "Describe one workload: its containers (in plan order), ..."),
    "images": (
        "images:images",
        False,
        "Build the gate and demo images on your engine from the installed package.",
    ),
    "inspect": (
        "workloads:inspect",
        True,
        "Engine detail of a workload (secret-looking env values masked).",
    ),
    "lint": (
        "lint:lint",
        False,
        "Check a plan's termination budget, probes and ports (exit 1 on errors).",
    ),
    "list": ("views:list_", True, "List workloads (containers in plan order)."),
    "logs": (
        "containers:logs",
        True,
        "Print a container's logs (stdout and stderr as the engine interleaves them).",
    ),
    "reconcile": (
        "reconcile:reconcile",
        True,
        "Finish the workloads a killed asyncdeploy left half-made or half-drained ...",
    ),
    "replace": (
        "replace:replace",
        True,
        "Replace a workload: start the plan as a new instance and drain the old instance(s) ...",
    ),
    "schema": (
        "schema:schema",
        False,
        "Print the plan's JSON Schema (for editors) or its reference page.",
    ),
    "version": (
        "version:version",
        True,
        "Print the client's version and the engine's (Docker, Podman) or the cluster's.",
    ),
    "wait": (
        "wait:wait",
        True,
        "Wait until the named workloads are ready (--for ready) or gone (--for deleted).",
    ),
    "verify": (
        "verify:verify",
        True,
        "Prove a lossless termination: traffic through a workload while it is disrupted.",
    ),
}
"""Every command, imported only when it runs (or its own help is asked for): ``--help`` and
a command load only what that command uses (``tests/unit/test_cli_start.py`` checks that these
lines are the commands' own)."""


ALIASES = {"apply": "create", "describe": "get"}
"""kubectl's words where an asyncdeploy command does exactly what they do there: ``apply -f``
creates from a plan, or replaces a changed one; ``describe NAME`` shows one workload with its
last events."""

SUGGESTIONS = {
    "ps": (
        "list",
        "docker ps lists containers; asyncdeploy lists workloads, each with its containers",
    ),
    "rm": ("delete", "docker rm removes; asyncdeploy deletes by draining first"),
    "remove": ("delete", "delete drains, then removes"),
    "run": ("create", "create -f PLAN starts a workload from a plan"),
    "up": ("create", "create -f PLAN --wait, as compose's up --wait"),
    "down": ("delete", "delete NAME drains, then removes"),
    "stop": ("delete", "delete NAME drains, then removes"),
    "kill": ("delete", "delete --grace-period-seconds 0 kills at once"),
    "rollout": ("replace", "replace -f PLAN rolls a workload to a new plan"),
}
"""Other tools' words that are close to an asyncdeploy command but not the same: never run in
its place, only named in the error with how it differs."""


class _LazyGroup(click.Group):
    """A group whose commands are imported on first use, and listed from :data:`COMMANDS`."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        cmd_name = ALIASES.get(cmd_name, cmd_name)
        if cmd_name in self.commands:
            return self.commands[cmd_name]
        if cmd_name not in COMMANDS:
            return None
        target, cluster, _ = COMMANDS[cmd_name]
        module, _, attribute = target.partition(":")
        command = cast(
            click.Command,
            getattr(importlib.import_module(f"asyncdeploy.cli.{module}"), attribute),
        )
        if cluster:
            command = with_cluster_options(command)
        self.add_command(command, cmd_name)
        return command

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        """A word that is no command fails naming the one that does it (or the nearest)."""
        name = click.utils.make_str(args[0]) if args else ""
        if args and not ctx.resilient_parsing and self.get_command(ctx, name) is None:
            if name in SUGGESTIONS:
                command, how = SUGGESTIONS[name]
                ctx.fail(f"No such command {name!r}. Did you mean {command!r}? ({how})")
            near = difflib.get_close_matches(name, [*COMMANDS, *ALIASES], n=1, cutoff=0.6)
            if near:
                ctx.fail(
                    f"No such command {name!r}. Did you mean {ALIASES.get(near[0], near[0])!r}?"
                )
        return super().resolve_command(ctx, args)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The commands' list without importing them: their one-line help from the table."""
        limit = formatter.width - 6 - max(len(name) for name in COMMANDS)
        rows = [
            (name, click.Command(name, help=help_line).get_short_help_str(limit))
            for name, (_, _, help_line) in sorted(COMMANDS.items())
        ]
        with formatter.section("Commands"):
            formatter.write_dl(rows)
        with formatter.section("Aliases"):
            formatter.write_dl([(alias, f"= {name}") for alias, name in sorted(ALIASES.items())])


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--driver",
    type=click.Choice(DRIVER_NAMES),
    envvar="ASYNCDEPLOY_DRIVER",
    default=None,
    help="Engine to use [env ASYNCDEPLOY_DRIVER; default: the first of docker, podman, "
    "kubernetes that answers].",
)
@click.option(
    "--docker-context",
    default=None,
    metavar="NAME",
    help="Docker: this docker context's engine (chooses Docker) [default: DOCKER_CONTEXT, "
    "else the one `docker context use` chose, unless DOCKER_HOST is set].",
)
@click.option(
    "-v", "--verbose", count=True, help="Log each drain step on stderr (-vv: every detail)."
)
@click.version_option(package_name="asyncdeploy")
@click.pass_context
def main(
    ctx: click.Context,
    driver: str | None,
    docker_context: str | None,
    verbose: int,
    namespace: str | None,
    context: str | None,
    kubeconfig: str | None,
) -> None:
    """Deploy inference workloads and take them down without losing a request.

    Shell completion: eval "$(asyncdeploy completion bash)" (zsh, fish for the other shells;
    or eval "$(_ASYNCDEPLOY_COMPLETE=bash_source asyncdeploy)", click's variable).
    """
    from asyncdeploy._log import configure_cli_logging
    from asyncdeploy.cli._common import Settings

    configure_cli_logging(verbose)
    ctx.obj = Settings(
        driver=cast(DriverName | None, driver),
        namespace=namespace,
        context=context,
        kubeconfig=kubeconfig,
        docker_context=docker_context,
    )


main.params.extend(cluster_options(expose_value=True))
