"""open_deployer is typed per driver: a misspelled driver or option is a type error."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

mypy_api = pytest.importorskip("mypy.api")

ROOT = Path(__file__).resolve().parents[2]
CHECKED = ROOT / "tests" / "typing" / "check_open_deployer.py"


WRONG = [
    'open_deployer("kuberentes")',  # a misspelled driver
    'open_deployer("docker", namespace="ml")',  # another driver's option
    'open_deployer("kubernetes", namespce="ml")',  # a misspelled option
    'open_deployer("kubernetes", url="unix:///x")',
]


@pytest.fixture(scope="module")
def reported(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One mypy run (it reads the whole package: seconds) over the correct uses and a file of
    wrong calls; each test reads its own file's lines."""
    wrong = tmp_path_factory.mktemp("typing") / "wrong.py"
    lines = ["from asyncdeploy import open_deployer", "", "", "async def wrong() -> None:"]
    for call in WRONG:
        lines += [f"    async with {call}:", "        pass"]
    wrong.write_text("\n".join(lines) + "\n")
    out, err, _ = mypy_api.run(
        ["--strict", "--no-incremental", "--cache-dir", "/dev/null", str(CHECKED), str(wrong)]
    )
    return out + err


def test_correct_uses_type_check(reported: str) -> None:
    """Each driver's own options, and the values users receive, as editors see them."""
    assert "checked 2 source files" in reported, reported  # mypy ran over both
    assert f"{CHECKED.name}:" not in reported, reported


def test_misspellings_are_type_errors(reported: str) -> None:
    """Each wrong call is reported on its own line."""
    for number in range(len(WRONG)):
        line = 5 + 2 * number
        assert f"wrong.py:{line}: error: No overload variant" in reported, (WRONG[number], reported)
    lines = {int(m) for m in re.findall(r"wrong\.py:(\d+): error", reported)}
    assert lines == {5 + 2 * n for n in range(len(WRONG))}, reported
    assert 'did you mean "namespace"' in reported, "editors can suggest the option"
