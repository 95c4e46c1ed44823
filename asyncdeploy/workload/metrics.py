"""The drain kit's metrics, named as Prometheus users query them.

One description (:func:`metric_families`) feeds both outputs: :func:`render_metrics`, the text
exposition format 0.0.4 the middleware serves when given a metrics path, and
:class:`asyncdeploy.workload.prometheus.DrainCollector` for an app's own prometheus_client
registry. With the default prefix:

==========================================  =========  ==============================================
``asyncdeploy_state{state}``                gauge      1 for the current state, 0 for the others
``asyncdeploy_in_flight_requests``          gauge      admitted requests not yet released
``asyncdeploy_requests_total{outcome}``     counter    completed, cut_at_deadline, client_disconnected,
                                                       failed, rejected_while_draining,
                                                       rejected_while_starting
``asyncdeploy_request_duration_seconds``    histogram  admission to release, every admitted request
``asyncdeploy_drain_duration_seconds``      histogram  drain start until in-flight reached zero
``asyncdeploy_live``                        gauge      1 unless the process is marked broken
``asyncdeploy_accepting``                   gauge      1 while new work is admitted (SERVING, or
                                                       DRAINING inside the propagation window)
``asyncdeploy_admitted_while_draining``     counter    admitted inside the propagation window
``_total``
``asyncdeploy_propagation_observed_seconds`` gauge     drain start until the last new request came
                                                       (after a drain began)
``asyncdeploy_propagation_window_seconds``  gauge      how long the window has been / was open
``asyncdeploy_propagation_window_closed``   gauge      1, labelled with the reason it closed
``{reason}``                                           (once closed)
==========================================  =========  ==============================================

Requests admitted so far = the four released outcomes + in flight.
"""

from __future__ import annotations

from typing import Literal

import attrs

from .histogram import HistogramSnapshot
from .state import DrainController, DrainState, DrainStatistics

__all__ = ["METRICS_CONTENT_TYPE", "MetricFamily", "Sample", "metric_families", "render_metrics"]

METRICS_CONTENT_TYPE = b"text/plain; version=0.0.4; charset=utf-8"

Kind = Literal["gauge", "counter", "histogram"]


@attrs.frozen
class Sample:
    """One line of a family: the full sample name, its labels and its value."""

    name: str
    labels: tuple[tuple[str, str], ...]
    value: float


@attrs.frozen
class MetricFamily:
    """``name`` is the family's name as in ``# TYPE`` (counters keep their ``_total``)."""

    name: str
    kind: Kind
    help: str
    samples: tuple[Sample, ...]


def _histogram(name: str, help_text: str, snapshot: HistogramSnapshot) -> MetricFamily:
    samples = [
        Sample(f"{name}_bucket", (("le", _number(bound)),), count)
        for bound, count in snapshot.buckets
    ]
    samples += [
        Sample(f"{name}_sum", (), snapshot.sum),
        Sample(f"{name}_count", (), snapshot.count),
    ]
    return MetricFamily(name, "histogram", help_text, tuple(samples))


def metric_families(
    controller: DrainController, *, prefix: str = "asyncdeploy"
) -> list[MetricFamily]:
    """The kit's metrics at this moment, every family with its help text."""
    stats = controller.statistics()
    outcomes = {
        "completed": stats.completed,
        "cut_at_deadline": stats.cut_at_deadline,
        "client_disconnected": stats.client_disconnected,
        "failed": stats.failed,
        "rejected_while_draining": stats.rejected_while_draining,
        "rejected_while_starting": stats.rejected_while_starting,
    }
    return [
        MetricFamily(
            f"{prefix}_state",
            "gauge",
            "Drain state machine: 1 for the current state, 0 for the others.",
            tuple(
                Sample(f"{prefix}_state", (("state", state.value),), int(stats.state is state))
                for state in DrainState
            ),
        ),
        MetricFamily(
            f"{prefix}_in_flight_requests",
            "gauge",
            "Admitted requests not yet released.",
            (Sample(f"{prefix}_in_flight_requests", (), stats.in_flight),),
        ),
        MetricFamily(
            f"{prefix}_requests_total",
            "counter",
            "Requests by how they ended; rejected ones were answered 503 without being admitted.",
            tuple(
                Sample(f"{prefix}_requests_total", (("outcome", outcome),), count)
                for outcome, count in outcomes.items()
            ),
        ),
        _histogram(
            f"{prefix}_request_duration_seconds",
            "Seconds from admission until the last response frame was written (or the end).",
            controller.request_durations(),
        ),
        _histogram(
            f"{prefix}_drain_duration_seconds",
            "Seconds from the drain start until no request was in flight.",
            controller.drain_durations(),
        ),
        MetricFamily(
            f"{prefix}_live",
            "gauge",
            "1 unless the process is marked broken.",
            (Sample(f"{prefix}_live", (), int(stats.broken_reason is None)),),
        ),
        *_window_families(stats, prefix),
    ]


def _window_families(stats: DrainStatistics, prefix: str) -> list[MetricFamily]:
    def gauge(name: str, help_text: str, value: float | None) -> MetricFamily:
        samples = () if value is None else (Sample(name, (), value),)
        return MetricFamily(name, "gauge", help_text, samples)

    window_seconds = stats.window_closed_after
    if window_seconds is None and stats.drain_started_at is not None:
        window_seconds = stats.drain_duration if stats.accepting else None
    reason = stats.window_close_reason
    return [
        gauge(
            f"{prefix}_accepting",
            "1 while new work is admitted: serving, or draining inside the propagation window.",
            int(stats.accepting),
        ),
        MetricFamily(
            f"{prefix}_admitted_while_draining_total",
            "counter",
            "Requests admitted after the drain began, inside the propagation window.",
            (Sample(f"{prefix}_admitted_while_draining_total", (), stats.admitted_while_draining),),
        ),
        gauge(
            f"{prefix}_propagation_observed_seconds",
            "Seconds from the drain start until the last new request arrived (the propagation "
            "actually observed; 0 if none came).",
            stats.propagation_observed,
        ),
        gauge(
            f"{prefix}_propagation_window_seconds",
            "Seconds the propagation window has been (or was) open.",
            window_seconds,
        ),
        MetricFamily(
            f"{prefix}_propagation_window_closed",
            "gauge",
            "1 once the propagation window closed, labelled with why.",
            ()
            if reason is None
            else (Sample(f"{prefix}_propagation_window_closed", (("reason", reason),), 1),),
        ),
    ]


def _number(value: float) -> str:
    if value == float("inf"):
        return "+Inf"
    return str(value) if isinstance(value, int) else repr(value)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render_metrics(controller: DrainController, *, prefix: str = "asyncdeploy") -> str:
    """The text exposition format 0.0.4; every family has HELP and TYPE lines."""
    lines: list[str] = []
    for family in metric_families(controller, prefix=prefix):
        lines.append(f"# HELP {family.name} {family.help}")
        lines.append(f"# TYPE {family.name} {family.kind}")
        for sample in family.samples:
            labels = ",".join(f'{key}="{_escape(value)}"' for key, value in sample.labels)
            braced = f"{{{labels}}}" if labels else ""
            lines.append(f"{sample.name}{braced} {_number(sample.value)}")
    return "\n".join(lines) + "\n"
