"""The gate plans of the README and docs/gate.md, validated and linted as written."""

from __future__ import annotations

import re
from pathlib import Path

import jsonschema
import yaml

from asyncdeploy.plan import WorkloadPlan
from asyncdeploy.plan.gating import expand_gates
from asyncdeploy.plan.lint import lint_plan
from asyncdeploy.plan.schema import plan_schema

ROOT = Path(__file__).parents[2]
MARKER = "<!-- snippet: gate-plan -->"


def snippets() -> list[str]:
    """Every marked gate plan, in the README and on the gate's page."""
    text = (ROOT / "README.md").read_text() + (ROOT / "docs" / "gate.md").read_text()
    return re.findall(re.escape(MARKER) + r"\n```yaml\n(.*?)```", text, re.DOTALL)


def test_the_gate_plans_in_the_docs_validate_lint_clean_and_expand() -> None:
    found = snippets()
    assert {yaml.safe_load(s)["name"] for s in found} == {"vllm", "sglang", "tgi"}
    for snippet in found:
        document = yaml.safe_load(snippet)
        jsonschema.validate(document, plan_schema(), cls=jsonschema.Draft202012Validator)
        plan = WorkloadPlan.from_mapping(document)
        # clean but for the fixed host port the plan shape publishes (replace drains first)
        findings = [(f.level, f.path) for f in lint_plan(plan)]
        assert findings == [("warning", "containers[0].ports[0].host_port")], document["name"]
        assert [c.role for c in expand_gates(plan).containers] == ["sidecar", "run"]
        example = WorkloadPlan.from_file(ROOT / "examples" / "plans" / f"{plan.name}.yaml")
        assert example == plan  # the docs and examples/plans say the same
