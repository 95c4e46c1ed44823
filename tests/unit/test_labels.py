"""Every key asyncdeploy writes is its own: a plan may set none of them (the forged
``replace.asyncdeploy.io/instance-of`` once drained another plan's workload as an earlier
instance)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from asyncdeploy import labels
from asyncdeploy._errors import PlanError
from asyncdeploy.plan import WorkloadPlan

MINIMAL = {"name": "web", "containers": [{"name": "app", "image": "demo:1"}]}
OWN_KEYS = sorted(
    {
        *(value for name, value in vars(labels).items() if name.startswith("LABEL_")),
        labels.autoheal_label("web"),
    }
)


def test_every_key_asyncdeploy_writes_is_reserved() -> None:
    assert "replace.asyncdeploy.io/instance-of" in OWN_KEYS
    assert all(labels.is_reserved(key) for key in OWN_KEYS)


@pytest.mark.parametrize("key", OWN_KEYS)
def test_a_plan_cannot_set_a_key_asyncdeploy_writes(key: str) -> None:
    with pytest.raises(PlanError, match="reserved") as caught:
        WorkloadPlan.from_mapping({**MINIMAL, "labels": {key: "other"}})
    assert caught.value.path == f"labels.{key}"


@pytest.mark.parametrize(
    "key", ["asyncdeploy.io/anything", "x.asyncdeploy.io/y", "Replace.AsyncDeploy.io/instance-of"]
)
def test_the_whole_domain_is_reserved(key: str) -> None:
    assert labels.is_reserved(key)


@pytest.mark.parametrize(
    "key", ["team", "example.com/team", "notasyncdeploy.io/x", "asyncdeploy.iox/y"]
)
def test_other_keys_are_the_users(key: str) -> None:
    assert not labels.is_reserved(key)
    assert WorkloadPlan.from_mapping({**MINIMAL, "labels": {key: "v"}}).labels[key] == "v"


@given(st.from_regex(r"[a-z]([a-z0-9-]{0,8}[a-z0-9])?(\.[a-z]{1,5}){0,2}", fullmatch=True))
def test_reserved_means_the_domain_or_a_subdomain(prefix: str) -> None:
    expected = prefix == "asyncdeploy.io" or prefix.endswith(".asyncdeploy.io")
    assert labels.is_reserved(f"{prefix}/key") is expected
