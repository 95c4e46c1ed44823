"""Text output: one line per event without a terminal, a live per-container view with one."""

from __future__ import annotations

import io
import re
import time

import attrs
import pytest

from asyncdeploy._events import (
    ContainerExited,
    ContainerOutcome,
    DrainFinished,
    DrainStarted,
    DrainSummary,
    PreStopFinished,
    PreStopStarted,
    SignalSent,
)
from asyncdeploy.cli.render import EventRenderer, LiveView, clip, for_stream

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


def test_the_summary_after_a_kill_says_what_was_killed_and_when() -> None:
    """After a second Ctrl-C the table's head says what was killed, not "drained"."""
    killed = attrs.evolve(
        SUMMARY,
        seconds=7.84,
        grace_period_seconds=30,
        containers=(
            ContainerOutcome(name="app", role="run", outcome="killed", exit_code=137, seconds=3.1),
            ContainerOutcome(name="side", role="run", outcome="exited", exit_code=0, seconds=1.0),
        ),
    )
    head = EventRenderer.summary_table(killed).splitlines()[0]
    assert head == "w: cut short, killed app at 3.10 s of 30 s (done in 7.84 s)"
    at_deadline = attrs.evolve(killed, grace_period_seconds=3)
    assert EventRenderer.summary_head(at_deadline) == (
        "w: killed app at the 3 s deadline (done in 7.84 s)"
    )
    assert EventRenderer.summary_head(SUMMARY) == "w: drained in 2.10 s"


class _Terminal(io.StringIO):
    """A stream that says it is a terminal of 80 columns."""

    def isatty(self) -> bool:
        return True

    def fileno(self) -> int:
        raise OSError("no descriptor")


def test_pull_bars_fit_80_columns_and_stay_in_place(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    import pyte

    from asyncdeploy._events import PullFinished, PullProgress, PullStarted
    from asyncdeploy.cli.render import PullView

    monkeypatch.setattr(os, "get_terminal_size", lambda *_: os.terminal_size((80, 24)))
    monkeypatch.setenv("TERM", "xterm")
    image = "registry.example.com/team/vllm-openai-with-drain:v0.6.3-cuda12.4"
    stream = _Terminal()
    view = PullView(stream)
    view.show(PullStarted(workload="w", elapsed=0, image=image, registry="r", policy="Always"))
    for done in range(0, 5_000_000_001, 500_000_000):
        view.show(
            PullProgress(
                workload="w",
                elapsed=1,
                image=image,
                bytes_done=done,
                bytes_total=5_000_000_000,
                layers_done=done // 500_000_000,
                layers_total=10,
            )
        )
    view.show(PullFinished(workload="w", elapsed=9, image=image, digest="sha256:1", seconds=9))
    screen = pyte.Screen(80, 24)
    pyte.Stream(screen).feed(stream.getvalue().replace("\n", "\r\n"))
    lines = [line.rstrip() for line in screen.display if line.strip()]
    assert len(lines) == 1 and "done in 9.0 s" in lines[0] and len(lines[0]) < 80, lines
    assert lines[0].startswith("  registry.example.com/") and ":v0.6.3-cuda12.4" in lines[0]


def _last_table(out: io.StringIO) -> str:
    return out.getvalue().rsplit("\x1b[J", 1)[1]


def test_a_propagation_window_is_named_with_the_time_left_until_it_ends() -> None:
    """An idle delete of the demo waits out its window (10 s): the row says what it waits for
    and how long at most, the event line too; once the window has passed, the row is the
    signal's plain state again."""
    out = io.StringIO()
    view = LiveView(out, width=120, height=24)
    view.show(attrs.evolve(STARTED, deadline=time.time() + 30))
    view.show(attrs.evolve(SIGNAL, propagation_seconds=10.0))
    assert "SIGTERM: waiting for balancers to notice, up to 10 s" in _last_table(out)
    assert "app: SIGTERM sent (new requests still served up to 10 s, until balancers notice)" in (
        out.getvalue()
    )
    view.show(attrs.evolve(SIGNAL, propagation_seconds=0.4))  # rounded up: never "up to 0 s"
    assert "SIGTERM: waiting for balancers to notice, up to 1 s" in _last_table(out)
    view.show(attrs.evolve(SIGNAL, propagation_seconds=0.01))  # (a window already over)
    time.sleep(0.02)
    view.redraw()
    table = _last_table(out)
    assert "waiting for balancers" not in table and "SIGTERM sent, draining" in table


def test_a_hooks_window_is_named_until_the_hook_ends() -> None:
    out = io.StringIO()
    view = LiveView(out, width=120, height=24)
    view.show(attrs.evolve(STARTED, deadline=time.time() + 30))
    view.show(PreStopStarted(workload="w", elapsed=0.1, container="app", propagation_seconds=5))
    assert "pre_stop: waiting for balancers to notice, up to 5 s" in _last_table(out)
    view.show(
        PreStopFinished(workload="w", elapsed=3.0, container="app", exit_code=0, timed_out=False)
    )
    table = _last_table(out)
    assert "waiting for balancers" not in table and "pre_stop done (0)" in table


def test_no_window_known_says_nothing_of_one() -> None:
    out = io.StringIO()
    EventRenderer(out).show(PreStopStarted(workload="w", elapsed=0.1, container="app"))
    assert out.getvalue() == "[  0.100s] w: app: pre_stop hook started\n"
