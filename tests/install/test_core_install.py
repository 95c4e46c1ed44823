"""The core install: without any extra, the plan, the CLI shell and the server kit work, and a
driver says which extra it needs.

Builds a fresh venv (about 20 s): the package with ``--no-deps`` plus exactly the core
dependencies pyproject.toml declares; then a second step removes click and PyYAML to show the
server kit needs only anyio and attrs.
"""

from __future__ import annotations

import os
import re
import subprocess
import tomllib
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~\[ ;]", requirement, maxsplit=1)[0].lower()


@pytest.fixture(scope="module")
def core_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("core-venv")
    venv.create(where, with_pip=True)
    pip = [
        str(where / "bin" / "python"),
        "-m",
        "pip",
        "install",
        "-q",
        "--disable-pip-version-check",
    ]
    subprocess.run([*pip, "--no-deps", str(ROOT)], check=True, capture_output=True)
    subprocess.run([*pip, *PROJECT["dependencies"]], check=True, capture_output=True)
    return where


# Variables that name an engine: unset, as on a newcomer's machine (CI sets them for the engines)
ENGINE_VARIABLES = ("DOCKER_HOST", "CONTAINER_HOST", "ASYNCDEPLOY_DRIVER", "KUBECONFIG")


def run(venv_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ENGINE_VARIABLES}
    return subprocess.run(args, capture_output=True, text=True, cwd=venv_dir, env=env, check=False)


def test_the_core_is_four_small_packages() -> None:
    assert sorted(_name(r) for r in PROJECT["dependencies"]) == [
        "anyio",
        "attrs",
        "click",
        "pyyaml",
    ]
    extras = PROJECT["optional-dependencies"]
    assert {_name(r) for r in extras["docker"]} == {"aiodocker", "aiohttp"}
    assert {_name(r) for r in extras["kubernetes"]} == {"kubernetes-asyncio", "aiohttp"}


def test_core_install_imports_and_runs_the_cli(core_venv: Path) -> None:
    python = str(core_venv / "bin" / "python")
    probe = (
        "import sys, asyncdeploy, asyncdeploy.workload, asyncdeploy.plan.lint;"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'aiohttp', 'aiodocker',"
        " 'kubernetes_asyncio'}))"
    )
    done = run(core_venv, python, "-c", probe)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stderr
    done = run(core_venv, str(core_venv / "bin" / "asyncdeploy"), "--help")
    assert done.returncode == 0 and "replace" in done.stdout, done.stderr


def test_a_driver_without_its_extra_names_the_pip_command(core_venv: Path) -> None:
    cli = str(core_venv / "bin" / "asyncdeploy")
    done = run(core_venv, cli, "--driver", "kubernetes", "list")
    assert done.returncode == 2, done.stderr
    assert "pip install 'asyncdeploy[kubernetes]'" in done.stderr
    assert "Traceback" not in done.stderr
    done = run(core_venv, cli, "--driver", "podman", "list")
    assert done.returncode == 2 and "pip install 'asyncdeploy[docker]'" in done.stderr
    done = run(core_venv, cli, "list")  # auto-detection: no driver installed, each reason given
    assert done.returncode == 2 and done.stderr.count("pip install") >= 3, done.stderr
    assert "no driver is installed" in done.stderr and "Traceback" not in done.stderr
    done = run(core_venv, cli, "verify")  # its traffic client needs an extra too
    assert done.returncode == 2, done.stderr
    assert "pip install 'asyncdeploy[docker]'" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_server_kit_needs_only_anyio_and_attrs(core_venv: Path) -> None:
    python = str(core_venv / "bin" / "python")
    removed = run(core_venv, python, "-m", "pip", "uninstall", "-q", "-y", "click", "PyYAML")
    assert removed.returncode == 0, removed.stderr
    done = run(
        core_venv, python, "-c", "import asyncdeploy.workload as w; print(w.DrainController)"
    )
    assert done.returncode == 0 and "DrainController" in done.stdout, done.stderr
