"""Where a workload lives on Kubernetes: one rule, for the driver and the command line alike.

A Kubernetes deployer works in one namespace: every call that takes only a name (``get``,
``wait_ready``, ``delete``, ``replace``'s clean-up) goes there, so a plan's workload must be
created there too. The namespace is the plan's ``namespace`` when it names one, else the one
asked for (the CLI's ``-n``, the library's ``namespace=``), else the kubeconfig context's; a
plan naming one namespace while another is asked for is refused (``PlanError``: exit 2),
never silently resolved one way or the other. Docker and Podman have no namespaces and ignore
the field.
"""

from __future__ import annotations

from asyncdeploy._errors import PlanError

__all__ = ["workload_namespace"]


def workload_namespace(declared: str | None, requested: str | None) -> str | None:
    """The namespace a plan declaring ``declared`` is deployed to when ``requested`` is asked
    for (None: the kubeconfig context's); ``PlanError`` when the two name different ones."""
    if declared and requested and declared != requested:
        raise PlanError(
            "namespace",
            f"the plan's workload lives in namespace {declared!r}, but namespace "
            f"{requested!r} was asked for: leave -n out, or ask for {declared!r}",
        )
    return declared or requested
