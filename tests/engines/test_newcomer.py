"""A newcomer's path, verbatim: the README's install block in a fresh venv, then its first-use
block against Docker, then the project's main job (``bash ci/demo.sh``), each line as written.

The install needs the package registry (pip); the first use needs the demo image that
ci/setup.sh builds. ``bash ci/test.sh``, the README's other project command, is what CI runs.
"""

from __future__ import annotations

import os
import re
import subprocess
import venv
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.engines.conftest import PAUSE

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def block(name: str) -> list[str]:
    """The command lines of the README's block marked ``name``, comments dropped."""
    [code] = re.findall(rf"<!-- snippet: {name} -->\n```bash\n(.*?)```", README, re.DOTALL)
    return [line.split("  #")[0].strip() for line in code.splitlines() if line.strip()]


def sh(line: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", line], cwd=ROOT, env=env, capture_output=True, text=True, check=False
    )


@pytest.fixture(scope="module")
def newcomer_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A fresh venv with the README's install lines run in it, in order, as written."""
    where = tmp_path_factory.mktemp("newcomer") / "venv"
    venv.create(where, with_pip=True)
    env = {**os.environ, "PATH": f"{where / 'bin'}:{os.environ['PATH']}", "VIRTUAL_ENV": str(where)}
    env.pop("PYTHONPATH", None)
    for line in block("install"):
        done = sh(line, env)
        assert done.returncode == 0, (line, done.stdout, done.stderr)
    return env


def test_the_install_block_installs_the_cli(newcomer_env: dict[str, str]) -> None:
    done = sh("command -v asyncdeploy && asyncdeploy --version", newcomer_env)
    assert done.returncode == 0 and str(Path(newcomer_env["VIRTUAL_ENV"])) in done.stdout


@pytest.fixture
def default_pause_image() -> Iterator[None]:
    """The plan's default pause image, which a newcomer's engine pulls from registry.k8s.io:
    no registry is reachable here, so the locally built stand-in is tagged so for the test."""
    default = "registry.k8s.io/pause:3.10"
    inspect = ["docker", "image", "inspect", default]
    had = subprocess.run(inspect, capture_output=True, check=False).returncode
    if had != 0:
        subprocess.run(["docker", "tag", PAUSE, default], check=True, capture_output=True)
    yield
    if had != 0:
        subprocess.run(["docker", "rmi", default], capture_output=True, check=False)


@pytest.mark.parametrize("engine", ["docker"])
@pytest.mark.usefixtures("default_pause_image")
def test_the_first_use_block_serves_and_drains(newcomer_env: dict[str, str], engine: str) -> None:
    """Every line exits 0; the server answers on the published port; the delete drains it."""
    env = {**newcomer_env, "ASYNCDEPLOY_DRIVER": engine}
    lines = block("first-use")
    assert any(line.startswith("curl") for line in lines)
    try:
        outputs = []
        for line in lines:
            done = sh(line, env)
            assert done.returncode == 0, (line, done.stdout, done.stderr)
            outputs.append(done.stdout + done.stderr)
        listed = outputs[next(i for i, line in enumerate(lines) if line == "asyncdeploy list")]
        assert "hello" in listed and "18000->8080" in listed
        answered = outputs[next(i for i, line in enumerate(lines) if line.startswith("curl"))]
        assert answered.strip(), "the demo server answered nothing"
        assert "DrainFinished" in outputs[-1] or "exited" in outputs[-1], outputs[-1]
    finally:
        sh("asyncdeploy delete hello --grace-period-seconds 0 >/dev/null 2>&1 || true", env)


def test_the_project_commands_are_the_ones_ci_and_the_demo_run() -> None:
    """``bash ci/test.sh`` is exactly what .ci/run runs; ``bash ci/demo.sh`` runs the main job
    to a passing end (the demo's table: nothing lost)."""
    lines = block("project")
    assert lines == ["bash ci/demo.sh", "bash ci/test.sh"]
    assert "exec bash ci/test.sh" in (ROOT / ".ci" / "run").read_text()
    done = sh(lines[0], {**os.environ})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "PASS" in done.stdout or "passed" in done.stdout.lower(), done.stdout[-3000:]
