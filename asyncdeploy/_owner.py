"""A process, as precisely as another process can tell whether it still lives.

Host name, boot id, PID namespace, pid and the pid's start time (``/proc/PID/stat`` field 22: a
reused pid has another). A pid means something only in its PID namespace: two deployers in two
containers (or hostNetwork Pods) may share a host name and a kernel, and each be pid 1 of its
own namespace. So the namespace (the inode of ``/proc/self/ns/pid``) is recorded too, and only a
process of the same host, boot and PID namespace is judged; from elsewhere the answer is unknown
(None), and callers fall back on a time bound. A record without a namespace (written by an
older asyncdeploy) is judged as before, by host, boot, pid and start time. The same notion as
the drain claim's owner (issue 16 item 2). Pure apart from reading ``/proc``.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

import attrs

__all__ = ["Owner"]


@attrs.frozen(kw_only=True)
class Owner:
    host: str
    boot_id: str
    pid: int
    pid_started: str
    pid_namespace: str = ""  # "pid:[4026531836]"; "" in records of older versions

    @classmethod
    def this_process(cls) -> Owner:
        pid = os.getpid()
        return cls(
            host=socket.gethostname(),
            boot_id=_boot_id(),
            pid=pid,
            pid_started=_started(pid),
            pid_namespace=_pid_namespace(),
        )

    def alive(self) -> bool | None:
        """Whether this process still runs; None when that cannot be told from here (another
        host, boot or PID namespace: its pid would name another process here)."""
        here = Owner.this_process()
        if not self.boot_id or (self.host, self.boot_id) != (here.host, here.boot_id):
            return None
        if self.pid_namespace and self.pid_namespace != here.pid_namespace:
            return None
        if not here.pid_started:
            return None
        return _started(self.pid) == self.pid_started != ""  # a zombie's is "": dead

    def describe(self) -> str:
        return f"pid {self.pid} on {self.host}"

    def to_data(self) -> dict[str, Any]:
        return attrs.asdict(self)

    @classmethod
    def from_data(cls, raw: Any) -> Owner | None:
        try:
            return cls(
                host=str(raw["host"]),
                boot_id=str(raw["boot_id"]),
                pid=int(raw["pid"]),
                pid_started=str(raw["pid_started"]),
                pid_namespace=str(raw.get("pid_namespace") or ""),
            )
        except (KeyError, TypeError, ValueError):
            return None


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _pid_namespace() -> str:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


def _started(pid: int) -> str:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    # the command name (field 2) may hold spaces and parentheses: split after its last ")"
    fields = stat.rpartition(")")[2].split()
    if fields and fields[0] in ("Z", "X"):
        # Killed but not reaped yet (its parent has not waited for it: a job of a shell that
        # has not looked, a supervisor, a test): it runs nothing, and holds no drain.
        return ""
    return fields[19] if len(fields) > 19 else ""
