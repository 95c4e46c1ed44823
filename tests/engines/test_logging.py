"""Deployer-side logging on real engines: a real drain, every step a structured record."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from asyncdeploy import Deployer
from tests.engines.helpers import graceful, plan, started

pytestmark = pytest.mark.anyio


async def test_a_real_drain_logs_each_step(
    deployer: Deployer,
    name: Callable[[str], str],
    markers: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """delete: DrainStarted ... DrainFinished as records of the "asyncdeploy" logger, with fields."""
    workload = name("log")
    await deployer.create(
        plan(workload, [graceful("app", 0.5, markers)], termination_grace_period_seconds=10)
    )
    # its shell has set its TERM trap (a SIGTERM 0.02 s after the create, before the trap,
    # ended it 143 on a loaded machine)
    await started(markers, "app", timeout=30)
    caplog.set_level(logging.DEBUG, logger="asyncdeploy")
    summary = await deployer.delete(workload)
    records: list[Any] = [r for r in caplog.records if r.name == "asyncdeploy"]
    assert records[0].event == "DrainStarted"
    assert records[-1].event == "DrainFinished"
    assert all(r.workload == workload for r in records)
    signal = [r for r in records if r.event == "SignalSent"]
    assert [(r.container, r.role, r.signal) for r in signal] == [("app", "run", "SIGTERM")]
    exited = [r for r in records if r.event == "ContainerExited" and r.container == "app"]
    assert exited and exited[0].levelno == logging.INFO and exited[0].exit_code == 0
    assert exited[0].elapsed >= signal[0].elapsed
    assert records[-1].getMessage().startswith(f"{workload}: drained in ")
    assert summary.count("exited") >= 1
