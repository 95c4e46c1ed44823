"""A newcomer's path, verbatim: the README's install block in a fresh venv, then its first-use
block against Docker, then the project's main job (``bash ci/demo.sh``), each line as written.

The install needs the package registry (pip); the first use needs the demo image that
ci/setup.sh builds. ``bash ci/test.sh``, the README's other project command, is what CI runs.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import venv
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.engines.conftest import PAUSE, PYTHON

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


DEFAULT_BASE = f"docker.io/library/python:{sys.version_info[0]}.{sys.version_info[1]}-slim-bookworm"
DEFAULT_PAUSE = "registry.k8s.io/pause:3.10"


@contextmanager
def bases_file(tmp_path: Path) -> Iterator[Path]:
    """``asyncdeploy-bases.tar`` as the README says to make it where a registry answers (``docker
    save`` of the default base and pause images), with neither name on the engine: no registry is
    reachable here, so the project's local stand-ins are saved under those names. The names are
    removed again afterwards unless the engine had them."""
    tar = tmp_path / "user" / "asyncdeploy-bases.tar"
    tar.parent.mkdir()
    had = {
        n: _run(["docker", "image", "inspect", n]).returncode == 0
        for n in (DEFAULT_BASE, DEFAULT_PAUSE)
    }
    for name, local in ((DEFAULT_BASE, PYTHON), (DEFAULT_PAUSE, PAUSE)):
        assert _run(["docker", "tag", local, name]).returncode == 0
    saved = _run(["docker", "save", "-o", str(tar), DEFAULT_BASE, DEFAULT_PAUSE])
    assert saved.returncode == 0, saved.stderr
    for name in (DEFAULT_BASE, DEFAULT_PAUSE):
        if not had[name]:
            _run(["docker", "rmi", name])
    try:
        yield tar
    finally:
        for name in (DEFAULT_BASE, DEFAULT_PAUSE):
            if not had[name]:
                _run(["docker", "rmi", name])


@pytest.fixture
def bases_as_a_file(tmp_path: Path) -> Iterator[Path]:
    with bases_file(tmp_path) as tar:
        yield tar


def _run(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, check=False)


@pytest.mark.parametrize("engine", ["docker"])
def test_the_first_use_block_serves_and_drains(
    newcomer_env: dict[str, str], engine: str, bases_as_a_file: Path
) -> None:
    """Every line exits 0; the server answers on the published port; the delete drains it. The
    plan's default pause image comes in as the README's offline block brings it (no registry is
    reachable here)."""
    env = {**newcomer_env, "ASYNCDEPLOY_DRIVER": engine}
    [load] = block("offline")
    loaded = subprocess.run(
        ["bash", "-c", load],
        cwd=bases_as_a_file.parent,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert loaded.returncode == 0 and DEFAULT_PAUSE in loaded.stdout, loaded.stderr
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
