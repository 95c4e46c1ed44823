"""The package surface: explicit exports, and nothing happening at import time."""

from __future__ import annotations

import subprocess
import sys
import types
from pathlib import Path

import asyncdeploy
from asyncdeploy import workload
from asyncdeploy.errors import AsyncDeployError


def test_all_names_exist_and_are_sorted() -> None:
    """__all__ lists exactly the public names, each importable."""
    assert workload.__all__ == sorted(workload.__all__, key=lambda n: (not n.isupper(), n))
    for name in workload.__all__:
        assert getattr(workload, name) is not None, name
    public = {
        name
        for name, value in vars(workload).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert public - {"annotations"} == set(workload.__all__)
    assert issubclass(workload.WorkloadError, AsyncDeployError)


def test_import_installs_no_signal_handler_and_needs_no_uvicorn() -> None:
    """Importing the kit leaves SIGTERM alone and does not pull in uvicorn or engine SDKs."""
    code = (
        "import signal, sys, asyncdeploy.workload; "
        "assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL; "
        "heavy = {'uvicorn', 'aiodocker', 'aiohttp', 'kubernetes_asyncio'} & set(sys.modules); "
        "assert not heavy, heavy"
    )
    root = Path(asyncdeploy.__file__).resolve().parent.parent
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr


def test_the_kit_imports_no_deployer_driver_or_cli() -> None:
    """Inside the package the kit leans only on the lower layers (errors, durations)."""
    import ast

    allowed = {"asyncdeploy.errors", "asyncdeploy.durations"}
    for path in Path(workload.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            inside = [n for n in names if n.split(".")[0] == "asyncdeploy"]
            assert set(inside) <= allowed, (path.name, inside)
