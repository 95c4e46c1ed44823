"""Drain events drawn as one self-contained HTML page (no script, no external file).

``delete --timeline`` writes it: a row per container, labelled, its bar from the drain's start
to its exit split into phases (waiting, its pre_stop hook, after its stop signal, after a kill)
and its outcome after it; the drain's steps (drain started, hooks, signals, exits, kills, pause
removed) as numbered lines, listed under the drawing; the summary table after. ``verify``'s report draws its requests with the same
pieces (:mod:`asyncdeploy.verify.html`). Elements carry ``data-*`` attributes so a browser test
can read what is drawn.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

import attrs

from asyncdeploy._events import (
    ContainerExited,
    ContainerForceKilled,
    DrainEvent,
    DrainFinished,
    DrainStarted,
    PauseRemoved,
    PreStopFinished,
    PreStopStarted,
    SignalSent,
)

__all__ = [
    "OUTCOME_COLOURS",
    "PHASE_COLOURS",
    "Bar",
    "ContainerDrain",
    "Moment",
    "Segment",
    "drain_moments",
    "drain_phases",
    "draw_drain_svg",
    "draw_legend",
    "draw_page",
    "draw_svg",
    "timeline_html",
]

WIDTH = 1000  # the time axis, in SVG units
LEFT = 190  # room for the lane names
ROW = 4  # one bar's height
OUTCOME_COLOURS = {  # requests' outcomes, then containers'
    "exited": "#3a9d5d",
    "killed": "#c0392b",
    "already-exited": "#95a5a6",
    "missing": "#bdc3c7",
    "unreachable": "#111111",
    "completed": "#3a9d5d",
    "refused": "#d9822b",
    "unavailable": "#8e44ad",
    "client-aborted": "#7f8c8d",
    "truncated": "#c0392b",
    "lost": "#111111",
    "failed": "#e74c3c",
    "duplicated": "#f1c40f",
}
INSTANCE_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf")


@attrs.frozen
class Moment:
    """A marked moment on the time axis (wall clock)."""

    at: float
    step: str  # drain-started, traffic-left, pre-stop, signal, exited, killed, pause-removed, ...
    label: str


def drain_moments(events: Sequence[DrainEvent]) -> list[Moment]:
    """The drain's steps as wall-clock moments (each workload's events count from its start)."""
    starts = {
        e.workload: e.deadline - e.grace_period_seconds
        for e in events
        if isinstance(e, DrainStarted)
    }
    moments = []
    for event in events:
        start = starts.get(event.workload)
        if start is None:
            continue
        at = start + event.elapsed
        who = f"{event.workload}/{getattr(event, 'container', '')}".rstrip("/")
        if isinstance(event, DrainStarted):
            moments.append(Moment(at, "drain-started", f"drain of {event.workload} started"))
        elif isinstance(event, PreStopStarted):
            moments.append(Moment(at, "pre-stop", f"{who}: pre-stop hook started"))
        elif isinstance(event, PreStopFinished):
            moments.append(Moment(at, "pre-stop-finished", f"{who}: pre-stop hook finished"))
        elif isinstance(event, SignalSent):
            moments.append(Moment(at, "signal", f"{who}: {event.signal} sent"))
        elif isinstance(event, ContainerForceKilled):
            moments.append(Moment(at, "killed", f"{who}: killed"))
        elif isinstance(event, ContainerExited):
            moments.append(Moment(at, "exited", f"{who}: exited {event.exit_code}"))
        elif isinstance(event, PauseRemoved):
            moments.append(Moment(at, "pause-removed", f"{event.workload}: pause removed"))
        elif isinstance(event, DrainFinished):
            moments.append(Moment(at, "drain-finished", f"drain of {event.workload} finished"))
    return moments


@attrs.frozen
class Bar:
    """One bar on a lane (a request of ``verify``'s report) from ``start`` to ``end``."""

    lane: str
    id: str
    kind: str
    outcome: str
    start: float
    end: float | None
    tip: str


def _lanes(bars: Sequence[Bar]) -> dict[str, list[list[Bar]]]:
    """Per lane, rows of bars that do not overlap (first fit, by start)."""
    lanes: dict[str, list[list[Bar]]] = {}
    for bar in sorted(bars, key=lambda b: b.start):
        rows = lanes.setdefault(bar.lane, [])
        for row in rows:
            if (row[-1].end or row[-1].start) < bar.start:
                row.append(bar)
                break
        else:
            rows.append([bar])
    return lanes


def draw_svg(bars: Sequence[Bar], moments: Sequence[Moment], row_height: int = ROW) -> str:
    """The time axis: a lane per instance (or workload), a bar per request (or container)."""
    times = [b.start for b in bars] + [b.end for b in bars if b.end is not None]
    times += [m.at for m in moments]
    t0, t1 = (min(times), max(times)) if times else (0.0, 1.0)
    span = max(t1 - t0, 1e-3)

    def x(at: float) -> float:
        return LEFT + (at - t0) / span * WIDTH

    lanes = _lanes(bars)
    lane_colour = {
        name: INSTANCE_COLOURS[i % len(INSTANCE_COLOURS)] for i, name in enumerate(lanes)
    }
    parts: list[str] = []
    y = 30
    for name, rows in lanes.items():
        height = max(len(rows) * (row_height + 1), 14)
        colour = lane_colour[name]
        parts.append(
            f'<g class="lane" data-instance="{escape(name)}">'
            f'<rect class="lane-band" x="0" y="{y}" width="{LEFT + WIDTH}" height="{height}" '
            f'fill="{colour}" fill-opacity="0.06"/>'
            f'<text x="4" y="{y + 11}" fill="{colour}">{escape(name[-28:])}</text>'
        )
        for index, row in enumerate(rows):
            for bar in row:
                start, end = x(bar.start), x(bar.end if bar.end is not None else t1)
                parts.append(
                    f'<rect class="request" data-id="{escape(bar.id)}" '
                    f'data-kind="{escape(bar.kind)}" data-outcome="{escape(bar.outcome)}" '
                    f'data-instance="{escape(name)}" data-started="{bar.start:.3f}" '
                    f'x="{start:.2f}" y="{y + index * (row_height + 1)}" '
                    f'width="{max(end - start, 0.8):.2f}" height="{row_height}" '
                    f'fill="{OUTCOME_COLOURS.get(bar.outcome, "#000")}" stroke="{colour}" '
                    f'stroke-width="0.4"><title>{escape(bar.tip)}</title></rect>'
                )
        parts.append("</g>")
        y += height + 6
    bottom = y + 10
    for i, m in enumerate(moments):
        mx = x(m.at)
        parts.append(
            f'<g class="moment" data-step="{m.step}" data-at="{m.at:.3f}">'
            f'<line x1="{mx:.2f}" x2="{mx:.2f}" y1="20" y2="{bottom}" stroke="#333" '
            f'stroke-dasharray="3,2"/>'
            f'<text x="{mx + 2:.2f}" y="{bottom + 12 + (i % 6) * 11}" font-size="9">'
            f"{escape(m.label)}</text><title>{escape(m.label)}</title></g>"
        )
    for tick in range(int(span) + 1):
        tx = x(t0 + tick)
        parts.append(
            f'<text class="tick" x="{tx:.2f}" y="14" font-size="9">{tick} s</text>'
            f'<line x1="{tx:.2f}" x2="{tx:.2f}" y1="17" y2="22" stroke="#999"/>'
        )
    height = bottom + 12 + 6 * 11 + 10
    width = LEFT + WIDTH + 20
    return (
        f'<svg id="timeline" xmlns="http://www.w3.org/2000/svg" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}">{"".join(parts)}</svg>'
    )


def draw_page(title: str, passed: bool, setting: str, legend: str, svg: str, table: str) -> str:
    verdict = "PASS" if passed else "FAIL"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>
<style>
body {{ font: 13px system-ui, sans-serif; margin: 1.5em; color: #222; }}
table {{ border-collapse: collapse; margin-top: 1em; }}
td, th {{ border: 1px solid #ccc; padding: 2px 8px; text-align: right; }}
.swatch {{ display: inline-block; width: 10px; height: 10px; margin: 0 3px 0 10px; }}
#verdict[data-passed="true"] {{ color: #3a9d5d; }} #verdict[data-passed="false"] {{ color: #c0392b; }}
svg text {{ font-family: system-ui, sans-serif; font-size: 10px; }}
#drawing {{ overflow-x: auto; }}
</style></head>
<body>
<h1>{escape(title)}: <span id="verdict" data-passed="{str(passed).lower()}">{verdict}</span></h1>
<p id="setting">{setting}</p>
<p id="legend">{legend}</p>
{svg}
{table}
</body></html>
"""


def draw_legend(outcomes: Sequence[str]) -> str:
    return "".join(
        f'<span class="swatch" data-outcome="{o}" style="background:{OUTCOME_COLOURS[o]}"></span>{o} '
        for o in outcomes
    )


PHASE_COLOURS = {  # a container's drain, phase by phase
    "waiting": "#dfe6e9",  # the drain has begun, nothing asked of this container yet
    "pre-stop": "#2e86de",  # its pre_stop hook runs
    "signal": "#f39c12",  # its stop signal was sent: it drains on its own
    "kill": "#c0392b",  # SIGKILL sent
}
_CHAR = 6.5  # the width of one character of the labels, in SVG units (10 px sans-serif)
_BAR_ROW = 18
_AXIS = 24
# The steps' numbers: one level under the other 1.4 lines apart (10 px text; a browser's line
# box is 1.16 (DejaVu) to 1.36 (Noto) times the size, Segoe UI's 1.33), and side by side with
# room for their digits at a wide font's 0.64 em each plus a gap: never drawn over each other.
_LEVEL = 14
_DIGIT = 6.5
_GAP = 4.0


@attrs.frozen
class Segment:
    """One phase of one container's drain, in wall-clock seconds."""

    phase: str
    start: float
    end: float


@attrs.frozen
class ContainerDrain:
    """One container's drain: its phases in order, and how it ended."""

    workload: str
    container: str
    role: str
    outcome: str
    exit_code: int | None
    segments: tuple[Segment, ...]


def drain_phases(events: Sequence[DrainEvent]) -> list[ContainerDrain]:
    """Each container's phases from the drain's events: waiting (the drain has begun, nothing
    asked of it yet), its pre_stop hook, the wait after its stop signal, after a SIGKILL."""
    starts = {
        e.workload: e.deadline - e.grace_period_seconds
        for e in events
        if isinstance(e, DrainStarted)
    }
    at: dict[tuple[str, str, str], float] = {}
    for event in events:
        container = getattr(event, "container", None)
        start = starts.get(event.workload)
        if container is None or start is None:
            continue
        kind = {
            PreStopStarted: "hook",
            PreStopFinished: "hook-end",
            SignalSent: "signal",
            ContainerForceKilled: "kill",
            ContainerExited: "exit",
        }.get(type(event))
        if kind is not None:
            at.setdefault((event.workload, container, kind), start + event.elapsed)
    drains = []
    for finished in (e for e in events if isinstance(e, DrainFinished)):
        t0 = starts.get(finished.workload)
        if t0 is None:
            continue
        for c in finished.summary.containers:
            mark = {k: v for (w, n, k), v in at.items() if (w, n) == (finished.workload, c.name)}
            end = t0 + c.seconds if c.seconds is not None else mark.get("exit", t0)
            end = max(end, *mark.values()) if mark else end
            cuts = [("hook", mark.get("hook")), ("signal", mark.get("signal"))]
            cuts.append(("kill", mark.get("kill")))
            steps = sorted((t, phase) for phase, t in cuts if t is not None)
            segments = []
            first = steps[0][0] if steps else end
            if first > t0:
                segments.append(Segment("waiting", t0, first))
            for i, (begin, phase) in enumerate(steps):
                stop = steps[i + 1][0] if i + 1 < len(steps) else end
                if phase == "hook" and "hook-end" in mark:
                    stop = min(stop, mark["hook-end"])
                name = "pre-stop" if phase == "hook" else phase
                segments.append(Segment(name, begin, max(stop, begin)))
            drains.append(
                ContainerDrain(
                    workload=finished.workload,
                    container=c.name,
                    role=c.role,
                    outcome=c.outcome,
                    exit_code=c.exit_code,
                    segments=tuple(segments),
                )
            )
    return drains


def _tick_step(span: float) -> float:
    for step in (1, 2, 5, 10, 15, 30, 60, 120, 300, 600):
        if span / step <= 12:
            return float(step)
    return 1200.0


def draw_drain_svg(drains: Sequence[ContainerDrain], moments: Sequence[Moment]) -> str:
    """A row per container, its label before its bar (never cut: the label column is as wide
    as the longest), the bar split into its phases, the outcome after it; the drain's steps as
    dashed lines, numbered (the numbers are the list under the drawing)."""
    times = [s.start for d in drains for s in d.segments] + [
        s.end for d in drains for s in d.segments
    ]
    times += [m.at for m in moments]
    t0, t1 = (min(times), max(times)) if times else (0.0, 1.0)
    span = max(t1 - t0, 1e-3)
    labels = [f"{d.workload}/{d.container}" for d in drains]
    left = 12 + _CHAR * max([len(label) for label in labels] + [8])
    ends = [
        f"{d.outcome} ({d.exit_code})" if d.exit_code is not None else d.outcome for d in drains
    ]
    right = 16 + _CHAR * max([len(end) for end in ends] + [8])
    plot = 600.0

    def x(when: float) -> float:
        return left + (when - t0) / span * plot

    parts = []
    step = _tick_step(span)
    tick = 0.0
    while tick <= span + 1e-9:
        tx = x(t0 + tick)
        parts.append(
            f'<text class="tick" x="{tx:.2f}" y="12" text-anchor="middle">{tick:g} s</text>'
            f'<line x1="{tx:.2f}" x2="{tx:.2f}" y1="15" y2="20" stroke="#999"/>'
        )
        tick += step
    y = _AXIS
    for drain, label, end in zip(drains, labels, ends, strict=True):
        colour = OUTCOME_COLOURS.get(drain.outcome, "#000")
        parts.append(
            f'<g class="container" data-container="{escape(label)}" data-role="{drain.role}">'
            f'<text class="container-label" data-container="{escape(label)}" x="{left - 6:.2f}" '
            f'y="{y + 12}" text-anchor="end">{escape(label)}</text>'
        )
        start = drain.segments[0].start if drain.segments else t0
        finish = drain.segments[-1].end if drain.segments else t0
        parts.append(
            f'<rect class="request" data-id="{escape(drain.container)}" '
            f'data-instance="{escape(drain.workload)}" data-outcome="{drain.outcome}" '
            f'x="{x(start):.2f}" y="{y + 2}" width="{max(x(finish) - x(start), 1.5):.2f}" '
            f'height="14" fill="none" stroke="{colour}" stroke-width="1.5">'
            f"<title>{escape(label)} ({drain.role}): {escape(end)}</title></rect>"
        )
        for segment in drain.segments:
            width = max(x(segment.end) - x(segment.start), 1.0)
            parts.append(
                f'<rect class="segment" data-phase="{segment.phase}" '
                f'data-container="{escape(label)}" x="{x(segment.start):.2f}" y="{y + 4}" '
                f'width="{width:.2f}" height="10" fill="{PHASE_COLOURS[segment.phase]}">'
                f"<title>{escape(label)}: {segment.phase}, "
                f"{segment.start - t0:.2f}-{segment.end - t0:.2f} s</title></rect>"
            )
        parts.append(
            f'<text class="outcome" x="{x(finish) + 6:.2f}" y="{y + 12}" fill="{colour}">'
            f"{escape(end)}</text></g>"
        )
        y += _BAR_ROW + 4
    placed: list[list[tuple[float, float]]] = []  # per level, each number's x and half width
    for number, moment in enumerate(moments, 1):
        mx, half = x(moment.at), _DIGIT * len(str(number)) / 2
        level = next(
            (
                i
                for i, row in enumerate(placed)
                if all(abs(mx - other) > half + other_half + _GAP for other, other_half in row)
            ),
            len(placed),
        )  # numbers of moments close in time go one under the other, never on top
        if level == len(placed):
            placed.append([])
        placed[level].append((mx, half))
        parts.append(
            f'<g class="moment" data-step="{moment.step}" data-at="{moment.at:.3f}">'
            f'<line x1="{mx:.2f}" x2="{mx:.2f}" y1="{_AXIS - 4}" y2="{y + level * _LEVEL}" '
            f'stroke="#555" stroke-dasharray="3,2"/><text class="moment-number" x="{mx:.2f}" '
            f'y="{y + 11 + level * _LEVEL}" text-anchor="middle">{number}</text>'
            f"<title>{escape(moment.label)}</title></g>"
        )
    width, height = left + plot + right, y + 8 + _LEVEL * max(len(placed), 1)
    return (
        f'<svg id="timeline" xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" '
        f'height="{height}" viewBox="0 0 {width:.0f} {height}">{"".join(parts)}</svg>'
    )


def timeline_html(events: Sequence[DrainEvent], title: str = "asyncdeploy delete") -> str:
    """A delete's page: a row per container, labelled, its bar split into its phases (waiting,
    pre_stop hook, after its signal, after a kill) and its outcome; the drain's steps as
    numbered lines, listed under the drawing; the summary table of every workload."""
    moments = sorted(drain_moments(events), key=lambda m: m.at)
    summaries = [e.summary for e in events if isinstance(e, DrainFinished)]
    t0 = min((m.at for m in moments), default=0.0)
    steps = "".join(
        f'<li data-step="{m.step}">{m.at - t0:.2f} s: {escape(m.label)}</li>' for m in moments
    )
    rows = "".join(
        f'<tr data-kind="{escape(s.workload)}/{escape(c.name)}"><th>{escape(s.workload)}/'
        f'{escape(c.name)}</th><td>{c.role}</td><td data-outcome="{c.outcome}">{c.outcome}</td>'
        f"<td>{c.exit_code}</td><td>{'-' if c.seconds is None else f'{c.seconds:.2f} s'}</td></tr>"
        for s in summaries
        for c in s.containers
    )
    table = (
        f'<ol id="steps">{steps}</ol>'
        '<table id="summary"><tr><th>container</th><th>role</th><th>outcome</th><th>exit</th>'
        f"<th>seconds</th></tr>{rows}</table>"
    )
    passed = bool(summaries) and all(s.ok for s in summaries)
    setting = (
        f"{len(summaries)} workload(s) drained; a row per container from the drain's start to "
        "its exit, in phases; the numbered dashed lines are the drain's steps, listed below."
    )
    legend = "".join(
        f'<span class="swatch" data-phase="{phase}" style="background:{colour}"></span>{phase} '
        for phase, colour in PHASE_COLOURS.items()
    )
    svg = draw_drain_svg(drain_phases(events), moments)
    return draw_page(title, passed, setting, legend, f'<div id="drawing">{svg}</div>', table)
