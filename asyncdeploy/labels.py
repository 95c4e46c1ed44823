"""The vocabulary asyncdeploy writes on what it creates: label keys, the reserved prefix, roles.

Every ``asyncdeploy.io`` key the drivers, the deployer and the plan read or write is spelled here
and nowhere else, so that one rule (:func:`is_reserved`) can keep a plan from forging any of them.
This module imports nothing of the package: every layer may use it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, Literal, get_args

__all__ = [
    "CONTAINER_ROLES",
    "LABEL_ATTEMPT",
    "LABEL_ATTEMPT_OWNER",
    "LABEL_CLAIM",
    "LABEL_CLAIM_RECORD",
    "LABEL_CONTAINER",
    "LABEL_GRACE",
    "LABEL_INDEX",
    "LABEL_INSTANCE_OF",
    "LABEL_LIVENESS",
    "LABEL_LOCK",
    "LABEL_LOCK_RECORD",
    "LABEL_PLAN",
    "LABEL_PLAN_DIGEST",
    "LABEL_PRE_STOP",
    "LABEL_PRE_STOP_HTTP",
    "LABEL_PROBE_OF",
    "LABEL_PROPAGATION",
    "LABEL_READINESS",
    "LABEL_READINESS_NET",
    "LABEL_RESTART_POLICY",
    "LABEL_ROLE",
    "LABEL_SERVICE",
    "LABEL_STOP_SIGNAL",
    "LABEL_VOLUME_PLAN",
    "LABEL_WORKLOAD",
    "PLAN_ROLES",
    "RESERVED_DOMAIN",
    "ContainerRole",
    "PlanRole",
    "autoheal_label",
    "is_reserved",
    "selector_labels",
    "shown_labels",
]

RESERVED_DOMAIN: Final = "asyncdeploy.io"
"""Keys whose prefix is this domain or a subdomain of it (``replace.asyncdeploy.io/...``) are
asyncdeploy's own: a plan may not set them."""

# What identifies a workload and its containers (engine labels, Pod labels and annotations).
LABEL_WORKLOAD: Final = "asyncdeploy.io/workload"
LABEL_ROLE: Final = "asyncdeploy.io/role"
LABEL_CONTAINER: Final = "asyncdeploy.io/container"
LABEL_GRACE: Final = "asyncdeploy.io/termination-grace-period-seconds"
LABEL_PLAN_DIGEST: Final = "asyncdeploy.io/plan-digest"
LABEL_PLAN: Final = "asyncdeploy.io/plan"
"""The plan a workload was created from (JSON, ``plan_record``; on the pause container, or an
annotation of the Pod): a recreate whose new instance fails brings the old one back from it."""
LABEL_INSTANCE_OF: Final = "replace.asyncdeploy.io/instance-of"
"""Set by ``Deployer.replace`` on a new instance: the plan name it serves."""
LABEL_LOCK: Final = "replace.asyncdeploy.io/lock"
"""On the marker that holds a plan's replace lock (a volume on Docker and Podman): the key."""
LABEL_LOCK_RECORD: Final = "replace.asyncdeploy.io/lock-record"
"""On that marker: its owner's record (JSON: who, since when, until when at most)."""
LABEL_SERVICE: Final = "asyncdeploy.io/service"
"""Kubernetes: on the Pods of a plan with a ``service`` (every instance), the Service's name;
the Service selects by it."""

# What a later delete on Docker and Podman reads back from the containers themselves.
LABEL_PRE_STOP: Final = "asyncdeploy.io/pre-stop"  # JSON list: the hook a later delete runs
LABEL_STOP_SIGNAL: Final = "asyncdeploy.io/stop-signal"
LABEL_RESTART_POLICY: Final = "asyncdeploy.io/restart-policy"
LABEL_PRE_STOP_HTTP: Final = "asyncdeploy.io/pre-stop-http"  # JSON {port, path}: a GET hook
# JSON {seconds, during}: the container's propagation window (plan.propagation), which a
# delete's events carry to its live view
LABEL_PROPAGATION: Final = "asyncdeploy.io/propagation"
LABEL_READINESS: Final = "asyncdeploy.io/readiness"  # JSON list: the readiness probe as a command
# JSON {"http": {port, path}} or {"tcp": port}, with "timeout": the readiness probe checked from
# the deployer through the workload's address, needing nothing inside the container.
LABEL_READINESS_NET: Final = "asyncdeploy.io/readiness-net"
LABEL_PROBE_OF: Final = "asyncdeploy.io/probe-of"
"""On a helper container that runs one check or HTTP hook inside a workload's network namespace
(it removes itself as it ends): the id of the container whose namespace it joins. Not a
workload's container."""
# "true": the engine's health check is the plan's liveness probe (not one the image brings)
LABEL_LIVENESS: Final = "asyncdeploy.io/liveness"
LABEL_INDEX: Final = "asyncdeploy.io/index"  # the container's position in the plan (list order)
LABEL_ATTEMPT: Final = "asyncdeploy.io/create-attempt"  # which create call made a container
LABEL_ATTEMPT_OWNER: Final = "asyncdeploy.io/create-owner"  # JSON: the process that made it
LABEL_VOLUME_PLAN: Final = "asyncdeploy.io/volume-of"
"""On a named volume asyncdeploy created: the plan whose instances share it (the instance-of
name across ``replace``); removed with the last of them. A kept volume (``keep: true``) has none."""

LABEL_CLAIM: Final = "drain.asyncdeploy.io/claim"
"""On the volume that records who drains a workload (Docker and Podman): its pause container's id."""
LABEL_CLAIM_RECORD: Final = "drain.asyncdeploy.io/claim-record"
"""On that volume: the drain's claim record (JSON: who, since when, under which grace)."""

PlanRole = Literal["init", "run", "sidecar"]
"""The roles a plan's containers may take. A sidecar (a proxy, an exporter, the drain gate)
starts before the run containers and is signalled only after they have exited, inside the same
deadline: Kubernetes' native sidecar order (an init container with ``restartPolicy: Always``)."""
ContainerRole = Literal["pause", "init", "run", "sidecar", "autoheal"]
"""The roles of what a workload runs: the plan's, plus what the engine drivers add."""
PLAN_ROLES: Final[tuple[PlanRole, ...]] = get_args(PlanRole)
CONTAINER_ROLES: Final[tuple[ContainerRole, ...]] = get_args(ContainerRole)


def autoheal_label(workload: str) -> str:
    """The label (value ``true``) that tells this workload's autoheal sidecar what it may restart."""
    return f"{RESERVED_DOMAIN}/autoheal-{workload}"


def is_reserved(key: str) -> bool:
    """Whether a label or annotation key is asyncdeploy's own (its prefix is the reserved domain
    or a subdomain of it)."""
    prefix, slash, _ = key.partition("/")
    if not slash:
        return False
    prefix = prefix.lower()
    return prefix == RESERVED_DOMAIN or prefix.endswith("." + RESERVED_DOMAIN)


def shown_labels(labels: Mapping[str, str]) -> dict[str, str]:
    """The labels a workload's status shows: the plan's and the replace mark, without the
    ``asyncdeploy.io/`` bookkeeping."""
    return {key: value for key, value in labels.items() if not _bookkeeping(key)}


def selector_labels(labels: Mapping[str, str]) -> dict[str, str]:
    """The labels a selector sees: the shown ones plus the workload's name and plan digest, as on
    a Kubernetes Pod (the per-container bookkeeping is left out)."""
    return {
        key: value
        for key, value in labels.items()
        if not _bookkeeping(key) or key in (LABEL_WORKLOAD, LABEL_PLAN_DIGEST)
    }


def _bookkeeping(key: str) -> bool:
    return key.startswith(RESERVED_DOMAIN + "/")
