"""``delete --timeline``'s page in headless Chromium: each container's label stands before its
bar, inside the drawing, clear of the bars; its hook and signal phases are segments of the bar;
no text of the drawing is cut at its edge. A copy of the page gets a script that measures what
Chromium laid out and writes it into the DOM, read back with ``--dump-dom``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from asyncdeploy._events import (
    ContainerExited,
    ContainerForceKilled,
    ContainerOutcome,
    DrainFinished,
    DrainStarted,
    DrainSummary,
    PauseRemoved,
    PreStopFinished,
    PreStopStarted,
    SignalSent,
)
from asyncdeploy.timeline import timeline_html
from tests.engines.test_verify_report_page import rendered

pytestmark = pytest.mark.anyio

T0 = 1_800_000_000.0
W = "a-workload-with-a-rather-long-name"

MEASURE = """<script>
const svg = document.getElementById("timeline").getBoundingClientRect();
for (const text of document.querySelectorAll("svg text")) {
  const box = text.getBoundingClientRect();
  const inside = box.width > 0 && box.left >= svg.left - 0.5 && box.right <= svg.right + 0.5
    && box.top >= svg.top - 0.5 && box.bottom <= svg.bottom + 0.5;
  text.setAttribute("data-inside", String(inside));
  const row = text.closest("g.container");
  if (row && text.classList.contains("container-label")) {
    const bar = row.querySelector("rect.request").getBoundingClientRect();
    text.setAttribute("data-clear", String(box.right <= bar.left));
    text.setAttribute("data-shown", text.textContent);
  }
}
</script>"""


def _events() -> list[object]:
    def at(seconds: float) -> float:
        return seconds

    outcomes = (
        ContainerOutcome(name="app", role="run", outcome="exited", exit_code=0, seconds=6.0),
        ContainerOutcome(
            name="stubborn-sidecar-container", role="run", outcome="killed", exit_code=137,
            seconds=10.2,
        ),
        ContainerOutcome(name="pause", role="pause", outcome="exited", exit_code=0, seconds=10.5),
    )  # fmt: skip
    summary = DrainSummary(workload=W, grace_period_seconds=10, seconds=10.5, containers=outcomes)
    return [
        DrainStarted(
            workload=W,
            elapsed=0.0,
            grace_period_seconds=10,
            deadline=T0 + 10,
            containers=("pause", "app", "stubborn-sidecar-container"),
        ),
        PreStopStarted(workload=W, elapsed=at(0.1), container="app"),
        PreStopFinished(workload=W, elapsed=at(3.0), container="app", exit_code=0, timed_out=False),
        SignalSent(workload=W, elapsed=at(3.0), container="app", signal="SIGTERM"),
        SignalSent(workload=W, elapsed=at(0.1), container="stubborn-sidecar-container", signal="SIGTERM"),
        ContainerExited(workload=W, elapsed=at(6.0), container="app", exit_code=0, graceful=True),
        ContainerForceKilled(
            workload=W, elapsed=at(10.0), container="stubborn-sidecar-container", reason="deadline"
        ),
        ContainerExited(
            workload=W, elapsed=at(10.2), container="stubborn-sidecar-container", exit_code=137,
            graceful=False,
        ),
        PauseRemoved(workload=W, elapsed=at(10.5), container="pause"),
        DrainFinished(workload=W, elapsed=at(10.5), summary=summary),
    ]  # fmt: skip


async def test_the_labels_are_visible_and_the_phases_are_segments(tmp_path: Path) -> None:
    page = tmp_path / "drain.html"
    page.write_text(timeline_html(_events()).replace("</body>", MEASURE + "</body>"))  # type: ignore[arg-type]
    dom = await rendered(page)
    labels = dom.having("text", "container-label")
    assert [label["data-shown"] for label in labels] == [
        f"{W}/app",
        f"{W}/stubborn-sidecar-container",
        f"{W}/pause",
    ]
    assert all(label["data-inside"] == "true" for label in labels), labels
    assert all(label["data-clear"] == "true" for label in labels), labels
    texts = [attrs for tag, attrs in dom.elements if tag == "text"]
    cut = [t for t in texts if t.get("data-inside") != "true"]
    assert not cut, f"texts cut at the drawing's edge: {cut}"
    phases: dict[str, list[str]] = {}
    for segment in dom.having("rect", "segment"):
        phases.setdefault(segment["data-container"].rsplit("/", 1)[1], []).append(
            segment["data-phase"]
        )
    assert phases["app"] == ["waiting", "pre-stop", "signal"]
    assert phases["stubborn-sidecar-container"] == ["waiting", "signal", "kill"]
    assert phases["pause"] == ["waiting"]
    steps = [a["data-step"] for t, a in dom.elements if t == "li"]
    assert steps[0] == "drain-started" and "killed" in steps and steps[-1] == "drain-finished"


# Each text's box grown by a tenth of its height above and below, and 1 px at each side: the
# page is read in the user's browser, whose font's line box is up to 1.17 times this machine's
# (DejaVu Sans 1.16 em, Noto Sans 1.36, Segoe UI 1.33); digits are no wider than DejaVu's.
OVERLAPS = """<script>
const texts = [...document.querySelectorAll("svg text")];
const boxes = texts.map((t) => {
  const b = t.getBoundingClientRect(), grow = b.height / 10;
  return {left: b.left - 1, right: b.right + 1, top: b.top - grow, bottom: b.bottom + grow};
});
const hits = [];
for (let i = 0; i < texts.length; i++) {
  for (let j = i + 1; j < texts.length; j++) {
    const a = boxes[i], b = boxes[j];
    if (a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom) {
      hits.push(texts[i].textContent + " / " + texts[j].textContent);
    }
  }
}
document.body.setAttribute("data-overlaps", JSON.stringify(hits));
document.body.setAttribute("data-texts", String(texts.length));
</script>"""


def _three_workloads() -> list[object]:
    """A ``delete-all`` of three workloads at once: their steps come close together in time
    (the issue's page: the numbers of the three drains' steps drawn over one another)."""
    events: list[object] = []
    for index, workload in enumerate(("llm-a", "llm-b", "llm-c")):
        lag = index * 0.03  # their events a few ms apart, as one delete-all sends them
        outcomes = (
            ContainerOutcome(
                name="server", role="run", outcome="exited", exit_code=0, seconds=5.2 + lag
            ),
            ContainerOutcome(
                name="gate", role="sidecar", outcome="exited", exit_code=0, seconds=5.3 + lag
            ),
            ContainerOutcome(
                name="pause", role="pause", outcome="exited", exit_code=0, seconds=5.5 + lag
            ),
        )
        summary = DrainSummary(
            workload=workload, grace_period_seconds=30, seconds=5.5 + lag, containers=outcomes
        )
        events += [
            DrainStarted(
                workload=workload,
                elapsed=0.0,
                grace_period_seconds=30,
                deadline=T0 + 30 + lag,
                containers=("pause", "server", "gate"),
            ),
            PreStopStarted(workload=workload, elapsed=0.05 + lag, container="server"),
            PreStopStarted(workload=workload, elapsed=0.06 + lag, container="gate"),
            PreStopFinished(
                workload=workload,
                elapsed=5.0 + lag,
                container="server",
                exit_code=0,
                timed_out=False,
            ),
            PreStopFinished(
                workload=workload,
                elapsed=5.01 + lag,
                container="gate",
                exit_code=0,
                timed_out=False,
            ),
            SignalSent(workload=workload, elapsed=5.0 + lag, container="server", signal="SIGTERM"),
            SignalSent(workload=workload, elapsed=5.01 + lag, container="gate", signal="SIGTERM"),
            ContainerExited(
                workload=workload, elapsed=5.2 + lag, container="server", exit_code=0, graceful=True
            ),
            ContainerExited(
                workload=workload, elapsed=5.3 + lag, container="gate", exit_code=0, graceful=True
            ),
            PauseRemoved(workload=workload, elapsed=5.5 + lag, container="pause"),
            DrainFinished(workload=workload, elapsed=5.5 + lag, summary=summary),
        ]
    return events  # fmt: skip


async def test_three_workloads_draw_no_text_over_another(tmp_path: Path) -> None:
    """Issue 32 item 8: with three workloads' steps, no two texts of the drawing (the steps'
    numbers, the labels, the outcomes, the ticks) intersect as Chromium lays them out, with
    room for a browser whose font is taller (``OVERLAPS``)."""
    page = tmp_path / "three.html"
    html = timeline_html(_three_workloads())  # type: ignore[arg-type]
    page.write_text(html.replace("</body>", OVERLAPS + MEASURE + "</body>"))
    dom = await rendered(page)
    [body] = [a for t, a in dom.elements if t == "body"]
    numbers = dom.having("text", "moment-number")
    assert len(numbers) == 3 * 11  # every step of the three drains is numbered
    assert int(body["data-texts"]) > len(numbers)
    assert json.loads(body["data-overlaps"]) == []
    texts = [a for t, a in dom.elements if t == "text"]
    assert all(t.get("data-inside") == "true" for t in texts), "no text cut at the edge"
