"""Drain events for people: one line per event, and a summary table."""

from __future__ import annotations

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
                f"{s.count('missing')} missing" + (f", {len(s.errors)} errors" if s.errors else "")
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
