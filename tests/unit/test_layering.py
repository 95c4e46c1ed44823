"""The house's layering, as pyproject.toml's import-linter contracts state it, holds on the code,
and the check is real: a deliberate violation in a copy of the package breaks it."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("importlinter")

ROOT = Path(__file__).resolve().parents[2]


LINT_IMPORTS = "import sys; from importlinter.cli import lint_imports_command as c; sys.exit(c())"


def lint_imports(where: Path) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` with the project's contracts, on the package found at ``where``."""
    return subprocess.run(
        [
            sys.executable,
            "-c",
            LINT_IMPORTS,
            "--config",
            str(ROOT / "pyproject.toml"),
            "--no-cache",
        ],
        cwd=where,
        env={"PYTHONPATH": str(where), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
    )


def test_the_contracts_are_kept() -> None:
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.parametrize(
    ("module", "violation", "contract"),
    [
        ("asyncdeploy/workload/state.py", "import asyncdeploy.deployer", "server kit"),
        ("asyncdeploy/plan/_model.py", "import asyncdeploy.drivers.registry", "values"),
        ("asyncdeploy/drivers/engine/_spec.py", "import asyncdeploy.cli", "CLI on top"),
        # the rooms the layers name since issue 33: each below the one that hands it work
        ("asyncdeploy/_event_stream.py", "import asyncdeploy._operations", "CLI on top"),
        ("asyncdeploy/_operations.py", "import asyncdeploy._reconcile", "CLI on top"),
        ("asyncdeploy/testing/_driver.py", "import asyncdeploy.deployer", "CLI on top"),
        ("asyncdeploy/drivers/base.py", "import asyncdeploy.testing", "CLI on top"),
        ("asyncdeploy/_kill.py", "import asyncdeploy.drivers.base", "CLI on top"),
        # the drain core: no I/O library, the standard library's asyncio included
        ("asyncdeploy/drivers/engine/_drain/core.py", "import anyio", "no I/O library"),
        ("asyncdeploy/drivers/engine/_drain/protocol.py", "import asyncio", "no I/O library"),
        ("asyncdeploy/drivers/engine/_drain/follow.py", "import aiodocker", "no I/O library"),
    ],
)
def test_a_deliberate_violation_breaks_a_contract(
    tmp_path: Path, module: str, violation: str, contract: str
) -> None:
    shutil.copytree(ROOT / "asyncdeploy", tmp_path / "asyncdeploy")
    target = tmp_path / module
    target.write_text(target.read_text() + f"\n{violation}  # noqa\n")
    result = lint_imports(tmp_path)
    assert result.returncode != 0
    # a contract with ignored imports says so after its verdict: "... BROKEN (1 ignored import)"
    broken = [line for line in result.stdout.splitlines() if " BROKEN" in line]
    assert any(contract in line for line in broken), result.stdout
