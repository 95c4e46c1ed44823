"""The verify report as one self-contained HTML page (no script, no external file).

Every request is a bar on a time axis, filled by its outcome and edged by the instance that
served it, one lane per instance; the drain's steps (drain started, the balancer seeing
readiness fail, hooks, signals, exits, kills, pause removed) are marked moments; the summary
table follows. The drawing is :mod:`asyncdeploy.timeline`'s, shared with ``delete --timeline``.
"""

from __future__ import annotations

from html import escape

from asyncdeploy.timeline import Bar, Moment, drain_moments, draw_legend, draw_page, draw_svg
from asyncdeploy.verify.report import VerifyReport
from asyncdeploy.verify.traffic import OUTCOMES

__all__ = ["report_html"]


def _moments(report: VerifyReport) -> list[Moment]:
    moments = drain_moments(report.events)
    for state in report.balancer_states:
        if state.status.startswith("DOWN"):
            label = f"{report.balancer}: {state.server} out of the pool (readiness failed)"
            moments.append(Moment(state.at, "traffic-left", label))
    return sorted(moments, key=lambda m: m.at)


def report_html(report: VerifyReport, title: str = "asyncdeploy verify") -> str:
    """The verify run's page: its requests, the drain, the summary."""
    bars = [
        Bar(
            lane=r.instance or "(none)",
            id=r.id,
            kind=r.kind,
            outcome=r.outcome or "lost",
            start=r.started,
            end=r.ended,
            tip=f"{r.kind} {r.id} via {r.instance}: {r.outcome or 'lost'}"
            + (f" ({r.error})" if r.error else ""),
        )
        for r in report.records
    ]
    counts = report.counts()
    shown = [o for o in OUTCOMES if any(c[o] for c in counts.values())]
    header = "".join(f"<th>{o}</th>" for o in shown)
    rows_html = "".join(
        f'<tr data-kind="{escape(kind)}"><th>{escape(kind)}</th>'
        + "".join(f'<td data-outcome="{o}">{counts[kind][o]}</td>' for o in shown)
        + f"<td>{sum(counts[kind].values())}</td></tr>"
        for kind in report.kinds
    )
    table = (
        f'<table id="summary"><tr><th>requests</th>{header}<th>total</th></tr>{rows_html}</table>'
    )
    through = f", through {report.balancer}" if report.balancer else ""
    setting = (
        f"{escape(report.driver)}, disruption: {escape(report.mode)}{escape(through)}; "
        f"{len(report.records)} requests; each bar is one request, its fill the outcome, its edge "
        "and lane the instance that served it; dashed lines are the drain's steps."
    )
    svg = draw_svg(bars, _moments(report))
    return draw_page(title, report.passed, setting, draw_legend(list(OUTCOMES)), svg, table)
