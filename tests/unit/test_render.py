"""Text output: one line per event without a terminal, a live per-container view with one."""

from __future__ import annotations

import io
import re
import time

import attrs

from asyncdeploy.cli.render import EventRenderer, LiveView, clip, for_stream
from asyncdeploy.events import (
    ContainerExited,
    ContainerOutcome,
    DrainFinished,
    DrainStarted,
    DrainSummary,
    SignalSent,
)

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


LONG = DrainStarted(
    workload="w" * 60,
    elapsed=0.0,
    grace_period_seconds=5,
    deadline=time.time() + 5,
    containers=("pause", "a-container-with-a-very-long-name-indeed", "app"),
)


def test_live_view_rows_fit_80_columns_with_long_names() -> None:
    """Every line is cut below the width, and the state column survives the cut."""
    out = io.StringIO()
    view = LiveView(out, width=80, height=24)
    view.show(LONG)
    view.show(attrs.evolve(SIGNAL, workload="w" * 60))
    event, *table = out.getvalue().rsplit("\x1b[J", 1)[1].splitlines()
    assert len(event) <= 79 and event.endswith("\u2026"), "the event line is cut too"
    assert all(len(line) <= 79 for line in table), table
    assert any("SIGTERM sent, draining" in line for line in table), table
    assert table[0].split() == ["WORKLOAD", "CONTAINER", "ROLE", "STATE", "LEFT"]


def test_live_view_keeps_below_the_screen_top() -> None:
    """More rows than the screen has lines: the table is cut, so cursor-up can reach its top."""
    many = attrs.evolve(LONG, containers=tuple(f"c{i}" for i in range(30)))
    view = LiveView(io.StringIO(), width=100, height=10)
    view.update(many)
    lines = view.table(100, 10)
    assert len(lines) == 9 and lines[-1].strip() == "... 23 more"


def test_live_view_falls_back_to_lines_when_resized_below_80_columns() -> None:
    out = io.StringIO()
    view = LiveView(out, width=79, height=24)
    view.show(STARTED)
    view.show(SIGNAL)
    assert "\x1b[" not in out.getvalue()
    assert out.getvalue().splitlines()[1] == "[  0.010s] w: app: SIGTERM sent"


def test_no_terminal_gets_one_line_per_event() -> None:
    assert isinstance(for_stream(io.StringIO()), EventRenderer)


def test_clip_marks_the_cut() -> None:
    assert clip("abcdef", 4) == "abc\u2026" and clip("abc", 4) == "abc"
