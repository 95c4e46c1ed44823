"""Selectors on Kubernetes mean what they mean on the engines: the canonical string is sent."""

from __future__ import annotations

import pytest
from fake_apiserver import FakeApiServer

from asyncdeploy import Container, WorkloadPlan
from asyncdeploy.drivers.kubernetes import KubernetesDriver

pytestmark = pytest.mark.anyio


async def test_selector_operators_on_the_fake_api_server(
    driver: KubernetesDriver, fake: FakeApiServer
) -> None:
    for name, labels in (("a", {"team": "ml"}), ("b", {"team": ""}), ("c", {})):
        plan = WorkloadPlan(
            name=name, labels=labels, containers=[Container(name="s", image="busybox:1.36")]
        )
        await driver.apply(plan)
    cases = {
        "team=": ["b"],
        "team!=ml": ["b", "c"],
        "team in (ml)": ["a"],
        "team notin (ml,)": ["c"],
        "!team": ["c"],
        "team": ["a", "b"],
    }
    for selector, expected in cases.items():
        assert [s.name for s in await driver.list(selector)] == expected, selector
    await driver.list("team in (ml, x)")
    sent = [r.query.get("labelSelector") for r in fake.requests if r.method == "GET"]
    assert sent[-1] == "asyncdeploy.io/workload,team in (ml,x)"
