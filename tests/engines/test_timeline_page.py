"""``delete --timeline``'s page in headless Chromium: each container's label stands before its
bar, inside the drawing, clear of the bars; its hook and signal phases are segments of the bar;
no text of the drawing is cut at its edge. A copy of the page gets a script that measures what
Chromium laid out and writes it into the DOM, read back with ``--dump-dom``."""

from __future__ import annotations

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
