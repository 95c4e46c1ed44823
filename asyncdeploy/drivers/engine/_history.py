"""What the engine recorded about a workload's containers, read from ``GET /events`` (pure).

Both engines answer the Docker-compatible events call with one JSON object per line. Docker ends
the answer at ``until``; Podman 4 answers nothing when ``until`` is given and ends its answer
with ``stream=false`` instead (``events_query``). Podman says ``died`` where Docker says ``die``,
and ``containerExitCode`` where Docker says ``exitCode``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from asyncdeploy._results import WorkloadEvent
from asyncdeploy.labels import LABEL_CONTAINER, LABEL_WORKLOAD

__all__ = ["SHOWN_ACTIONS", "events_query", "parse_events", "signalled_after_pause"]

# What a person asks "what happened to it?" about; exec_create/exec_start (every readiness check
# runs one) and attach/resize would drown these.
SHOWN_ACTIONS = frozenset(
    {"create", "start", "die", "kill", "oom", "restart", "pause", "unpause", "stop", "destroy"}
)
_ALIASES = {"died": "die", "remove": "destroy", "cleanup": ""}


def events_query(name: str, since: float, until: float, *, engine: str) -> dict[str, Any]:
    """The query of one bounded ``GET /events`` for the workload ``name``."""
    params: dict[str, Any] = {
        "since": str(int(since)),
        "filters": json.dumps({"type": ["container"], "label": [f"{LABEL_WORKLOAD}={name}"]}),
    }
    if engine == "podman":
        params["stream"] = "false"
    else:
        params["until"] = str(int(until) + 1)
    return params


def parse_events(lines: Iterable[str], *, limit: int) -> list[WorkloadEvent]:
    """The last ``limit`` shown events in the answer, oldest first."""
    found = []
    for line in lines:
        raw = _raw(line)
        if raw is not None and (event := _event(raw)) is not None:
            found.append(event)
    found.sort(key=lambda e: e.time)
    return found[-limit:] if limit > 0 else []


def _event(raw: Mapping[str, Any]) -> WorkloadEvent | None:
    action = str(raw.get("Action") or raw.get("status") or "")
    action = _ALIASES.get(action, action)
    attributes = (raw.get("Actor") or {}).get("Attributes") or {}
    health = action.startswith("health_status")
    if action not in SHOWN_ACTIONS and not health:
        return None
    nanos = raw.get("timeNano")
    when = int(nanos) / 1e9 if nanos else float(raw.get("time") or 0)
    message = ""
    if action == "die":
        code = attributes.get("exitCode", attributes.get("containerExitCode"))
        message = f"exit code {code}" if code is not None else ""
    elif action == "kill" and attributes.get("signal"):
        message = f"signal {attributes['signal']}"
    elif health:
        action, _, message = action.partition(": ")
        message = message or str(attributes.get("health_status") or "")
    return WorkloadEvent(
        time=when,
        container=str(attributes.get(LABEL_CONTAINER) or attributes.get("name") or ""),
        action=action,
        message=message,
    )


def signalled_after_pause(
    lines: Iterable[str], pause_id: str, ids: Mapping[str, str]
) -> frozenset[str]:
    """Which of the containers ``ids`` (engine id → name) the engine saw signalled (a kill other
    than SIGKILL, or a stop) after the last pause of the pause container ``pause_id``: what a
    drain that claimed it had sent. Docker names the signal (``signal 15``); Podman's kill
    events do not.

    By id, not by name: the events of a workload are asked for by its name, and an earlier
    workload of the same name (deleted within the hour the query reads, or the old instance
    of a replace) has containers of the same names whose signals were never sent to these.
    Docker claims a drain without pausing (its record is a volume), so there no pause bounds
    the window: the ids alone do."""
    since = 0.0
    signalled: list[tuple[float, str]] = []
    for line in lines:
        raw = _raw(line)
        if raw is None:
            continue
        event = _event(raw)
        if event is None:
            continue
        actor = str((raw.get("Actor") or {}).get("ID") or raw.get("id") or "")
        if actor == pause_id and event.action == "pause":
            since = max(since, event.time)
        elif actor in ids and (
            event.action == "stop"
            or (event.action == "kill" and event.message not in ("signal 9", "signal SIGKILL"))
        ):
            signalled.append((event.time, ids[actor]))
    return frozenset(name for when, name in signalled if when >= since)


def _raw(line: str) -> Mapping[str, Any] | None:
    if not line.strip():
        return None
    try:
        raw = json.loads(line)
    except ValueError:
        return None
    return raw if isinstance(raw, Mapping) else None
