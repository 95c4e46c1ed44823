"""Events for people: one line per drain or pull event, a summary table, live views."""

from __future__ import annotations

import math
import os
import time
from typing import TextIO

import click

from asyncdeploy._events import (
    ContainerExited,
    ContainerForceKilled,
    ContainerRemoved,
    DrainEvent,
    DrainFinished,
    DrainStarted,
    DrainSummary,
    NodeUnreachable,
    PauseRemoved,
    PreStopFinished,
    PreStopStarted,
    PullEvent,
    PullFailed,
    PullFinished,
    PullProgress,
    PullStarted,
    SidecarRemoved,
    SignalSent,
    TeardownPending,
    TrafficLeft,
    TrafficStillRouted,
)
from asyncdeploy.cli._terminal import fold, terminal_width

__all__ = ["MIN_LIVE_WIDTH", "EventRenderer", "LiveView", "PullView", "event_line", "for_stream"]

BAR_WIDTH = 24


def event_line(event: DrainEvent | PullEvent, started: DrainStarted | None = None) -> str:
    """One line of text for an event; ``started``, the drain's start, tells a hook cut off at
    the deadline from one cut off early (a second Ctrl-C: the operation's ``kill()``)."""
    match event:
        case PullStarted():
            return f"pulling {event.image} ({event.policy})"
        case PullProgress():
            return f"pulling {event.image}: {_amount(event)}"
        case PullFinished():
            return f"pulled {event.image} ({event.digest or 'no digest'}) in {event.seconds:.2f} s"
        case PullFailed():
            return f"pull of {event.image} failed: {event.reason}"
        case DrainStarted():
            return f"drain started: grace {event.grace_period_seconds} s, {_count(event)}"
        case SidecarRemoved():
            return f"{event.container}: autoheal sidecar removed"
        case PreStopStarted():
            return f"{event.container}: pre_stop hook started{_window_words(event)}"
        case PreStopFinished():
            if event.timed_out:
                return f"{event.container}: pre_stop hook cut off {_when_cut(event, started)}"
            return f"{event.container}: pre_stop hook finished (exit {event.exit_code})"
        case SignalSent():
            return f"{event.container}: {event.signal} sent{_window_words(event)}"
        case ContainerExited():
            how = "exited" if event.graceful else "killed"
            return f"{event.container}: {how} (exit {event.exit_code})"
        case ContainerForceKilled():
            return f"{event.container}: SIGKILL ({event.reason})"
        case ContainerRemoved():
            return f"{event.container}: removed"
        case PauseRemoved():
            return f"{event.container}: pause container removed"
        case TrafficLeft():
            return f"out of the ready endpoints of {', '.join(event.services)}: traffic has left"
        case TrafficStillRouted():
            return (
                f"warning: still a ready endpoint of {', '.join(event.services)} "
                f"{event.window:g} s into the drain"
            )
        case TeardownPending():
            return (
                f"every container ended; the Pod was still being torn down {event.timeout:g} s "
                "into the drain (it keeps its name until it goes)"
            )
        case NodeUnreachable():
            silent = "" if event.silent_for is None else f" for {event.silent_for:.0f} s"
            return (
                f"node {event.node} stopped reporting{silent}: pod {event.pod} stays "
                f"Terminating, its containers' ends unseen; {event.remedy}"
            )
        case DrainFinished():
            s = event.summary
            return (
                f"drain finished in {s.seconds:.2f} s: {s.count('exited')} exited, "
                f"{s.count('killed')} killed, {s.count('already-exited')} already exited, "
                f"{s.count('missing')} missing"
                + (f", {s.count('unreachable')} unreachable" if s.count("unreachable") else "")
                + (f", {len(s.errors)} errors" if s.errors else "")
                + (", the Pod still tearing down" if s.tearing_down else "")
                + (f", node {s.unreachable_node} not reporting" if s.unreachable_node else "")
            )


def _when_cut(event: PreStopFinished, started: DrainStarted | None) -> str:
    if started is None:
        return "at the deadline"
    into = event.elapsed - started.elapsed
    if into < started.grace_period_seconds - 0.5:  # the drain was cut short before its deadline
        return (
            f"early, at {into:.1f} s of {started.grace_period_seconds} s (the drain was cut short)"
        )
    return "at the deadline"


def _count(event: DrainStarted) -> str:
    """How many containers drain; the pause container (a reserved name) is not one of them."""
    drained = [c for c in event.containers if c != "pause"]
    text = f"{len(drained)} container{'' if len(drained) == 1 else 's'}"
    return text + (" and the pause container" if len(drained) < len(event.containers) else "")


class EventRenderer:
    """Writes one timestamped line per event (the CLI's text output)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self._started: dict[str, DrainStarted] = {}
        # a row in its propagation window: when it ends at the latest (wall clock), and the
        # step it is part of ("SIGTERM sent", "pre_stop running")
        self._windows: dict[tuple[str, str], tuple[float, str]] = {}

    def show(self, event: DrainEvent | PullEvent) -> None:
        if isinstance(event, PullProgress):
            return  # progress bars are for terminals (PullView); lines say start and end
        if isinstance(event, DrainStarted):
            self._started[event.workload] = event
        line = f"[{event.elapsed:7.3f}s] {event.workload}: "
        click.echo(line + event_line(event, self._started.get(event.workload)), file=self.stream)

    def note(self, message: str) -> None:
        """A line of the CLI's own (a signal's notice) between the events."""
        click.echo(message, file=self.stream)

    def close(self) -> None:
        self.stream.flush()

    @staticmethod
    def summary_head(summary: DrainSummary) -> str:
        """The summary's first line: drained, or which containers were killed, and when (a kill
        before the deadline: the drain was cut short, by a second Ctrl-C or a handle's
        ``kill()``)."""
        killed = [c for c in summary.containers if c.outcome == "killed"]
        if not killed:
            head = f"{summary.workload}: drained in {summary.seconds:.2f} s"
            return head + (" (its Pod still being torn down)" if summary.tearing_down else "")
        names = ", ".join(c.name for c in killed)
        at = max(summary.seconds if c.seconds is None else c.seconds for c in killed)
        grace = summary.grace_period_seconds
        done = f"(done in {summary.seconds:.2f} s)"
        if at < grace - 0.5:
            return (
                f"{summary.workload}: cut short, killed {names} at {at:.2f} s of {grace} s {done}"
            )
        return f"{summary.workload}: killed {names} at the {grace} s deadline {done}"

    @staticmethod
    def summary_table(summary: DrainSummary) -> str:
        rows = [f"{'CONTAINER':<20} {'ROLE':<8} {'OUTCOME':<15} {'EXIT':>4} {'SECONDS':>8}"]
        for c in summary.containers:
            exit_code = "-" if c.exit_code is None else str(c.exit_code)
            seconds = "-" if c.seconds is None else f"{c.seconds:.2f}"
            rows.append(f"{c.name:<20} {c.role:<8} {c.outcome:<15} {exit_code:>4} {seconds:>8}")
        head = EventRenderer.summary_head(summary)
        tail = [f"error: {e}" for e in summary.errors]
        return "\n".join([head, *rows, *tail])


MIN_LIVE_WIDTH = 80
"""Narrower than this, or without a terminal, or with TERM=dumb: one line per event."""


def for_stream(stream: TextIO) -> EventRenderer | LiveView:
    """The live view where the terminal can hold it, else one line per event."""
    width = terminal_width(stream)
    if width is None or width < MIN_LIVE_WIDTH:
        return EventRenderer(stream)
    return LiveView(stream)


def _window_words(event: PreStopStarted | SignalSent) -> str:
    """What the drain waits for now, when the container's plan says it holds a propagation
    window (an idle delete of the demo takes its 10 s, and nothing else would say why)."""
    if not event.propagation_seconds:
        return ""
    return (
        f" (new requests still served up to {event.propagation_seconds:g} s, "
        "until balancers notice)"
    )


def clip(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters, an ellipsis marking the cut."""
    return text if len(text) <= width else text[: max(0, width - 1)] + "\u2026"


def clip_middle(text: str, width: int) -> str:
    """``text`` in ``width`` characters, its middle given up (an image's registry and tag stay)."""
    if len(text) <= width:
        return text
    head = (width - 1) // 2
    return text[:head] + "\u2026" + text[len(text) - (width - 1 - head) :]


def _amount(event: PullProgress) -> str:
    layers = f"{event.layers_done}/{event.layers_total} layers"
    if event.bytes_done is None or not event.bytes_total:
        return layers
    return f"{event.bytes_done / 1e6:.1f}/{event.bytes_total / 1e6:.1f} MB, {layers}"


class PullView:
    """One progress bar per image being pulled, redrawn in place on a terminal; every line
    shorter than the terminal is wide (a wrapped line would add a line at each redraw)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self._rows: dict[str, str] = {}
        self._drawn = 0
        self._lines: list[str] = []

    def note(self, message: str) -> None:
        """A line of the CLI's own (a signal's notice), written above the bars."""
        if self._drawn:
            self.stream.write(f"\x1b[{self._drawn}F\x1b[J")
        self.stream.write(fold(message, terminal_width(self.stream) or MIN_LIVE_WIDTH) + "\n")
        if self._lines:
            self.stream.write("\n".join(self._lines) + "\n")
        self.stream.flush()

    def freeze(self) -> None:
        """Other lines follow the bars from now on: they are never redrawn again."""
        self._drawn, self._lines = 0, []

    def show(self, event: PullEvent) -> None:
        match event:
            case PullStarted():
                self._rows[event.image] = "starting"
            case PullProgress():
                self._rows[event.image] = f"{_bar(event)} {_amount(event)}"
            case PullFinished():
                self._rows[event.image] = f"done in {event.seconds:.1f} s"
            case PullFailed():
                self._rows[event.image] = "FAILED"
        if self._drawn:
            self.stream.write(f"\x1b[{self._drawn}F\x1b[J")  # up N lines, clear to the end
        # a line as wide as the terminal wraps, and every redraw would then add a line: the
        # names give way first (their middle), then the line is cut
        room = (terminal_width(self.stream) or MIN_LIVE_WIDTH) - 1
        width = max(len(image) for image in self._rows)
        longest = max(len(state) for state in self._rows.values())
        if 2 + width + 2 + longest > room:
            width = max(12, room - 4 - longest)
        lines = [
            clip(f"  {clip_middle(image, width):<{width}}  {state}", room)
            for image, state in self._rows.items()
        ]
        self.stream.write("\n".join(lines) + "\n")
        self.stream.flush()
        self._drawn = len(lines)
        self._lines = lines


def _bar(event: PullProgress) -> str:
    if event.bytes_done is not None and event.bytes_total:
        share = event.bytes_done / event.bytes_total
    else:
        share = event.layers_done / event.layers_total if event.layers_total else 0.0
    filled = round(BAR_WIDTH * min(share, 1.0))
    return "[" + "#" * filled + "." * (BAR_WIDTH - filled) + "]"


class LiveView:
    """A per-container view of a drain, redrawn in place on a terminal.

    One row per container: its role, its state in the drain, and the seconds left until the
    deadline; the events themselves scroll above it. Every line is cut to the terminal's width
    (a wrapped line would break the cursor arithmetic that redraws in place), the columns shrink
    to fit, and below :data:`MIN_LIVE_WIDTH` columns the view falls back to one line per event.
    """

    def __init__(
        self, stream: TextIO, *, width: int | None = None, height: int | None = None
    ) -> None:
        self.stream = stream
        self._fixed_size = (width, height)
        self._rows: dict[tuple[str, str], list[str]] = {}
        self._deadlines: dict[str, float] = {}
        self._finished: set[str] = set()
        self._drawn = 0
        self._lines_only = False
        self._started: dict[str, DrainStarted] = {}
        # a row in its propagation window: when it ends at the latest (wall clock), and the
        # step it is part of ("SIGTERM sent", "pre_stop running")
        self._windows: dict[tuple[str, str], tuple[float, str]] = {}

    def _size(self) -> tuple[int, int]:
        width, height = self._fixed_size
        if width is None or height is None:
            try:
                size = os.get_terminal_size(self.stream.fileno())
                width, height = width or size.columns, height or size.lines
            except (AttributeError, OSError, ValueError):
                width, height = width or MIN_LIVE_WIDTH, height or 24
        return width, height

    def update(self, event: DrainEvent) -> None:
        match event:
            case DrainStarted():
                self._deadlines[event.workload] = event.deadline
                for name in event.containers:
                    self._rows[(event.workload, name)] = ["", "waiting"]
            case DrainFinished():
                self._finished.add(event.workload)
                for c in event.summary.containers:
                    row = self._rows.setdefault((event.workload, c.name), [c.role, ""])
                    code = "" if c.exit_code is None else f" ({c.exit_code})"
                    row[1] = f"{c.outcome}{code}, removed"
            case _:
                container = getattr(event, "container", None)
                if container is not None:
                    key = (event.workload, container)
                    row = self._rows.setdefault(key, ["", ""])
                    row[0] = getattr(event, "role", row[0])
                    row[1] = _short_state(event)
                    self._windows.pop(key, None)
                    if isinstance(event, PreStopStarted | SignalSent) and event.propagation_seconds:
                        step = "pre_stop" if isinstance(event, PreStopStarted) else event.signal
                        self._windows[key] = (time.time() + event.propagation_seconds, step)

    def note(self, message: str) -> None:
        """A line of the CLI's own (a signal's notice), written above the table like an event:
        written past the table instead, the next redraw would erase it and leave a header."""
        if self._lines_only:
            self.stream.write(message + "\n")
            self.stream.flush()
            return
        self._clear()
        self.stream.write(fold(message, self._size()[0]) + "\n")
        self.redraw(clear=False)

    def show(self, event: DrainEvent) -> None:
        width, _ = self._size()
        self._clear()
        if isinstance(event, DrainStarted):
            self._started[event.workload] = event
        started = self._started.get(event.workload)
        line = f"[{event.elapsed:7.3f}s] {event.workload}: {event_line(event, started)}"
        self.update(event)
        if self._lines_only or width < MIN_LIVE_WIDTH:
            self._lines_only = True  # resized too narrow: stay with plain lines from now on
            self.stream.write(line + "\n")
            self.stream.flush()
            return
        self.stream.write(clip(line, width - 1) + "\n")
        self.redraw(clear=False)

    def table(self, width: int, height: int) -> list[str]:
        """The table's lines, each at most ``width - 1`` characters, at most ``height - 1``."""
        rows = []
        now = time.time()
        for (workload, name), (role, state) in self._rows.items():
            if workload in self._finished:
                left = "done"
            else:
                left = f"{max(0.0, self._deadlines.get(workload, 0) - now):5.1f}s"
            ends, step = self._windows.get((workload, name), (0.0, ""))
            if ends > now and workload not in self._finished:
                # rounded up: "up to" holds to the end, never "up to 0 s" while it lasts
                window = math.ceil(ends - now)
                state = f"{step}: waiting for balancers to notice, up to {window} s"
            rows.append([workload, name, role, state, left])
        header = ["WORKLOAD", "CONTAINER", "ROLE", "STATE", "LEFT"]
        widths = _fit([header, *rows], width - 1 - 2)
        lines = [
            "  " + " ".join(clip(cell, w).ljust(w) for cell, w in zip(row, widths, strict=True))
            for row in [header, *rows]
        ]
        lines = [line.rstrip() for line in lines]
        if len(lines) > height - 1:  # cursor-up cannot reach above the screen's top
            hidden = len(lines) - (height - 2)
            lines = [*lines[: height - 2], f"  ... {hidden} more"]
        return lines

    def redraw(self, *, clear: bool = True) -> None:
        if self._lines_only:
            return
        width, height = self._size()
        if width < MIN_LIVE_WIDTH:
            return  # show() switches to plain lines at the next event
        if clear:
            self._clear()
        lines = self.table(width, height)
        self.stream.write("\n".join(lines) + "\n")
        self.stream.flush()
        self._drawn = len(lines)

    def _clear(self) -> None:
        if self._drawn:
            self.stream.write(f"\x1b[{self._drawn}F\x1b[J")  # up N lines, clear to the end
            self._drawn = 0

    def close(self) -> None:
        self.stream.flush()


def _fit(rows: list[list[str]], room: int) -> list[int]:
    """Column widths for rows of (workload, container, role, state, left) within ``room``.

    Each column gets its natural width when they fit; otherwise role and left keep theirs and
    the names and the state share what is left (the state first, it is what people watch).
    """
    natural = [max(len(row[i]) for row in rows) for i in range(5)]
    gaps = len(natural) - 1
    if sum(natural) + gaps <= room:
        return natural
    workload, container, role, state, left = natural
    flexible = room - gaps - role - left
    state = min(state, max(16, flexible // 2))
    names = flexible - state
    workload_share = max(8, min(workload, names * workload // max(1, workload + container)))
    container_share = max(8, min(container, names - workload_share))
    return [workload_share, container_share, role, state, left]


def _short_state(event: DrainEvent) -> str:
    match event:
        case SidecarRemoved() | ContainerRemoved() | PauseRemoved():
            return "removed"
        case PreStopStarted():
            return "pre_stop running"
        case PreStopFinished():
            return "pre_stop cut off" if event.timed_out else f"pre_stop done ({event.exit_code})"
        case SignalSent():
            return f"{event.signal} sent, draining"
        case ContainerExited():
            return f"{'exited' if event.graceful else 'killed'} ({event.exit_code})"
        case ContainerForceKilled():
            return "SIGKILL sent"
    return ""
