"""Metrics: Prometheus names, the text format as prometheus_client parses it, the endpoint off
the app's routes by default, and the collector for an app's own registry."""

from __future__ import annotations

import math
import re
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from asyncdeploy.workload import DrainController, DrainMiddleware, HealthPaths, render_metrics
from asyncdeploy.workload.prometheus import DrainCollector

pytestmark = pytest.mark.anyio


def _parse(text: str) -> dict[str, Any]:
    """Families by name, parsed by prometheus_client's own parser (it rejects malformed text)."""
    return {family.name: family for family in text_string_to_metric_families(text)}


def _value(families: dict[str, Any], sample: str, **labels: str) -> float:
    values = [
        s.value
        for family in families.values()
        for s in family.samples
        if s.name == sample and s.labels == labels
    ]
    assert len(values) == 1, (sample, labels, values)
    return float(values[0])


def _exercise(controller: DrainController) -> None:
    """Two completed requests, one in flight, a drain, one rejection."""
    for _ in range(2):
        admitted = controller.try_admit()
        assert admitted is not None
        admitted.release()
    assert controller.try_admit() is not None  # stays in flight
    controller.begin_drain()
    assert controller.try_admit() is None


def test_metrics_text_format_and_values(controller: DrainController) -> None:
    """HELP and TYPE for every family, one requests_total by outcome, histograms in seconds."""
    _exercise(controller)
    text = render_metrics(controller)
    assert text.endswith("\n")
    families = _parse(text)
    assert {name: family.type for name, family in families.items()} == {
        "asyncdeploy_state": "gauge",
        "asyncdeploy_in_flight_requests": "gauge",
        "asyncdeploy_requests": "counter",  # the parser's family name drops _total
        "asyncdeploy_request_duration_seconds": "histogram",
        "asyncdeploy_drain_duration_seconds": "histogram",
        "asyncdeploy_live": "gauge",
        "asyncdeploy_accepting": "gauge",
        "asyncdeploy_admitted_while_draining": "counter",
        "asyncdeploy_propagation_observed_seconds": "gauge",
        "asyncdeploy_propagation_window_seconds": "gauge",
        "asyncdeploy_propagation_window_closed": "gauge",
    }
    assert all(family.documentation for family in families.values())
    helps = re.findall(r"^# HELP (\S+) ", text, re.MULTILINE)
    types = re.findall(r"^# TYPE (\S+) ", text, re.MULTILINE)
    assert helps == types and len(types) == 11
    assert "asyncdeploy_requests_total" in types  # TYPE names the counter with its suffix

    assert _value(families, "asyncdeploy_state", state="draining") == 1
    assert _value(families, "asyncdeploy_state", state="serving") == 0
    assert _value(families, "asyncdeploy_in_flight_requests") == 1
    total = "asyncdeploy_requests_total"
    assert _value(families, total, outcome="completed") == 2
    assert _value(families, total, outcome="rejected_while_draining") == 1
    assert _value(families, total, outcome="cut_at_deadline") == 0
    assert len(families["asyncdeploy_requests"].samples) == 6  # one per outcome, not 7 counters

    requests = "asyncdeploy_request_duration_seconds"
    assert _value(families, requests + "_count") == 2  # the one in flight is not over yet
    assert _value(families, requests + "_bucket", le="+Inf") == 2
    assert 0 <= _value(families, requests + "_sum") < 1
    assert _value(families, "asyncdeploy_drain_duration_seconds_count") == 0  # not drained yet
    assert _value(families, "asyncdeploy_live") == 1


def test_drain_duration_is_observed_once_when_drained(controller: DrainController) -> None:
    """The drain histogram counts the drain when in-flight reaches zero, in seconds."""
    admitted = controller.try_admit()
    assert admitted is not None
    controller.begin_drain()
    admitted.release()
    admitted.release()  # a second release changes nothing
    families = _parse(render_metrics(controller))
    drain = "asyncdeploy_drain_duration_seconds"
    assert _value(families, drain + "_count") == 1
    assert _value(families, drain + "_bucket", le="0.1") == 1
    buckets = [s for s in families[drain].samples if s.name == drain + "_bucket"]
    assert [s.labels["le"] for s in buckets][-1] == "+Inf"
    counts = [s.value for s in buckets]
    assert counts == sorted(counts)  # cumulative
    assert _value(families, "asyncdeploy_request_duration_seconds_count") == 1


def test_collector_exposes_the_same_samples_in_a_registry(controller: DrainController) -> None:
    """DrainCollector in an app's prometheus_client registry gives what render_metrics gives."""
    _exercise(controller)
    registry = CollectorRegistry()
    registry.register(DrainCollector(controller))
    from_registry = _parse(generate_latest(registry).decode())
    ours = _parse(render_metrics(controller))
    assert from_registry.keys() == ours.keys()
    for name, family in ours.items():
        assert from_registry[name].type == family.type
        theirs = {
            (s.name, tuple(sorted(s.labels.items()))): s.value for s in from_registry[name].samples
        }
        mine = {(s.name, tuple(sorted(s.labels.items()))): s.value for s in family.samples}
        assert theirs.keys() == mine.keys(), name
        for key, value in mine.items():
            assert math.isclose(theirs[key], value, rel_tol=1e-9), key


async def test_metrics_path_is_off_by_default_so_the_app_serves_its_own(
    controller: DrainController, exchange: Any
) -> None:
    """Behind the middleware, the app's own /metrics is reached (as a counted request)."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        body = b"vllm_requests 1\n"
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": body, "more_body": False})

    ex = await exchange(DrainMiddleware(app, controller), "/metrics").run()
    assert ex.status == 200
    assert ex.body == b"vllm_requests 1\n"
    assert controller.statistics().completed == 1


async def test_metrics_endpoint_on_a_path_of_its_own(
    controller: DrainController, exchange: Any
) -> None:
    """A configured path answers with the Prometheus content type and is not counted as work."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        raise AssertionError("the app must not see the kit's metrics path")

    middleware = DrainMiddleware(app, controller, paths=HealthPaths(metrics="/-/metrics"))
    ex = await exchange(middleware, "/-/metrics").run()
    assert ex.status == 200
    assert ex.headers[b"content-type"].startswith(b"text/plain; version=0.0.4")
    families = _parse(ex.body.decode())
    assert _value(families, "asyncdeploy_requests_total", outcome="completed") == 0
    assert controller.statistics().admitted == 0
