"""The one rule for where a workload lives on Kubernetes (``asyncdeploy.namespaces``)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from asyncdeploy._errors import PlanError
from asyncdeploy.namespaces import workload_namespace

NAMES = st.none() | st.sampled_from(["", "default", "ml", "prod"])


def test_the_plans_namespace_wins_over_none_asked_for() -> None:
    assert workload_namespace("ml", None) == "ml"
    assert workload_namespace(None, "ml") == "ml"
    assert workload_namespace(None, None) is None
    assert workload_namespace("ml", "ml") == "ml"


def test_a_conflict_is_refused_naming_both() -> None:
    with pytest.raises(PlanError, match=r"'ml'.*'default' was asked for"):
        workload_namespace("ml", "default")


@given(NAMES, NAMES)
def test_the_answer_is_one_of_the_two_or_a_plan_error(
    declared: str | None, asked: str | None
) -> None:
    """Never a third namespace, never a silent choice between two different ones."""
    conflict = bool(declared and asked and declared != asked)
    try:
        chosen = workload_namespace(declared, asked)
    except PlanError:
        assert conflict
    else:
        assert not conflict
        assert chosen in (declared, asked) and (chosen or None) == (declared or asked or None)
