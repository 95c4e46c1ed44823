"""Engine choice with real engines up (issue 8 item 10): naming an engine that does not answer
never falls back to one that does."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from asyncdeploy.cli import main

pytestmark = [pytest.mark.docker, pytest.mark.podman, pytest.mark.engine]


@pytest.fixture
def engines_up() -> None:
    if not (os.environ.get("DOCKER_HOST") and os.environ.get("CONTAINER_HOST")):
        pytest.skip("needs DOCKER_HOST and CONTAINER_HOST for two answering engines")
    assert CliRunner().invoke(main, ["--driver", "podman", "list"]).exit_code == 0
    assert CliRunner().invoke(main, ["--driver", "docker", "list"]).exit_code == 0


@pytest.mark.usefixtures("engines_up")
def test_a_dead_docker_host_does_not_fall_back_to_podman(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/dead.sock")
    result = CliRunner().invoke(main, ["list", "-o", "json"])
    assert result.exit_code == 3, result.output
    assert "no docker engine answers" in result.output


@pytest.mark.usefixtures("engines_up")
def test_a_dead_container_host_does_not_fall_back_to_docker(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("DOCKER_HOST")  # Docker still answers on its default socket
    monkeypatch.setenv("CONTAINER_HOST", f"unix://{tmp_path}/dead.sock")
    result = CliRunner().invoke(main, ["list", "-o", "json"])
    assert result.exit_code == 3, result.output
    assert "no podman engine answers" in result.output
