"""Who drains a workload, written where every other delete can read it: the claim record.

The claim itself is the pause container's paused state: one cheap call, atomic on both engines
(a second pause is refused), shown in every listing. It goes out before any signal, and nothing
else does. But a paused pause says nothing about who paused it, when, or whether they still
live: a deleter killed after its pause, a user's ``docker pause``, or a drain that gave up on an
unreachable engine all leave it paused. So a drain still running ``record_delay`` after its
start (its signals long out) records, once (labels cannot be changed on a container), where
the engine keeps it cheapest: on Docker a small labelled volume named after its pause container
(6 ms of engine time, where an archive written into the pause container cost 90 ms and reading
it back 80 ms; every record read with one volume list); on Podman a file in the pause container
(``PUT /archive``, 30 ms, and it goes with the container), since forty concurrent volume creates
there held its database for 17 s, the drains' signals and removals behind them:

- who: host name, boot id, process id and the process's start time (a reused pid is not it);
- its drain: the wall time it began and its effective grace (the caller's override included),
  so a follower waits for the owner's deadline and not for its own;
- ``signalled``: the containers it had sent their stop signal when it wrote (a delete taking over
  also reads the engine's own kill events: it never sends a stop signal twice).

A follower on the same host (same host name and boot id) knows whether the owner lives (its pid,
with the same start time); from another host it trusts the owner until its deadline plus
``owner_bound``. A paused pause with no record (a manual pause, or an owner that died between
its pause and its record) is stale once ``record_wait`` has passed without one appearing. A
follower reads the record only once the drain it follows has lasted that long (most are over by
then): eight deleters of forty workloads on Podman would otherwise read 280 archives at 190 ms.

Pure: no engine call here, and no reading of ``/proc`` but through :class:`Owner`.
"""

from __future__ import annotations

import io
import json
import secrets
import tarfile
import time
from pathlib import Path
from typing import Any

import attrs

from asyncdeploy._owner import Owner  # one notion of a live owner: the replace lock's too
from asyncdeploy.labels import LABEL_CLAIM, LABEL_CLAIM_RECORD

__all__ = [
    "CLAIM_FILE",
    "ClaimRecord",
    "Owner",
    "claim_labels",
    "claim_volume",
    "new_record",
    "pack",
    "unpack",
]

CLAIM_FILE = ".asyncdeploy-claim.json"  # Podman: in the pause container's root directory


@attrs.frozen(kw_only=True)
class ClaimRecord:
    owner: Owner
    token: str  # this drain's own (two drains in one process are two owners)
    started: float  # wall time (time.time()) the owner's drain began
    grace: int  # the owner's effective grace, its override included
    signalled: tuple[str, ...] = ()  # container names

    @property
    def deadline(self) -> float:
        """The owner's deadline, in wall time."""
        return self.started + self.grace

    def to_json(self) -> str:
        return json.dumps(attrs.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, data: str | bytes) -> ClaimRecord | None:
        """The record, or None for anything that is not one."""
        try:
            raw: Any = json.loads(data)
            owner = Owner.from_data(raw["owner"])  # the owner's whole record (PID namespace too)
            if owner is None:
                return None
            return cls(
                owner=owner,
                token=str(raw["token"]),
                started=float(raw["started"]),
                grace=int(raw["grace"]),
                signalled=tuple(str(n) for n in raw.get("signalled") or ()),
            )
        except (ValueError, TypeError, KeyError, AttributeError):
            return None


def new_record(
    owner: Owner, *, started: float, grace: int, signalled: tuple[str, ...] = ()
) -> ClaimRecord:
    return ClaimRecord(
        owner=owner,
        token=secrets.token_hex(8),
        started=started,
        grace=grace,
        signalled=signalled,
    )


def claim_volume(pause_id: str) -> str:
    """The name of the volume that holds the claim record of this pause container."""
    return f"asyncdeploy-claim-{pause_id[:12]}"


def claim_labels(pause_id: str, record: ClaimRecord) -> dict[str, str]:
    return {LABEL_CLAIM: pause_id, LABEL_CLAIM_RECORD: record.to_json()}


def pack(record: ClaimRecord) -> bytes:
    """The record as the tar archive the engines' archive endpoint extracts (into ``/``)."""
    data = record.to_json().encode()
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        info = tarfile.TarInfo(CLAIM_FILE)
        info.size, info.mode, info.mtime = len(data), 0o644, int(time.time())
        tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def unpack(tar: tarfile.TarFile) -> ClaimRecord | None:
    """The record in the archive the engines return for the claim file."""
    for member in tar.getmembers():
        if member.isfile() and Path(member.name).name == CLAIM_FILE:
            handle = tar.extractfile(member)
            return None if handle is None else ClaimRecord.from_json(handle.read(64 * 1024))
    return None
