"""Deployer-side logging: one record per drain event, structured, quiet unless asked for."""

from __future__ import annotations

import logging
import typing
from collections.abc import Mapping, Sequence
from typing import Any

import anyio
import anyio.lowlevel
import attrs
import pytest
from click.testing import CliRunner

from asyncdeploy import Deployer
from asyncdeploy._events import (
    ContainerExited,
    ContainerForceKilled,
    ContainerOutcome,
    ContainerRemoved,
    DrainEvent,
    DrainFinished,
    DrainStarted,
    DrainSummary,
    Emit,
    NodeUnreachable,
    PauseRemoved,
    PreStopFinished,
    PreStopStarted,
    SidecarRemoved,
    SignalSent,
    TeardownPending,
    TrafficLeft,
    TrafficStillRouted,
)
from asyncdeploy._log import configure_cli_logging, log_event, logger
from asyncdeploy.cli import main
from asyncdeploy.drivers.base import Found

W = "demo"
SUMMARY = DrainSummary(
    workload=W,
    grace_period_seconds=10,
    seconds=2.5,
    containers=(
        ContainerOutcome(name="app", role="run", outcome="exited", exit_code=0, seconds=2.0),
        ContainerOutcome(name="hog", role="run", outcome="killed", exit_code=137, seconds=2.5),
    ),
)
# one of every event type, in drain order, with the level each is logged at
EVENTS: list[tuple[DrainEvent, int]] = [
    (
        DrainStarted(
            workload=W, elapsed=0.0, grace_period_seconds=10, deadline=1e9, containers=("app",)
        ),
        logging.INFO,
    ),
    (SidecarRemoved(workload=W, elapsed=0.01, container="heal"), logging.DEBUG),
    (PreStopStarted(workload=W, elapsed=0.02, container="app"), logging.DEBUG),
    (
        PreStopFinished(workload=W, elapsed=0.5, container="app", exit_code=0, timed_out=False),
        logging.INFO,
    ),
    (SignalSent(workload=W, elapsed=0.51, container="app", signal="SIGTERM"), logging.INFO),
    (
        ContainerExited(workload=W, elapsed=2.0, container="app", exit_code=0, graceful=True),
        logging.INFO,
    ),
    (ContainerForceKilled(workload=W, elapsed=2.5, container="hog"), logging.WARNING),
    (ContainerRemoved(workload=W, elapsed=2.6, container="app"), logging.DEBUG),
    (PauseRemoved(workload=W, elapsed=2.7, container="demo-pause"), logging.DEBUG),
    (TrafficLeft(workload=W, elapsed=0.2, services=("demo",)), logging.INFO),
    (
        TrafficStillRouted(workload=W, elapsed=10.0, services=("old",), window=10.0),
        logging.WARNING,
    ),
    (TeardownPending(workload=W, elapsed=25.0, timeout=25.0), logging.WARNING),
    (
        NodeUnreachable(
            workload=W, elapsed=25.0, node="n2", pod="demo", silent_for=24.0, remedy="restart it"
        ),
        logging.ERROR,
    ),
    (DrainFinished(workload=W, elapsed=2.8, summary=SUMMARY), logging.INFO),
]


def test_every_event_type_is_covered() -> None:
    """The table above holds one event of each type of the DrainEvent union."""
    assert {type(e) for e, _ in EVENTS} == set(typing.get_args(DrainEvent))


def test_each_event_is_one_structured_record(caplog: pytest.LogCaptureFixture) -> None:
    """Logger "asyncdeploy", the level of the event, and its fields as record attributes."""
    caplog.set_level(logging.DEBUG, logger="asyncdeploy")
    for event, _ in EVENTS:
        log_event(event)
    records = [r for r in caplog.records if r.name == "asyncdeploy"]
    assert [r.levelno for r in records] == [level for _, level in EVENTS]
    for record, (event, _) in zip(records, EVENTS, strict=True):
        fields: Any = record
        assert fields.event == type(event).__name__
        assert fields.workload == W
        assert fields.elapsed == round(event.elapsed, 3)
        assert fields.container == getattr(event, "container", None)
        assert fields.role == getattr(event, "role", None)
    signal = records[4]
    assert signal.getMessage() == "demo/app: SIGTERM sent (+0.510 s)"
    assert signal.signal == "SIGTERM"  # type: ignore[attr-defined]
    finished = records[-1]
    assert finished.getMessage() == "demo: drained in 2.500 s (1 exited, 1 killed) (+2.800 s)"
    assert finished.totals["killed"] == 1  # type: ignore[attr-defined]


def test_failures_are_warnings_and_errors(caplog: pytest.LogCaptureFixture) -> None:
    """A failed or cut-off hook, a kill, and a drain with errors stand out by level."""
    caplog.set_level(logging.DEBUG, logger="asyncdeploy")
    log_event(PreStopFinished(workload=W, elapsed=1, container="a", exit_code=3, timed_out=False))
    log_event(PreStopFinished(workload=W, elapsed=1, container="a", exit_code=None, timed_out=True))
    log_event(ContainerExited(workload=W, elapsed=1, container="a", exit_code=137, graceful=False))
    failed = attrs.evolve(SUMMARY, errors=("app: removal failed",))
    log_event(DrainFinished(workload=W, elapsed=3, summary=failed))
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("WARNING", "demo/a: pre_stop hook failed (exit 3) (+1.000 s)"),
        ("WARNING", "demo/a: pre_stop hook cut off at the deadline (+1.000 s)"),
        ("WARNING", "demo/a: exited 137 after a kill (+1.000 s)"),
        ("ERROR", "demo: drain failed after 2.500 s: app: removal failed (+3.000 s)"),
    ]


class _ScriptedDriver:
    """Only what Deployer.delete touches: find, and a drain that emits the events above."""

    name = "scripted"

    async def find(self, names: Sequence[str]) -> Found:
        return Found(names=tuple(names))

    async def drain(
        self, found: Found, *, grace_period_seconds: int | None, emit: Emit
    ) -> list[DrainSummary]:
        for event, _ in EVENTS:
            emit(event)
            await anyio.lowlevel.checkpoint()
        return [SUMMARY]

    async def list(self, selector: Mapping[str, str] | None = None) -> list[object]:
        return []


@pytest.mark.anyio
async def test_the_deployer_logs_every_event_it_emits(caplog: pytest.LogCaptureFixture) -> None:
    """Deployer.delete: each event the driver emits is logged once, in order."""
    caplog.set_level(logging.DEBUG, logger="asyncdeploy")
    summary = await Deployer(_ScriptedDriver()).delete(W)  # type: ignore[arg-type]
    assert summary is SUMMARY
    logged = [r.event for r in caplog.records if r.name == "asyncdeploy"]  # type: ignore[attr-defined]
    assert logged == [type(e).__name__ for e, _ in EVENTS]


def test_quiet_by_default() -> None:
    """The library adds a NullHandler and no level: nothing reaches stderr unless configured."""
    assert any(isinstance(h, logging.NullHandler) for h in logger.handlers)
    assert logger.level == logging.NOTSET


@pytest.mark.parametrize(
    ("flags", "shown"),
    [
        pytest.param([], set(), id="quiet"),
        pytest.param(["-v"], {"SIGTERM sent"}, id="-v"),
        pytest.param(["-vv"], {"SIGTERM sent", "pre_stop hook started"}, id="-vv"),
    ],
)
def test_cli_verbosity_shows_records_on_stderr(flags: list[str], shown: set[str]) -> None:
    """-v shows INFO records on stderr, -vv DEBUG ones too; stdout stays clean."""

    def records() -> None:
        for event, _ in EVENTS:
            log_event(event)

    @main.command("emit-for-test")
    def emit_for_test() -> None:
        records()

    try:
        result = CliRunner().invoke(main, [*flags, "emit-for-test"])
    finally:
        main.commands.pop("emit-for-test")
        configure_cli_logging(0)
    assert result.exit_code == 0, result.output
    stderr = result.stderr
    for text in ("SIGTERM sent", "pre_stop hook started"):
        assert (text in stderr) == (text in shown), (flags, stderr)
    assert "SIGTERM sent" not in result.stdout
