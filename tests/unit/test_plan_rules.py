"""The plan's rules are keyed by the fields themselves, never by a field's name."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from asyncdeploy._errors import PlanError
from asyncdeploy.plan import Gate, HTTPGet, Mount, ServicePort, WorkloadPlan
from asyncdeploy.plan._fields import FieldDoc


def run(**container: Any) -> dict[str, Any]:
    return {"name": "a", "containers": [{"name": "x", "image": "i", **container}]}


@pytest.mark.parametrize(
    ("document", "path"),
    [
        (run(checks={"readiness": {"http": {"port": None}}}), "checks.readiness.http.port"),
        (run(pre_stop_http={"port": None}), "pre_stop_http.port"),
        (run(ports=[{"container_port": 80}], gate={"upstream": None}), "gate.upstream"),
    ],
)
def test_a_required_port_written_as_null_is_refused(document: dict[str, Any], path: str) -> None:
    """A port the plan needs cannot be left empty: the old rule let every port but one named
    ``container_port`` be None, so ``port: null`` made a check with no port."""
    with pytest.raises(PlanError) as caught:
        WorkloadPlan.from_mapping(document)
    assert str(caught.value) == f"containers[0].{path}: must be a port number 1-65535, got None"


def test_a_service_port_written_as_null_is_refused() -> None:
    document = {**run(), "service": {"ports": [{"port": None}]}}
    with pytest.raises(PlanError, match=r"^service\.ports\[0\]\.port: must be a port number"):
        WorkloadPlan.from_mapping(document)


def test_optional_ports_may_be_left_unset() -> None:
    assert ServicePort(port=80).target_port is None
    assert HTTPGet(port=8080).path == "/"
    assert Gate(upstream=8000).ready is None


def test_a_bool_is_required_where_the_field_is_typed_bool_whatever_its_name() -> None:
    """``read_only`` and ``keep`` are refused as non-booleans because their type says bool."""
    for key in ("read_only", "keep"):
        mount = {"target": "/d", "type": "volume", "source": "v", key: "yes"}
        with pytest.raises(PlanError, match=rf"mounts\[0\]\.{key}: must be true or false"):
            WorkloadPlan.from_mapping(run(mounts=[mount]))
    assert attrs.fields(Mount).keep.type == "bool"


def test_a_bare_string_where_a_list_belongs_is_refused_by_the_field_it_was_given_to() -> None:
    with pytest.raises(PlanError, match=r"^containers\[0\]\.pre_stop: must be a list of strings"):
        WorkloadPlan.from_mapping(run(pre_stop=5))
    with pytest.raises(PlanError, match=r"^image_pull_secrets: must be a list of strings"):
        WorkloadPlan.from_mapping({**run(), "image_pull_secrets": {"a": 1}})


def test_the_words_of_each_field_are_in_its_metadata() -> None:
    doc = attrs.fields(WorkloadPlan).termination_grace_period_seconds.metadata["doc"]
    assert isinstance(doc, FieldDoc)
    assert doc.text.startswith("Seconds between the stop signal and SIGKILL")
