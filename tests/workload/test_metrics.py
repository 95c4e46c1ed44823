"""Prometheus text exposition."""

from __future__ import annotations

import re
from typing import Any

import pytest

from asyncdeploy.workload import DrainController, DrainMiddleware, render_metrics

pytestmark = pytest.mark.anyio

_SAMPLE = re.compile(r"^([a-z_]+)(\{[a-z_]+=\"[a-z_]+\"\})? (-?[0-9.]+(?:e[-+]?[0-9]+)?)$")


def _samples(text: str) -> dict[str, float]:
    samples = {}
    for line in text.splitlines():
        if line.startswith("#"):
            assert re.match(r"^# (HELP|TYPE) [a-z_]+ .+$", line), line
            continue
        match = _SAMPLE.match(line)
        assert match, f"not a valid sample line: {line!r}"
        samples[match.group(1) + (match.group(2) or "")] = float(match.group(3))
    return samples


def test_metrics_text_format_and_values(controller: DrainController) -> None:
    """Every family has HELP/TYPE, counters end in _total, the values match the controller."""
    for _ in range(2):
        admitted = controller.try_admit()
        assert admitted is not None
        admitted.release()
    in_flight = controller.try_admit()
    controller.begin_drain()
    controller.try_admit()  # rejected
    text = render_metrics(controller.statistics())
    assert text.endswith("\n")
    samples = _samples(text)
    prefix = "asyncdeploy_workload_"
    assert samples[prefix + 'state{state="draining"}'] == 1
    assert samples[prefix + 'state{state="serving"}'] == 0
    assert samples[prefix + "in_flight_requests"] == 1
    assert samples[prefix + "requests_admitted_total"] == 3
    assert samples[prefix + "requests_completed_total"] == 2
    assert samples[prefix + "requests_rejected_while_draining_total"] == 1
    assert samples[prefix + "requests_cut_at_deadline_total"] == 0
    assert samples[prefix + "drain_duration_seconds"] >= 0
    types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.MULTILINE))
    assert all(kind == "counter" for name, kind in types.items() if name.endswith("_total"))
    assert types[prefix + "in_flight_requests"] == "gauge"
    assert in_flight is not None


async def test_metrics_endpoint(controller: DrainController, exchange: Any) -> None:
    """/metrics answers with the Prometheus content type and is not counted as work."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        raise AssertionError("the app must not see /metrics")

    ex = await exchange(DrainMiddleware(app, controller), "/metrics").run()
    assert ex.status == 200
    assert ex.headers[b"content-type"].startswith(b"text/plain; version=0.0.4")
    assert _samples(ex.body.decode())["asyncdeploy_workload_requests_admitted_total"] == 0
