"""Prometheus text exposition (format 0.0.4) of :class:`DrainStatistics`."""

from __future__ import annotations

from .state import DrainState, DrainStatistics

__all__ = ["METRICS_CONTENT_TYPE", "render_metrics"]

METRICS_CONTENT_TYPE = b"text/plain; version=0.0.4; charset=utf-8"


def _number(value: float) -> str:
    return str(value) if isinstance(value, int) else repr(value)


def render_metrics(stats: DrainStatistics, *, prefix: str = "asyncdeploy_workload") -> str:
    """Render the drain metrics; every family has HELP and TYPE lines."""
    lines: list[str] = []

    def family(name: str, kind: str, help_text: str, samples: list[tuple[str, float]]) -> None:
        full = f"{prefix}_{name}"
        lines.append(f"# HELP {full} {help_text}")
        lines.append(f"# TYPE {full} {kind}")
        lines.extend(f"{full}{labels} {_number(value)}" for labels, value in samples)

    family(
        "state",
        "gauge",
        "Drain state machine: 1 for the current state, 0 for the others.",
        [(f'{{state="{state.value}"}}', int(stats.state is state)) for state in DrainState],
    )
    family(
        "in_flight_requests",
        "gauge",
        "Admitted requests not yet released.",
        [("", stats.in_flight)],
    )
    counters = [
        ("admitted", stats.admitted, "Requests admitted."),
        ("completed", stats.completed, "Responses written completely."),
        (
            "rejected_while_draining",
            stats.rejected_while_draining,
            "Requests answered 503 while draining.",
        ),
        (
            "rejected_while_starting",
            stats.rejected_while_starting,
            "Requests answered 503 before serving.",
        ),
        ("cut_at_deadline", stats.cut_at_deadline, "Responses ended early at the drain deadline."),
        (
            "client_disconnected",
            stats.client_disconnected,
            "Requests whose client went away first.",
        ),
        ("failed", stats.failed, "Requests whose handler failed before completing the response."),
    ]
    for name, value, help_text in counters:
        family(f"requests_{name}_total", "counter", help_text, [("", value)])
    family(
        "drain_duration_seconds",
        "gauge",
        "Seconds from the drain start until in-flight reached zero (so far, while draining); 0 before.",
        [("", float(stats.drain_duration or 0.0))],
    )
    family(
        "live",
        "gauge",
        "1 unless the process is marked broken.",
        [("", int(stats.broken_reason is None))],
    )
    return "\n".join(lines) + "\n"
