"""The termination budget lint."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from asyncdeploy.cli import main
from asyncdeploy.plan import WorkloadPlan
from asyncdeploy.plan.lint import lint_plan

READY = {"http": {"path": "/ready", "port": 8080}}


def plan(grace: int, pre_stop: list[str] | None = None, **checks: Any) -> WorkloadPlan:
    container: dict[str, Any] = {
        "name": "server",
        "image": "i",
        "checks": {"readiness": READY, **checks},
    }
    if pre_stop:
        container["pre_stop"] = pre_stop
    return WorkloadPlan.from_mapping(
        {"name": "llm", "termination_grace_period_seconds": grace, "containers": [container]}
    )


DRAIN = ["asyncdeploy", "drain", "--propagation-wait", "10s", "--timeout=60s"]


def test_a_sufficient_budget_has_no_findings() -> None:
    assert lint_plan(plan(120, DRAIN)) == []


def test_grace_shorter_than_propagation_plus_drain_is_an_error() -> None:
    [finding] = lint_plan(plan(60, DRAIN))
    assert finding.level == "error"
    assert finding.path == "termination_grace_period_seconds"


def test_grace_without_margin_is_a_warning() -> None:
    [finding] = lint_plan(plan(75, DRAIN))
    assert finding.level == "warning"
    assert "keep 15 s" in finding.message


def test_request_timeout_reaching_the_grace_period_is_an_error() -> None:
    findings = lint_plan(plan(120, DRAIN), request_timeout_seconds=110)
    assert [f.level for f in findings] == ["error"]


def test_missing_readiness_and_shared_liveness_are_warnings() -> None:
    shared = lint_plan(plan(120, DRAIN, liveness=READY))
    assert [f.path for f in shared] == ["containers[0].checks.liveness"]
    bare = WorkloadPlan.from_mapping({"name": "x", "containers": [{"name": "a", "image": "i"}]})
    assert [f.path for f in lint_plan(bare)] == ["containers[0].checks.readiness"]


@pytest.mark.parametrize(("grace", "code"), [(120, 0), (60, 1)])
def test_cli_exit_code(tmp_path: Path, grace: int, code: int) -> None:
    path = tmp_path / "plan.yaml"
    path.write_text(
        "name: llm\n"
        f"termination_grace_period_seconds: {grace}\n"
        "containers:\n"
        "  - name: server\n    image: i\n"
        "    pre_stop: [asyncdeploy, drain, --propagation-wait, 10s, --timeout, 60s]\n"
        "    checks: {readiness: {http: {path: /ready, port: 8080}}}\n"
    )
    result = CliRunner().invoke(main, ["lint", str(path)])
    assert result.exit_code == code, result.output
