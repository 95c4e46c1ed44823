"""One backoff for every retry loop: its pauses double from the first to the longest, and no
module but ``_backoff`` doubles a pause of its own."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

from asyncdeploy._backoff import ENGINE_CALL, WATCH, Backoff

PACKAGE = Path(__file__).resolve().parents[2] / "asyncdeploy"
# the engine drain's timings, being made one value passed in (issue 27 item 2): until it lands
ENGINE_DRAIN = {
    "drivers/engine/_pipeline.py",
    "drivers/engine/_follow.py",
    "drivers/engine/_drain.py",
}


def test_the_pauses_double_up_to_the_longest() -> None:
    assert list(itertools.islice(Backoff(0.05, 0.3).pauses(), 5)) == [0.05, 0.1, 0.2, 0.3, 0.3]
    assert [WATCH.after(n) for n in (1, 2, 3, 5, 9)] == [0.1, 0.2, 0.4, 1.6, 2.0]
    assert ENGINE_CALL.after(0) == ENGINE_CALL.first


def test_no_module_doubles_a_pause_of_its_own() -> None:
    """A retry loop with constants of its own (``pause = min(pause * 2, 1.0)``) is a second
    home for a rule that has one."""
    doubling = re.compile(r"min\(\s*\w+\s*\*\s*2\b|\*\s*2\s*\*\*")
    found = [
        f"{path.relative_to(PACKAGE)}:{n}"
        for path in PACKAGE.rglob("*.py")
        if path.name != "_backoff.py"
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if doubling.search(line)
    ]
    assert found == []
