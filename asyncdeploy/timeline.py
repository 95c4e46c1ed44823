"""Drain events drawn as one self-contained HTML page (no script, no external file).

``delete --timeline`` writes it: a bar per container from the drain's start to its exit, filled
by its outcome, the drain's steps (drain started, hooks, signals, exits, kills, pause removed) as
marked moments, the summary table after. ``verify``'s report draws its requests with the same
pieces (:mod:`asyncdeploy.verify.html`). Elements carry ``data-*`` attributes so a browser test
can read what is drawn.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

import attrs

from asyncdeploy.events import (
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
    "Bar",
    "Moment",
    "drain_moments",
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


def timeline_html(events: Sequence[DrainEvent], title: str = "asyncdeploy delete") -> str:
    """A delete's page: a bar per container from the drain's start to its exit (filled by its
    outcome), the drain's steps as moments, the summary table of every workload."""
    moments = drain_moments(events)
    starts = {
        e.workload: e.deadline - e.grace_period_seconds
        for e in events
        if isinstance(e, DrainStarted)
    }
    summaries = [e.summary for e in events if isinstance(e, DrainFinished)]
    bars = []
    for summary in summaries:
        start = starts.get(summary.workload)
        if start is None:
            continue
        for c in summary.containers:
            end = None if c.seconds is None else start + c.seconds
            bars.append(
                Bar(
                    lane=summary.workload,
                    id=c.name,
                    kind=c.role,
                    outcome=c.outcome,
                    start=start,
                    end=end,
                    tip=f"{summary.workload}/{c.name} ({c.role}): {c.outcome}, exit {c.exit_code}",
                )
            )
    rows = "".join(
        f'<tr data-kind="{escape(s.workload)}/{escape(c.name)}"><th>{escape(s.workload)}/'
        f'{escape(c.name)}</th><td>{c.role}</td><td data-outcome="{c.outcome}">{c.outcome}</td>'
        f"<td>{c.exit_code}</td><td>{'-' if c.seconds is None else f'{c.seconds:.2f} s'}</td></tr>"
        for s in summaries
        for c in s.containers
    )
    table = (
        '<table id="summary"><tr><th>container</th><th>role</th><th>outcome</th><th>exit</th>'
        f"<th>seconds</th></tr>{rows}</table>"
    )
    passed = bool(summaries) and all(s.ok for s in summaries)
    setting = (
        f"{len(summaries)} workload(s) drained; each bar is one container from the drain's start "
        "to its exit, filled by its outcome; dashed lines are the drain's steps."
    )
    legend = draw_legend(["exited", "killed", "already-exited", "missing", "unreachable"])
    return draw_page(title, passed, setting, legend, draw_svg(bars, moments, row_height=10), table)
