"""The CLI's usage errors and exit codes, without an engine."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from asyncdeploy.cli import main


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


def test_invalid_plan_exits_2_naming_the_field(runner: CliRunner, tmp_path: Path) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text("name: x\ncontainers:\n  - {name: a, image: i, resources: {memory: 1_0Mi}}\n")
    result = runner.invoke(main, ["--driver", "docker", "create", "-f", str(plan)])
    assert result.exit_code == 2
    assert "containers[0].resources.memory" in result.output


def test_unreachable_engine_exits_3(
    runner: CliRunner, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no.sock")
    result = runner.invoke(main, ["--driver", "docker", "list"])
    assert result.exit_code == 3
    assert "no docker engine answers" in result.output


def test_negative_grace_is_a_usage_error(runner: CliRunner) -> None:
    result = runner.invoke(main, ["delete", "x", "--grace-period-seconds", "-1"])
    assert result.exit_code == 2


@pytest.mark.parametrize("selector", ["", ",", "team!", "team in ml", "=ml", "Team_/x=1"])
def test_bad_selector_is_a_usage_error(runner: CliRunner, selector: str) -> None:
    """An invalid or empty selector stops delete-all before any engine is opened."""
    result = runner.invoke(main, ["--driver", "docker", "delete-all", "--selector", selector])
    assert result.exit_code == 2, result.output
    assert "Invalid value for '--selector'" in result.output


def test_delete_all_needs_a_selector_or_all(runner: CliRunner) -> None:
    result = runner.invoke(main, ["--driver", "docker", "delete-all"])
    assert result.exit_code == 2
    assert "exactly one of --selector and --all" in result.output
    both = runner.invoke(main, ["delete-all", "--all", "--selector", "a=b"])
    assert both.exit_code == 2


def test_unknown_driver_is_a_usage_error(runner: CliRunner) -> None:
    result = runner.invoke(main, ["--driver", "kuberentes", "list"])
    assert result.exit_code == 2


def test_driver_comes_from_the_environment(
    runner: CliRunner, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("ASYNCDEPLOY_DRIVER", "podman")
    monkeypatch.setenv("CONTAINER_HOST", f"unix://{tmp_path}/no.sock")
    result = runner.invoke(main, ["list"])
    assert result.exit_code == 3
    assert "podman" in result.output
