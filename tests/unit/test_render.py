"""Text output: one line per event without a terminal, a live per-container view with one."""

from __future__ import annotations

import io
import re
import time

import attrs

from asyncdeploy.events import (
    ContainerExited,
    ContainerOutcome,
    DrainFinished,
    DrainStarted,
    DrainSummary,
    SignalSent,
)
from asyncdeploy.render import EventRenderer, LiveView

STARTED = DrainStarted(
    workload="w",
    elapsed=0.0,
    grace_period_seconds=5,
    deadline=time.time() + 5,
    containers=("pause", "app"),
)
SIGNAL = SignalSent(workload="w", elapsed=0.01, container="app", signal="SIGTERM")
EXITED = ContainerExited(workload="w", elapsed=2.0, container="app", exit_code=0, graceful=True)
SUMMARY = DrainSummary(
    workload="w",
    grace_period_seconds=5,
    seconds=2.1,
    containers=(
        ContainerOutcome(name="app", role="run", outcome="exited", exit_code=0, seconds=2.0),
    ),
)
FINISHED = DrainFinished(workload="w", elapsed=2.1, summary=SUMMARY)


def test_plain_output_is_one_line_per_event() -> None:
    out = io.StringIO()
    renderer = EventRenderer(out)
    for event in (STARTED, SIGNAL, EXITED, FINISHED):
        renderer.show(event)
    lines = out.getvalue().splitlines()
    assert len(lines) == 4
    assert lines[1] == "[  0.010s] w: app: SIGTERM sent"
    assert "exited (exit 0)" in lines[2]
    assert "\x1b[" not in out.getvalue()


def test_live_view_redraws_the_container_table_in_place() -> None:
    out = io.StringIO()
    view = LiveView(out)
    view.show(attrs.evolve(STARTED, deadline=time.time() + 5))
    view.show(SIGNAL)
    text = out.getvalue()
    assert "\x1b[3F\x1b[J" in text, "the previous table is erased before the next event"
    last_table = text.rsplit("\x1b[J", 1)[1]
    assert "SIGTERM sent, draining" in last_table
    assert re.search(r" (4\.\d|5\.0)s\n", last_table), "the countdown to the deadline"
    view.show(FINISHED)
    final = out.getvalue().rsplit("\x1b[J", 1)[1]
    assert "exited (0), removed" in final and "done" in final
