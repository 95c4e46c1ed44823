"""The plan snippets proposed for the README in docs/drain.md are valid plans."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from asyncdeploy.plan import WorkloadPlan

DOC = Path(__file__).parents[2] / "docs" / "drain.md"


def test_the_kept_volume_snippet_is_a_plan_that_keeps_its_volume() -> None:
    [block] = re.findall(r"```yaml\n(.*?)```", DOC.read_text(), re.DOTALL)
    plan = WorkloadPlan.from_mapping(yaml.safe_load(block))
    [mount] = plan.containers[0].mounts
    assert (mount.type, mount.source, mount.keep) == ("volume", "model-cache", True)


def test_the_page_reads_as_a_users_page_not_as_notes_of_a_change() -> None:
    """Issue 32 item 5: what happens and what to run, not where rows would go or what changed."""
    text = DOC.read_text()
    headings = re.findall(r"^#+ .*$", text, re.MULTILINE)
    for words in ("new rows", "rows to add", "new paragraphs", "replace the bullets"):
        assert not [h for h in headings if words in h], (words, headings)
    for words in (" used to ", " no longer ", " now kills"):
        assert words not in text, words
    assert len(headings) == len(set(headings)), "one heading per subject"
    assert text.count("What to run") >= 2
