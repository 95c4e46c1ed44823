"""What a dead deployer leaves on Docker and Podman, read from a workload's list entries (pure).

- **half-made**: a create that died before its end: a pause container without run containers,
  or containers of a create attempt whose pause container is gone; only when the attempt's
  owner (``LABEL_ATTEMPT_OWNER``: host, boot id, pid and its start time) is dead. A create
  still at work is never marked; an owner that cannot be checked from here (another host) is
  marked ``unknown owner``, which ``reconcile`` acts on only with ``--force``.
- **half-drained**: a drain that died after its claim: a paused pause container whose claim
  record names an owner that is dead (:func:`dead_claim`; the list reads the record from the
  pause container), or one with nothing left running (a live drain removes what has exited at
  once, and its pause last).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from asyncdeploy._owner import Owner
from asyncdeploy.drivers.engine._claim import ClaimRecord
from asyncdeploy.labels import (
    LABEL_ATTEMPT_OWNER,
    LABEL_INSTANCE_OF,
    LABEL_LOCK,
    LABEL_ROLE,
    LABEL_VOLUME_PLAN,
    LABEL_WORKLOAD,
    shown_labels,
)

__all__ = ["creators_alive", "dead_claim", "left_volumes", "unfinished"]


def creators_alive(items: Sequence[Mapping[str, Any]]) -> bool | None:
    """True when a create attempt's owner lives, False when every owner is known dead, None
    when some cannot be told (another host, or no owner recorded)."""
    answers: list[bool | None] = []
    for item in items:
        raw = (item.get("Labels") or {}).get(LABEL_ATTEMPT_OWNER)
        try:
            owner = Owner.from_data(json.loads(raw)) if raw else None
        except ValueError:
            owner = None
        answers.append(None if owner is None else owner.alive())
    if any(a is True for a in answers):
        return True
    return False if answers and all(a is False for a in answers) else None


def dead_claim(record: ClaimRecord | None) -> str | None:
    """Half-drained when the drain's claim names an owner that is dead (None: it lives, it
    cannot be told from here, or there is no record to tell)."""
    if record is None or record.owner.alive() is not False:
        return None
    return f"half-drained: its drain's owner ({record.owner.describe()}) died mid-drain"


def unfinished(items: Sequence[Mapping[str, Any]]) -> str | None:
    """Why this workload was left unfinished by a deployer that died, or None."""
    roles = [item["Labels"].get(LABEL_ROLE) for item in items]
    pauses = [item for item in items if item["Labels"].get(LABEL_ROLE) == "pause"]
    running = [item for item in items if item.get("State") == "running" and item not in pauses]
    if pauses and pauses[0].get("State") == "paused":
        if not running:
            return "half-drained: its drain was claimed (paused pause) but nothing runs"
        return None  # a drain at work (or its owner died mid-drain: said once it ends)
    if pauses and "run" in roles:
        return None
    what = (
        "a pause container without its run containers"
        if pauses
        else "containers of a create whose pause container is gone"
    )
    alive = creators_alive(items)
    if alive is True:
        return None  # a create at work
    return f"half-made: {what}" + (" (unknown owner)" if alive is None else "")


def left_volumes(
    volumes: Sequence[Mapping[str, Any]],
    items: Sequence[Mapping[str, Any]],
    markers: Sequence[Mapping[str, Any]] = (),
) -> dict[str, tuple[str, dict[str, str]]]:
    """The plans whose named volumes are left with no container of the plan (a create killed
    before its pause container was made, or a drain killed before the volumes went): plan name
    → why, as ``unfinished`` says it. Left out: a plan any container still belongs to (an
    instance of a replace included), one a replace holds the lock of (a recreate drains the old
    instance before it makes the new one: its volumes are between the two), and one whose
    volumes' maker lives (a create at work). With the why, the plan's labels (the volumes carry
    them, for a selector)."""
    in_use = {str((i.get("Labels") or {}).get(LABEL_WORKLOAD)) for i in items}
    in_use |= {
        str(i["Labels"][LABEL_INSTANCE_OF]) for i in items if i["Labels"].get(LABEL_INSTANCE_OF)
    }
    # the lock's key is "asyncdeploy-replace-lock.<plan>": a dot never occurs in a plan's name
    in_use |= {str((m.get("Labels") or {}).get(LABEL_LOCK, "")).rpartition(".")[2] for m in markers}
    by_plan: dict[str, list[Mapping[str, Any]]] = {}
    for volume in volumes:
        plan = (volume.get("Labels") or {}).get(LABEL_VOLUME_PLAN)
        if plan and plan not in in_use:
            by_plan.setdefault(str(plan), []).append(volume)
    left: dict[str, tuple[str, dict[str, str]]] = {}
    for plan, found in sorted(by_plan.items()):
        alive = creators_alive(found)
        if alive is True:
            continue
        names = ", ".join(sorted(str(v.get("Name")) for v in found))
        why = f"half-made: volume {names} left with no container of the plan" + (
            " (unknown owner)" if alive is None else ""
        )
        labels = shown_labels(found[0].get("Labels") or {})
        left[plan] = (why, labels)
    return left
