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
from asyncdeploy.labels import LABEL_ATTEMPT_OWNER, LABEL_ROLE

__all__ = ["dead_claim", "unfinished"]


def _owners_alive(items: Sequence[Mapping[str, Any]]) -> bool | None:
    """True when a create attempt's owner lives, False when every owner is known dead, None
    when some cannot be told (another host, or no owner recorded)."""
    answers: list[bool | None] = []
    for item in items:
        raw = item["Labels"].get(LABEL_ATTEMPT_OWNER)
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
    alive = _owners_alive(items)
    if alive is True:
        return None  # a create at work
    return f"half-made: {what}" + (" (unknown owner)" if alive is None else "")
