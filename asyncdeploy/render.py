"""Events for people: one line per drain or pull event, a summary table, live views."""

from __future__ import annotations

import time
from typing import TextIO

import click

from asyncdeploy.events import (
    ContainerExited,
    ContainerForceKilled,
    ContainerRemoved,
    DrainEvent,
    DrainFinished,
    DrainStarted,
    DrainSummary,
    PauseRemoved,
    PreStopFinished,
    PreStopStarted,
    SidecarRemoved,
    SignalSent,
)
from asyncdeploy.pull_events import PullEvent, PullFailed, PullFinished, PullProgress, PullStarted

__all__ = ["EventRenderer", "PullView", "describe"]

BAR_WIDTH = 24


def describe(event: DrainEvent | PullEvent) -> str:
    """One line of text for an event."""
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
            return (
                f"drain started: grace {event.grace_period_seconds} s, "
                f"{len(event.containers)} containers"
            )
        case SidecarRemoved():
            return f"{event.container}: autoheal sidecar removed"
        case PreStopStarted():
            return f"{event.container}: pre_stop hook started"
        case PreStopFinished():
            if event.timed_out:
                return f"{event.container}: pre_stop hook cut off at the deadline"
            return f"{event.container}: pre_stop hook finished (exit {event.exit_code})"
        case SignalSent():
            return f"{event.container}: {event.signal} sent"
        case ContainerExited():
            how = "exited" if event.graceful else "killed"
            return f"{event.container}: {how} (exit {event.exit_code})"
        case ContainerForceKilled():
            return f"{event.container}: SIGKILL ({event.reason})"
        case ContainerRemoved():
            return f"{event.container}: removed"
        case PauseRemoved():
            return f"{event.container}: pause container removed"
        case DrainFinished():
            s = event.summary
            return (
                f"drain finished in {s.seconds:.2f} s: {s.count('exited')} exited, "
                f"{s.count('killed')} killed, {s.count('already-exited')} already exited, "
                f"{s.count('missing')} missing" + (f", {len(s.errors)} errors" if s.errors else "")
            )


class EventRenderer:
    """Writes one timestamped line per event (the CLI's text output)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def show(self, event: DrainEvent | PullEvent) -> None:
        if isinstance(event, PullProgress):
            return  # progress bars are for terminals (PullView); lines say start and end
        line = f"[{event.elapsed:7.3f}s] {event.workload}: {describe(event)}"
        click.echo(line, file=self.stream)

    def close(self) -> None:
        self.stream.flush()

    @staticmethod
    def summary_table(summary: DrainSummary) -> str:
        rows = [f"{'CONTAINER':<20} {'ROLE':<8} {'OUTCOME':<15} {'EXIT':>4} {'SECONDS':>8}"]
        for c in summary.containers:
            exit_code = "-" if c.exit_code is None else str(c.exit_code)
            seconds = "-" if c.seconds is None else f"{c.seconds:.2f}"
            rows.append(f"{c.name:<20} {c.role:<8} {c.outcome:<15} {exit_code:>4} {seconds:>8}")
        head = f"{summary.workload}: drained in {summary.seconds:.2f} s"
        tail = [f"error: {e}" for e in summary.errors]
        return "\n".join([head, *rows, *tail])


def _amount(event: PullProgress) -> str:
    layers = f"{event.layers_done}/{event.layers_total} layers"
    if event.bytes_done is None or not event.bytes_total:
        return layers
    return f"{event.bytes_done / 1e6:.1f}/{event.bytes_total / 1e6:.1f} MB, {layers}"


class PullView:
    """One progress bar per image being pulled, redrawn in place on a terminal."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self._rows: dict[str, str] = {}
        self._drawn = 0

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
        width = max(len(image) for image in self._rows)
        lines = [f"  {image:<{width}}  {state}" for image, state in self._rows.items()]
        self.stream.write("\n".join(lines) + "\n")
        self.stream.flush()
        self._drawn = len(lines)


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
    deadline; the events themselves scroll above it.
    """

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self._rows: dict[tuple[str, str], list[str]] = {}
        self._deadlines: dict[str, float] = {}
        self._finished: set[str] = set()
        self._drawn = 0

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
                    row = self._rows.setdefault((event.workload, container), ["", ""])
                    row[0] = getattr(event, "role", row[0])
                    row[1] = _short_state(event)

    def show(self, event: DrainEvent) -> None:
        self._clear()
        click.echo(f"[{event.elapsed:7.3f}s] {event.workload}: {describe(event)}", file=self.stream)
        self.update(event)
        self.redraw(clear=False)

    def redraw(self, *, clear: bool = True) -> None:
        if clear:
            self._clear()
        lines = [f"  {'WORKLOAD':<24} {'CONTAINER':<16} {'ROLE':<8} {'STATE':<28} LEFT"]
        for (workload, name), (role, state) in self._rows.items():
            if workload in self._finished:
                left = "done"
            else:
                left = f"{max(0.0, self._deadlines.get(workload, 0) - time.time()):5.1f}s"
            lines.append(f"  {workload:<24} {name:<16} {role:<8} {state:<28} {left}")
        self.stream.write("\n".join(lines) + "\n")
        self.stream.flush()
        self._drawn = len(lines)

    def _clear(self) -> None:
        if self._drawn:
            self.stream.write(f"\x1b[{self._drawn}F\x1b[J")  # up N lines, clear to the end
            self._drawn = 0

    def close(self) -> None:
        self.stream.flush()


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
