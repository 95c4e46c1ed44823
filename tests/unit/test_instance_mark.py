"""The replace mark is the library's alone: a plan file cannot write it, a replacement can."""

from __future__ import annotations

import attrs
import pytest

from asyncdeploy import PlanError, WorkloadPlan
from asyncdeploy.drivers.engine import _spec as spec
from asyncdeploy.drivers.kubernetes._manifest import pod_manifest
from asyncdeploy.labels import LABEL_INSTANCE_OF
from asyncdeploy.plan.schema import plan_schema

DOCUMENT = {"name": "app", "containers": [{"name": "server", "image": "busybox"}]}


def test_a_plan_file_cannot_name_the_plan_it_is_an_instance_of() -> None:
    with pytest.raises(PlanError, match="instance_of: unknown field"):
        WorkloadPlan.from_mapping({**DOCUMENT, "instance_of": "other"})
    with pytest.raises(PlanError, match="reserved"):
        WorkloadPlan.from_mapping({**DOCUMENT, "labels": {LABEL_INSTANCE_OF: "other"}})
    assert "instance_of" not in plan_schema()["properties"]


def test_an_instance_carries_the_mark_on_every_engine_object() -> None:
    plan = attrs.evolve(WorkloadPlan.from_mapping(DOCUMENT), name="app-1a2b3c", instance_of="app")
    assert spec.pause_config(plan)["Labels"][LABEL_INSTANCE_OF] == "app"
    config = spec.container_config(plan, plan.containers[0], "pause-id", engine="docker")
    assert config["Labels"][LABEL_INSTANCE_OF] == "app"
    assert pod_manifest(plan, namespace="default")["metadata"]["labels"][LABEL_INSTANCE_OF] == "app"
