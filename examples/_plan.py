"""The small workload the examples deploy (images built locally by ci/setup.sh)."""

from __future__ import annotations

from asyncdeploy import Container, WorkloadPlan


def example_plan(name: str, *, drain_seconds: int = 1) -> WorkloadPlan:
    """Two containers that each take ``drain_seconds`` to drain after SIGTERM."""
    return WorkloadPlan(
        name=name,
        labels={"asyncdeploy-demo": "1"},
        pause_image="asyncdeploy-test/pause:latest",
        termination_grace_period_seconds=10,
        containers=[
            Container(
                name=f"worker-{i}",
                image="asyncdeploy-test/busybox:latest",
                command=["graceful", f"worker-{i}", str(drain_seconds)],
                env={"MARKER_FILE": "/tmp/markers"},
            )
            for i in range(2)
        ],
    )
