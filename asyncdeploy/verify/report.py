"""The verification report: requests by kind and outcome, the drain, and the verdict."""

from __future__ import annotations

from collections import Counter
from typing import Any

import attrs

from asyncdeploy.events import DrainEvent, DrainFinished, DrainSummary, event_to_dict
from asyncdeploy.verify.traffic import GATED_OUTCOMES, OUTCOMES, RequestRecord

__all__ = ["VerifyReport"]

KINDS = ("short", "long", "stream")


@attrs.frozen(kw_only=True)
class VerifyReport:
    driver: str
    mode: str
    records: tuple[RequestRecord, ...]
    events: tuple[DrainEvent, ...]
    drain_started_at: float | None  # wall clock, from the first DrainStarted

    @property
    def summaries(self) -> list[DrainSummary]:
        return [e.summary for e in self.events if isinstance(e, DrainFinished)]

    def counts(self) -> dict[str, Counter[str]]:
        table: dict[str, Counter[str]] = {kind: Counter() for kind in KINDS}
        for record in self.records:
            table[record.kind][record.outcome or "lost"] += 1
        return table

    @property
    def bad(self) -> list[RequestRecord]:
        return [r for r in self.records if (r.outcome or "lost") in GATED_OUTCOMES]

    @property
    def passed(self) -> bool:
        drained = all(s.ok for s in self.summaries) and bool(self.summaries)
        return drained and not self.bad

    @property
    def in_flight_at_drain(self) -> int:
        """Requests that had started and not yet ended when the drain began."""
        at = self.drain_started_at
        if at is None:
            return 0
        return sum(1 for r in self.records if r.started <= at and (r.ended or at + 1) > at)

    def table(self) -> str:
        """Requests by kind (rows) and outcome (columns); gated outcomes are always shown."""
        counts = self.counts()
        shown = [o for o in OUTCOMES if any(counts[k][o] for k in KINDS) or o in GATED_OUTCOMES]
        totals = Counter[str]()
        for row in counts.values():
            totals.update(row)
        rows = [(kind, counts[kind]) for kind in KINDS] + [("all", totals)]
        lines = ["requests " + "  ".join(shown) + "  total"]
        for label, row in rows:
            cells = "  ".join(f"{row[o]:>{len(o)}}" for o in shown)
            lines.append(f"{label:<8} {cells}  {sum(row.values()):>5}")
        return "\n".join(lines)

    def text(self) -> str:
        lines = [f"verify on {self.driver}, disruption: {self.mode}", "", self.table(), ""]
        lines.append(f"in flight when the drain began: {self.in_flight_at_drain}")
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
        lines.append(
            "PASS: no request refused at connect, truncated, lost, failed or duplicated"
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
            "counts": {kind: dict(counts[kind]) for kind in KINDS},
            "events": [event_to_dict(e) for e in self.events],
            "requests": [attrs.asdict(r) for r in self.records],
        }
