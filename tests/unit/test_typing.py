"""open_deployer is typed per driver: a misspelled driver or option is a type error."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

mypy_api = pytest.importorskip("mypy.api")

ROOT = Path(__file__).resolve().parents[2]
CHECKED = ROOT / "tests" / "typing" / "check_open_deployer.py"


def mypy(path: Path) -> tuple[int, str]:
    out, err, code = mypy_api.run(
        ["--strict", "--no-incremental", "--cache-dir", "/dev/null", str(path)]
    )
    return code, out + err


def test_correct_uses_type_check() -> None:
    """Each driver's own options, and the values users receive, as editors see them."""
    code, out = mypy(CHECKED)
    assert code == 0, out


WRONG = [
    'open_deployer("kuberentes")',  # a misspelled driver
    'open_deployer("docker", namespace="ml")',  # another driver's option
    'open_deployer("kubernetes", namespce="ml")',  # a misspelled option
    'open_deployer("kubernetes", url="unix:///x")',
]


def test_misspellings_are_type_errors(tmp_path: Path) -> None:
    """Each wrong call is reported on its own line (one mypy run for all of them)."""
    path = tmp_path / "wrong.py"
    lines = ["from asyncdeploy import open_deployer", "", "", "async def wrong() -> None:"]
    for call in WRONG:
        lines += [f"    async with {call}:", "        pass"]
    path.write_text("\n".join(lines) + "\n")
    code, out = mypy(path)
    assert code == 1, out
    for number in range(len(WRONG)):
        line = 5 + 2 * number
        assert f"wrong.py:{line}: error: No overload variant" in out, (WRONG[number], out)
    reported = {int(m) for m in re.findall(r"wrong\.py:(\d+): error", out)}
    assert reported == {5 + 2 * n for n in range(len(WRONG))}, out
    assert 'did you mean "namespace"' in out, "editors can suggest the option"
