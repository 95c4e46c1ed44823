"""Engine choice (issue 8 item 10): an engine the user named that does not answer is exit 3,
never a fallback to another engine; an address that is not one is a clear exit 3 too."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from asyncdeploy.drivers.engine import _api
from tests import cli_runner


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for variable in ("DOCKER_HOST", "CONTAINER_HOST", "ASYNCDEPLOY_DRIVER"):
        monkeypatch.delenv(variable, raising=False)
    return monkeypatch


@pytest.fixture
def silent_socket(tmp_path: Path) -> Iterator[Path]:
    """A unix socket that accepts connections (the kernel's backlog) and never answers."""
    path = tmp_path / "silent.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(str(path))
        server.listen(16)
        yield path


def invoke(*args: str) -> tuple[int, str]:
    result = cli_runner.invoke(*args)
    return result.exit_code, result.output


@pytest.mark.parametrize("driver", [[], ["--driver", "docker"]])
def test_garbage_docker_host_is_a_clear_exit_3(env: pytest.MonkeyPatch, driver: list[str]) -> None:
    env.setenv("DOCKER_HOST", "garbage://x")
    code, output = invoke(*driver, "list")
    assert code == 3, output
    assert "'garbage://x' is not an engine address" in output
    assert "DOCKER_HOST" in output and "Traceback" not in output


def test_a_missing_socket_named_by_docker_host_is_exit_3(
    env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    env.setenv("DOCKER_HOST", f"unix://{tmp_path}/missing.sock")
    env.setenv("CONTAINER_HOST", f"unix://{tmp_path}/other.sock")
    code, output = invoke("list")
    assert code == 3, output
    assert "docker" in output and "missing.sock" in output


@pytest.mark.parametrize("variable", ["DOCKER_HOST", "CONTAINER_HOST"])
def test_a_socket_that_never_answers_is_exit_3(
    env: pytest.MonkeyPatch, silent_socket: Path, variable: str
) -> None:
    env.setattr(_api, "PING_TIMEOUT", 1.0)
    env.setenv(variable, f"unix://{silent_socket}")
    code, output = invoke("list")
    assert code == 3, output
    assert "engine answers" in output and str(silent_socket) in output
