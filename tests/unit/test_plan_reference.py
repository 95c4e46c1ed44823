"""The plan reference: JSON Schema and reference page generated from the model, never drifting."""

from __future__ import annotations

import json
from pathlib import Path

import attrs
import jsonschema
import pytest
from click.testing import CliRunner

from asyncdeploy.cli import main
from asyncdeploy.plan import WorkloadPlan
from asyncdeploy.plan._fields import FieldDoc
from asyncdeploy.plan.lint import lint_plan
from asyncdeploy.plan.schema import (
    _plan_types,
    plan_reference_markdown,
    plan_schema,
    plan_schema_json,
)

ROOT = Path(__file__).parents[2]
PLANS = sorted((ROOT / "examples" / "plans").glob("*.yaml"))
REGENERATE = (
    "regenerate: asyncdeploy schema > docs/plan.schema.json && "
    "asyncdeploy schema --format markdown > docs/plan-reference.md"
)


def test_every_plan_field_and_type_carries_its_words() -> None:
    """A new plan field without words fails here, so the reference cannot fall behind: the words
    are the field's own metadata (``metadata=about(...)``), the type's its ``summary``."""
    undocumented = {
        f"{kind.__name__}.{f.name}"
        for kind in _plan_types()
        for f in attrs.fields(kind)
        if not f.metadata.get("internal")  # set by the library, never written in a plan
        and not (isinstance(f.metadata.get("doc"), FieldDoc) and f.metadata["doc"].text)
    }
    assert undocumented == set(), "give these fields metadata=about(...)"
    assert all(isinstance(kind.summary, str) and kind.summary for kind in _plan_types())


def test_the_committed_schema_and_reference_are_the_generated_ones() -> None:
    assert (ROOT / "docs" / "plan.schema.json").read_text() == plan_schema_json(), REGENERATE
    assert (ROOT / "docs" / "plan-reference.md").read_text() == plan_reference_markdown(), (
        REGENERATE
    )


def test_the_schema_is_a_valid_draft_2020_12_schema() -> None:
    jsonschema.Draft202012Validator.check_schema(plan_schema())


@pytest.mark.parametrize("path", PLANS, ids=lambda p: p.name)
def test_example_plans_load_validate_against_the_schema_and_lint_clean(path: Path) -> None:
    import yaml

    first_line = path.read_text().splitlines()[0]
    assert first_line == "# yaml-language-server: $schema=../../docs/plan.schema.json"
    document = yaml.safe_load(path.read_text())
    jsonschema.validate(document, plan_schema(), cls=jsonschema.Draft202012Validator)
    plan = WorkloadPlan.from_file(path)
    assert [f for f in lint_plan(plan) if f.level == "error"] == []


def test_there_are_example_plans() -> None:
    assert {p.name for p in PLANS} >= {"minimal.yaml", "multi-container.yaml"}


@pytest.mark.parametrize(
    "document",
    [
        {"name": "x", "containers": [{"name": "a", "image": "i", "colour": "red"}]},
        {"name": "Bad_Name", "containers": [{"name": "a", "image": "i"}]},
        {"containers": [{"name": "a", "image": "i"}]},
        {"name": "x", "containers": [{"name": "a", "image": "i", "role": "helper"}]},
    ],
)
def test_the_schema_refuses_what_the_plan_refuses(document: dict[str, object]) -> None:
    """Editors flag the same mistakes the plan's own validation does."""
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(document, plan_schema(), cls=jsonschema.Draft202012Validator)
    with pytest.raises(ValueError, match=r"."):
        WorkloadPlan.from_mapping(document)


def test_schema_command_prints_both_forms() -> None:
    runner = CliRunner()
    as_json = runner.invoke(main, ["schema"])
    assert as_json.exit_code == 0
    assert json.loads(as_json.output)["title"] == "asyncdeploy workload plan"
    as_markdown = runner.invoke(main, ["schema", "--format", "markdown"])
    assert as_markdown.exit_code == 0
    assert "| `termination_grace_period_seconds` | integer | 30 |" in as_markdown.output
