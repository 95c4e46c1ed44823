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
