"""kubectl's cluster options (``-n/--namespace``, ``--context``, ``--kubeconfig``), anywhere.

kubectl takes them before or after the command (``kubectl get pods -n ml``); click takes a
group's options only before the command name. :class:`KubectlStyleGroup` moves them to the
front before click parses, stopping at ``--`` so an ``exec`` command line is left alone.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

__all__ = ["KUBE_OPTION_NAMES", "KubectlStyleGroup", "kube_options"]

KUBE_OPTION_NAMES = ("-n", "--namespace", "--context", "--kubeconfig")


def hoist_kube_options(args: list[str]) -> list[str]:
    """``args`` with every cluster option (and its value) moved in front, in order."""
    front: list[str] = []
    rest: list[str] = []
    index = 0
    while index < len(args):
        arg = args[index]
        if arg == "--":
            rest.extend(args[index:])
            break
        name = arg.split("=", 1)[0]
        if name in KUBE_OPTION_NAMES:
            if "=" in arg or index + 1 == len(args):
                front.append(arg)
            else:
                front.extend(args[index : index + 2])
                index += 1
        elif arg.startswith("-n") and len(arg) > 2 and not arg.startswith("--"):
            front.append(arg)  # -nml
        else:
            rest.append(arg)
        index += 1
    return front + rest


class KubectlStyleGroup(click.Group):
    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, hoist_kube_options(args))


def kube_options(function: Callable[..., Any]) -> Callable[..., Any]:
    """The three cluster options; each is an error with a driver other than Kubernetes."""
    for decorator in reversed(
        [
            click.option(
                "-n",
                "--namespace",
                default=None,
                help="Kubernetes namespace [default: the kubeconfig context's].",
            ),
            click.option("--context", default=None, help="Kubernetes kubeconfig context."),
            click.option(
                "--kubeconfig",
                default=None,
                type=click.Path(dir_okay=False),
                help="Kubernetes kubeconfig file [default: $KUBECONFIG or ~/.kube/config].",
            ),
        ]
    ):
        function = decorator(function)
    return function
