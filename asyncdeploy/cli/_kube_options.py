"""kubectl's cluster options (``-n/--namespace``, ``--context``, ``--kubeconfig``), anywhere.

kubectl takes them before or after the command (``kubectl get pods -n ml``). Here they are real
options of the group *and* of every command that opens a deployer, so click parses them in their
place: ``-n`` stays the value of an option that takes one (``verify --warmup -n``), and nothing
after ``--`` is touched. A command's option updates the group's :class:`Settings`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import click

__all__ = [
    "KUBE_OPTION_NAMES",
    "all_namespaces_option",
    "cluster_options",
    "with_cluster_options",
]

KUBE_OPTION_NAMES = ("-n", "--namespace", "--context", "--kubeconfig")


def cluster_options(*, expose_value: bool) -> list[click.Option]:
    """The three options; a command's copy stores its value into the settings itself."""
    store = None if expose_value else _store
    return [
        click.Option(
            ["-n", "--namespace"],
            default=None,
            expose_value=expose_value,
            callback=store,
            help="Kubernetes namespace [default: the kubeconfig context's].",
        ),
        click.Option(
            ["--context"],
            default=None,
            expose_value=expose_value,
            callback=store,
            help="Kubernetes kubeconfig context.",
        ),
        click.Option(
            ["--kubeconfig"],
            default=None,
            type=click.Path(dir_okay=False),
            expose_value=expose_value,
            callback=store,
            help="Kubernetes kubeconfig file [default: $KUBECONFIG or ~/.kube/config].",
        ),
    ]


def _store(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    from asyncdeploy.cli._common import Settings  # the CLI's start (--help) needs none of it

    if value is not None and param.name is not None:
        settings = ctx.find_object(Settings)
        if settings is not None:
            ctx.obj = attrs.evolve(settings, **{param.name: value})
    return value


def all_namespaces_option(function: Callable[..., Any]) -> Callable[..., Any]:
    """kubectl's ``-A/--all-namespaces`` (``list``, ``delete-all``): every namespace; it
    chooses Kubernetes, and on Docker or Podman it is a usage error (exit 2)."""
    return click.option(
        "-A",
        "--all-namespaces",
        is_flag=True,
        default=False,
        expose_value=False,
        callback=_store_flag,
        help="Kubernetes: the workloads of every namespace (a NAMESPACE column; "
        "delete-all names them namespace/name).",
    )(function)


def _store_flag(ctx: click.Context, param: click.Parameter, value: bool) -> bool:
    return bool(_store(ctx, param, value or None))


def with_cluster_options(command: click.Command) -> click.Command:
    """``command`` also taking the cluster options after its name, as kubectl does."""
    command.params.extend(cluster_options(expose_value=False))
    return command
