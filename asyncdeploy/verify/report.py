"""The verification report: requests by kind and outcome, the drain, and the verdict."""

from __future__ import annotations

from collections import Counter
from typing import Any

import attrs

from asyncdeploy._events import DrainEvent, DrainFinished, DrainSummary, event_to_dict
from asyncdeploy.verify.balancer import ServerState
from asyncdeploy.verify.traffic import GATED_OUTCOMES, OUTCOMES, RequestRecord
from asyncdeploy.verify.wrk import WrkResult

__all__ = ["VerifyReport"]


@attrs.frozen(kw_only=True)
class VerifyReport:
    driver: str
    mode: str
    records: tuple[RequestRecord, ...]
    events: tuple[DrainEvent, ...]
    drain_started_at: float | None  # wall clock, from the first DrainStarted
    request_names: tuple[str, ...] = ()  # the report's rows, in the user's order
    balancer: str | None = None  # "haproxy" when a real balancer carried the traffic
    balancer_states: tuple[ServerState, ...] = ()  # its servers' state changes
    wrk: WrkResult | None = None  # wrk's own counts, when it ran beside verify's clients

    @property
    def kinds(self) -> tuple[str, ...]:
        seen = dict.fromkeys(self.request_names)
        seen.update(dict.fromkeys(r.kind for r in self.records))
        return tuple(seen)

    @property
    def summaries(self) -> list[DrainSummary]:
        return [e.summary for e in self.events if isinstance(e, DrainFinished)]

    def counts(self) -> dict[str, Counter[str]]:
        table: dict[str, Counter[str]] = {kind: Counter() for kind in self.kinds}
        for record in self.records:
            table[record.kind][record.outcome or "lost"] += 1
        return table

    @property
    def bad(self) -> list[RequestRecord]:
        return [r for r in self.records if (r.outcome or "lost") in GATED_OUTCOMES]

    @property
    def passed(self) -> bool:
        drained = all(s.ok for s in self.summaries) and bool(self.summaries)
        served = any(r.outcome == "completed" for r in self.records)  # no traffic proves nothing
        wrk_clean = self.wrk is None or self.wrk.failures == 0
        # a drain with nothing to hold tested nothing of what a drain is for
        tested = self.in_flight_on_disrupted > 0
        return drained and served and tested and wrk_clean and not self.bad

    def _in_flight(self, record: RequestRecord) -> bool:
        at = self.drain_started_at
        return at is not None and record.started <= at and (record.ended or at + 1) > at

    @property
    def in_flight_at_drain(self) -> int:
        """Requests that had started and not yet ended when the drain began."""
        return sum(1 for r in self.records if self._in_flight(r))

    @property
    def disrupted(self) -> tuple[str, ...]:
        """The workloads the disruption drained."""
        return tuple(dict.fromkeys(s.workload for s in self.summaries))

    @property
    def in_flight_on_disrupted(self) -> int:
        """Requests in flight on a drained workload when the drain began (served by it, or
        sent to it and not answered yet)."""
        drained = set(self.disrupted)
        return sum(
            1 for r in self.records if self._in_flight(r) and ({r.instance, r.endpoint} & drained)
        )

    def table(self) -> str:
        """Requests by kind (rows) and outcome (columns); gated outcomes are always shown."""
        counts = self.counts()
        shown = [o for o in OUTCOMES if any(c[o] for c in counts.values()) or o in GATED_OUTCOMES]
        totals = Counter[str]()
        for row in counts.values():
            totals.update(row)
        rows = [(kind, counts[kind]) for kind in self.kinds] + [("all", totals)]
        width = max(8, *(len(label) for label, _ in rows))
        lines = [f"{'requests':<{width}} " + "  ".join(shown) + "  total"]
        for label, row in rows:
            cells = "  ".join(f"{row[o]:>{len(o)}}" for o in shown)
            lines.append(f"{label:<{width}} {cells}  {sum(row.values()):>5}")
        return "\n".join(lines)

    def text(self) -> str:
        through = f", through {self.balancer}" if self.balancer else ""
        lines = [f"verify on {self.driver}, disruption: {self.mode}{through}", "", self.table(), ""]
        lines.append(
            f"in flight when the drain began: {self.in_flight_at_drain}, "
            f"on the drained {'/'.join(self.disrupted) or 'workload'}: "
            f"{self.in_flight_on_disrupted}"
        )
        if self.wrk is not None:
            lines.append(self.wrk.text())
        retried = sum(1 for r in self.records if r.refusals and r.outcome == "completed")
        if retried:
            lines.append(f"refused, then served by another instance (router retry): {retried}")
        at = self.drain_started_at
        for state in self.balancer_states:
            when = "" if at is None else f" at {state.at - at:+.2f} s from the drain's start"
            lines.append(f"{self.balancer}: {state.server} {state.status}{when}")
        for summary in self.summaries:
            lines.append(f"{summary.workload}: drained in {summary.seconds:.2f} s")
            for c in summary.containers:
                seconds = "-" if c.seconds is None else f"{c.seconds:.2f} s"
                lines.append(
                    f"  {c.name:<12} {c.role:<8} {c.outcome:<15} exit {c.exit_code}  {seconds}"
                )
            lines.extend(f"  error: {e}" for e in summary.errors)
        forced = sum(s.count("killed") for s in self.summaries)
        lines.append(f"forced exits (SIGKILL): {forced}")
        for record in self.bad[:20]:
            lines.append(
                f"  {record.outcome}: {record.kind} {record.id} via {record.instance}: {record.error}"
            )
        if len(self.bad) > 20:
            lines.append(f"  ... and {len(self.bad) - 20} more")
        if not any(r.outcome == "completed" for r in self.records):
            lines.append("no request completed: the run proves nothing (are the requests right?)")
        elif self.summaries and not self.in_flight_on_disrupted:
            lines.append(
                "nothing was in flight on the drained workload when its drain began: the run "
                "proves nothing (send longer requests or streams, or more of them)"
            )
        lines.append(
            "PASS: no request refused (503 or at connect), truncated, lost, failed or duplicated"
            if self.passed
            else "FAIL"
        )
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        counts = self.counts()
        return {
            "driver": self.driver,
            "mode": self.mode,
            "passed": self.passed,
            "in_flight_at_drain": self.in_flight_at_drain,
            "in_flight_on_disrupted": self.in_flight_on_disrupted,
            "balancer": self.balancer,
            "balancer_states": [attrs.asdict(s) for s in self.balancer_states],
            "wrk": None if self.wrk is None else attrs.asdict(self.wrk),
            "counts": {kind: dict(counts[kind]) for kind in self.kinds},
            "events": [event_to_dict(e) for e in self.events],
            "requests": [attrs.asdict(r) for r in self.records],
        }
