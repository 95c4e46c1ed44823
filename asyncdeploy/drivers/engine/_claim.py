"""Who drains a workload, written where every other delete can read it: the claim record.

The claim itself is the pause container's paused state: pausing is atomic on both engines (a
second pause is refused) and shows in every listing. But a paused pause says nothing about who
paused it, when, for how long, or whether they are still alive: a deleter killed after the pause,
a user's ``docker pause``, or a drain that gave up on an unreachable engine all leave it paused.
Labels cannot be changed after create, so the owner writes a small JSON file into the pause
container itself (``PUT /containers/{id}/archive``, which both engines accept on a paused
container), and keeps rewriting it while it drains:

- who: host name, boot id, process id and the process's start time (a reused pid is not it);
- its drain: the wall time it began, the effective grace (the caller's override included), so a
  follower waits for the owner's deadline and not for its own;
- ``beat``: a counter the owner bumps every :data:`BEAT_INTERVAL`;
- ``signalled``: the containers it has sent (or is about to send) their stop signal, so that a
  delete taking over never sends one twice.

A follower on the same host (same host name and boot id) knows at once whether the owner lives
(its pid, with the same start time); from another host, it watches ``beat`` on its own clock
(no clock skew involved): no beat for :data:`BEAT_STALE` seconds is a dead owner. A paused pause
with no record (a manual pause, or an owner that died between its pause and its first write)
is stale once :data:`RECORD_WAIT` has passed without one appearing.

Pure apart from reading ``/proc`` for this process and the owner's pid: no engine calls here.
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

__all__ = [
    "BEAT_INTERVAL",
    "BEAT_STALE",
    "CLAIM_FILE",
    "RECORD_WAIT",
    "ClaimRecord",
    "Owner",
    "new_record",
    "pack",
    "unpack",
]

CLAIM_FILE = ".asyncdeploy-claim.json"  # in the pause container's root directory
BEAT_INTERVAL = 1.0  # the owner rewrites its record this often
BEAT_STALE = 5.0  # no beat for this long (on the follower's clock): the owner is dead
RECORD_WAIT = 3.0  # paused, but no record for this long: nobody drains it


@attrs.frozen(kw_only=True)
class ClaimRecord:
    owner: Owner
    token: str  # this drain's own (two drains in one process are two owners)
    started: float  # wall time (time.time()) the owner's drain began
    grace: int  # the owner's effective grace, its override included
    beat: int = 0
    signalled: tuple[str, ...] = ()  # container names

    @property
    def deadline(self) -> float:
        """The owner's deadline, in wall time."""
        return self.started + self.grace

    def bumped(self, signalled: tuple[str, ...]) -> ClaimRecord:
        return attrs.evolve(self, beat=self.beat + 1, signalled=signalled)

    def to_json(self) -> bytes:
        return json.dumps(attrs.asdict(self), sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> ClaimRecord | None:
        """The record, or None for anything that is not one (a file of another kind)."""
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
                beat=int(raw["beat"]),
                signalled=tuple(str(n) for n in raw["signalled"]),
            )
        except (ValueError, TypeError, KeyError):
            return None


def new_record(grace: int, signalled: tuple[str, ...] = ()) -> ClaimRecord:
    return ClaimRecord(
        owner=Owner.this_process(),
        token=secrets.token_hex(8),
        started=time.time(),
        grace=grace,
        signalled=signalled,
    )


def pack(record: ClaimRecord) -> bytes:
    """The record as the tar archive the engines' archive endpoint extracts (into ``/``)."""
    data = record.to_json()
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
