"""Every snippet the README shows is run by a test as written: each fenced block carries a
``<!-- snippet: NAME -->`` marker, and a test names that marker."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.MULTILINE | re.DOTALL)
MARKED = re.compile(r"<!-- snippet: ([\w-]+) -->\n```(\w*)\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def blocks() -> list[tuple[str, str]]:
    """(marker, code) of every README block."""
    return [(name, code) for name, _, code in MARKED.findall(README)]


def test_every_block_is_marked() -> None:
    assert len(FENCE.findall(README)) == len(blocks()) > 0


def test_every_marker_is_run_by_a_test() -> None:
    sources = "".join(
        path.read_text()
        for path in (ROOT / "tests").rglob("*.py")
        if path.resolve() != Path(__file__).resolve()
    )
    unclaimed = [
        name
        for name, _ in blocks()
        if f'"{name}"' not in sources and f"snippet: {name}" not in sources
    ]
    assert not unclaimed, unclaimed


def test_the_python_api_block_is_the_quickstart_that_runs() -> None:
    """tests/engines/test_first_use.py runs examples/quickstart.py on both engines; the README
    shows its code, below the docstring, unchanged."""
    [code] = [code for name, code in blocks() if name == "python-api"]
    quickstart = (ROOT / "examples" / "quickstart.py").read_text()
    assert quickstart.endswith(code)
    assert quickstart[: -len(code)].rstrip().endswith('"""')
