"""The package surface: explicit exports, and nothing happening at import time."""

from __future__ import annotations

import subprocess
import sys
import types
from pathlib import Path

import pytest

import asyncdeploy
from asyncdeploy import workload
from asyncdeploy._errors import AsyncDeployError


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
        "import signal, sys, asyncdeploy.workload as w; "
        "[getattr(w, name) for name in w.__all__]; "  # every name loaded (the root is lazy)
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
    """Inside the package the kit leans only on the lower layers (errors, durations, the backoff)."""
    import ast

    allowed = {"asyncdeploy._errors", "asyncdeploy.durations", "asyncdeploy._backoff"}
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


def test_importing_the_kit_loads_no_deployer_module() -> None:
    """The package root is lazy (PEP 562): a server that imports the kit, and uses every name of
    it, loads only the kit and the lower layers it leans on, never the deployer, the plan, the
    drivers or the selectors."""
    code = (
        "import sys, asyncdeploy.workload as w; "
        "[getattr(w, name) for name in w.__all__]; "
        "print(' '.join(sorted(m for m in sys.modules if m.startswith('asyncdeploy'))))"
    )
    root = Path(asyncdeploy.__file__).resolve().parent.parent
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True
    )
    loaded = set(result.stdout.split())
    outside = {
        name
        for name in loaded
        if not name.startswith("asyncdeploy.workload")
        and name
        not in {
            "asyncdeploy",
            "asyncdeploy._errors",
            "asyncdeploy.durations",
            "asyncdeploy._backoff",
        }
    }
    assert not outside, outside
    assert "asyncdeploy.workload.state" in loaded  # the check sees what the kit loads


def test_the_package_root_still_offers_every_name() -> None:
    """Lazy, not smaller: every name of ``asyncdeploy.__all__`` resolves, and dir() lists it."""
    for name in asyncdeploy.__all__:
        assert getattr(asyncdeploy, name) is not None, name
    assert set(asyncdeploy.__all__) <= set(dir(asyncdeploy))
    with pytest.raises(AttributeError, match="NoSuchName"):
        asyncdeploy.NoSuchName  # type: ignore[attr-defined]  # noqa: B018


def test_the_kit_loads_a_module_only_when_one_of_its_names_is_used() -> None:
    """The kit's root is lazy too (PEP 562): importing it loads none of its modules, and a name
    loads its own module, not the ASGI middleware or the control client beside it (the drain
    gate's controller starts on the state machine alone: issue 30, start to ready)."""
    code = (
        "import sys, asyncdeploy.workload as w; "
        "before = sorted(m for m in sys.modules if m.startswith('asyncdeploy.workload.')); "
        "w.DrainController; "
        "after = sorted(m for m in sys.modules if m.startswith('asyncdeploy.workload.')); "
        "print(' '.join(before)); print(' '.join(after))"
    )
    root = Path(asyncdeploy.__file__).resolve().parent.parent
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True
    )
    before, after = (set(line.split()) for line in result.stdout.splitlines())
    assert before == set(), before
    assert "asyncdeploy.workload.state" in after, after
    assert not {"asyncdeploy.workload.middleware", "asyncdeploy.workload.client"} & after, after
    assert workload.Outcome is workload.RequestOutcome  # the old name still resolves
    assert "DrainController" in dir(workload)
    with pytest.raises(AttributeError, match="NoSuchName"):
        workload.NoSuchName  # type: ignore[attr-defined]  # noqa: B018
