"""Drain events for people: one line per event, and a summary table."""

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

__all__ = ["EventRenderer", "describe"]


def describe(event: DrainEvent) -> str:
    """One line of text for an event."""
    match event:
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
                f"{s.count('missing')} missing"
                + (f", {s.count('unreachable')} unreachable" if s.count("unreachable") else "")
                + (f", {len(s.errors)} errors" if s.errors else "")
            )


class EventRenderer:
    """Writes one timestamped line per event (the CLI's text output)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def show(self, event: DrainEvent) -> None:
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
