"""Replace events: what a replacement reports besides the drains it runs.

``ReplaceStrategy`` comes before anything is touched (which strategy, and why); ``ReplaceWaiting``
every few seconds while the new instance is not ready yet; ``ReplaceReady`` once it is;
``ReplaceDowntime`` after a ``recreate`` (no instance was ready for that long); ``ReplaceRolledBack``
when the new instance was removed again (it never became ready, or the replacement was
interrupted), saying whether the old one still serves; ``ReplaceRestored`` when a failed
``recreate`` brought the old one back from the plan it recorded.
"""

from __future__ import annotations

from typing import Any, Literal

import attrs

__all__ = [
    "REPLACE_EVENTS",
    "ReplaceDowntime",
    "ReplaceEvent",
    "ReplaceReady",
    "ReplaceRestored",
    "ReplaceRolledBack",
    "ReplaceStrategy",
    "ReplaceWaiting",
    "Strategy",
    "describe_replace",
    "downtime_words",
    "replace_event_to_dict",
]

Strategy = Literal["surge", "recreate", "auto"]


@attrs.frozen(kw_only=True)
class ReplaceStrategy:
    """How the replacement goes: ``surge`` (new ready, then old drained) or ``recreate`` (old
    drained, then new started), chosen by the caller or by ``auto`` for ``reason``."""

    workload: str  # the plan's name
    strategy: Literal["surge", "recreate"]
    reason: str
    new: str
    old: tuple[str, ...]


@attrs.frozen(kw_only=True)
class ReplaceWaiting:
    """The new instance is not ready yet after ``seconds``; ``containers``: name and state."""

    workload: str  # the new instance
    seconds: float
    containers: tuple[str, ...]


@attrs.frozen(kw_only=True)
class ReplaceReady:
    """The new instance passed its readiness check after ``seconds``."""

    workload: str  # the new instance
    seconds: float


@attrs.frozen(kw_only=True)
class ReplaceDowntime:
    """``recreate`` only: how long nothing served, as a client of the plan sees it: from the
    moment the old instances stopped (the last of them to stop: its first run or sidecar
    container to end, which takes its server down) to the new one's readiness. The old ones
    served while they drained (their ``pre_stop`` hooks, a propagation window) before that:
    ``drain_seconds``, from the drain's start to their stop."""

    workload: str  # the plan's name
    seconds: float
    drain_seconds: float = 0.0


@attrs.frozen(kw_only=True)
class ReplaceRolledBack:
    """The new instance was removed again. ``old``: where the old instances were then:
    ``serving`` (surge, or stopped before their drain: untouched) or ``drained`` (a recreate:
    they were drained before the new one started; a :class:`ReplaceRestored` may follow)."""

    workload: str  # the new instance, removed
    reason: str
    old: Literal["serving", "drained"] = "serving"


@attrs.frozen(kw_only=True)
class ReplaceRestored:
    """A failed recreate brought the old instances back from the plans they recorded:
    ``instances`` serve again, after ``seconds`` without an instance."""

    workload: str  # the plan's name
    instances: tuple[str, ...]
    seconds: float


ReplaceEvent = (
    ReplaceStrategy
    | ReplaceWaiting
    | ReplaceReady
    | ReplaceDowntime
    | ReplaceRolledBack
    | ReplaceRestored
)

REPLACE_EVENTS = (
    ReplaceStrategy,
    ReplaceWaiting,
    ReplaceReady,
    ReplaceDowntime,
    ReplaceRolledBack,
    ReplaceRestored,
)
"""The replace event types, for ``isinstance``."""


def replace_event_to_dict(event: ReplaceEvent) -> dict[str, Any]:
    """JSON-ready data, ``event`` (the type's name) first, as ``event_to_dict`` does for drains."""
    data = attrs.asdict(event, recurse=False)
    if "seconds" in data:
        data["seconds"] = round(data["seconds"], 3)
    return {"event": type(event).__name__, **data}


def downtime_words(seconds: float | None) -> str:
    """A recreate's downtime as a client of the plan saw it, said with what it measures."""
    return (
        f"nothing ran for {seconds or 0:.1f} s, from the old one's stop to the new one's readiness"
    )


def describe_replace(event: ReplaceEvent) -> str:
    """One line of text for a replace event."""
    match event:
        case ReplaceStrategy():
            olds = ", ".join(event.old) or "nothing"
            gap = (
                ": the old one is drained first, nothing serves until the new one is ready"
                if event.strategy == "recreate" and event.old
                else ""
            )
            return (
                f"{event.workload}: {event.strategy} ({event.reason}): new instance "
                f"{event.new}, replacing {olds}{gap}"
            )
        case ReplaceWaiting():
            states = ", ".join(event.containers) or "no container yet"
            return f"{event.workload}: not ready yet after {event.seconds:.0f} s ({states})"
        case ReplaceReady():
            return f"{event.workload}: ready after {event.seconds:.1f} s"
        case ReplaceDowntime():
            return (
                f"{event.workload}: no instance ran for {event.seconds:.1f} s (recreate: from "
                f"the old one's stop, {event.drain_seconds:.1f} s into its drain, to the new "
                "one's readiness)"
            )
        case ReplaceRolledBack():
            then = (
                "the old instance keeps serving"
                if event.old == "serving"
                else "the old instance was drained before it (recreate)"
            )
            return f"{event.workload}: removed again ({event.reason}); {then}"
        case ReplaceRestored():
            return (
                f"{event.workload}: the previous plan serves again as "
                f"{', '.join(event.instances)} ({event.seconds:.1f} s without an instance)"
            )
