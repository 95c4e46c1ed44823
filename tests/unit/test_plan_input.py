"""Odd plan input is a ``PlanError`` naming the field, never a traceback or an engine 500."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

from asyncdeploy._errors import PlanError
from asyncdeploy.drivers.engine import _spec as spec
from asyncdeploy.plan import WorkloadPlan


def base(**container: Any) -> dict[str, Any]:
    return {"name": "a", "containers": [{"name": "x", "image": "i", **container}]}


@pytest.mark.parametrize(
    "value", ["1e30", "1e100", "1e-999999999", "9.3e18", "8Ei", 1e300, 10**400]
)
@pytest.mark.parametrize("field", ["cpu", "memory"])
def test_quantities_beyond_what_engines_hold_are_plan_errors(field: str, value: Any) -> None:
    with pytest.raises(PlanError) as caught:
        WorkloadPlan.from_mapping(base(resources={field: value}))
    assert caught.value.path == f"containers[0].resources.{field}"


def test_the_largest_quantities_engines_hold_are_accepted_and_fit_int64() -> None:
    plan = WorkloadPlan.from_mapping(
        base(resources={"cpu": "9223372036", "memory": str(2**63 - 1)})
    )
    config = spec.container_config(plan, plan.containers[0], "pause-id")
    assert config["HostConfig"]["NanoCpus"] <= 2**63 - 1
    assert config["HostConfig"]["Memory"] == 2**63 - 1


def test_shm_size_is_bounded_too() -> None:
    with pytest.raises(PlanError, match="shm_size"):
        WorkloadPlan.from_mapping({**base(), "shm_size": "1e30"})


@pytest.mark.parametrize("grace", [2**31, 2**63, -1, 1.5, "30", True])
def test_grace_periods_engines_cannot_hold_are_refused(grace: Any) -> None:
    with pytest.raises(PlanError) as caught:
        WorkloadPlan.from_mapping({**base(), "termination_grace_period_seconds": grace})
    assert caught.value.path == "termination_grace_period_seconds"


def test_probe_durations_must_fit_the_engines_health_check() -> None:
    big = 2**31 - 1
    checks = {
        "startup": {"exec": ["true"], "period_seconds": big, "failure_threshold": big},
        "liveness": {"exec": ["true"]},
    }
    with pytest.raises(PlanError) as caught:
        WorkloadPlan.from_mapping(base(checks=checks))
    assert caught.value.path == "containers[0].checks.startup"
    with pytest.raises(PlanError, match="period_seconds"):
        WorkloadPlan.from_mapping(
            base(checks={"liveness": {"exec": ["t"], "period_seconds": 2**40}})
        )


def write(tmp_path: Path, text: str, suffix: str = ".yaml") -> Path:
    path = tmp_path / f"plan{suffix}"
    path.write_text(text)
    return path


def test_a_key_given_twice_in_yaml_is_refused_by_name(tmp_path: Path) -> None:
    text = "name: a\ncontainers:\n  - name: x\n    image: one\n    image: two\n"
    with pytest.raises(PlanError, match=r"plan\.yaml:5: the key 'image' appears twice"):
        WorkloadPlan.from_file(write(tmp_path, text))


def test_a_key_given_twice_in_json_is_refused_by_name(tmp_path: Path) -> None:
    text = '{"name": "a", "name": "b", "containers": [{"name": "x", "image": "i"}]}'
    with pytest.raises(PlanError, match="'name' appears twice"):
        WorkloadPlan.from_file(write(tmp_path, text, ".json"))


def test_yaml_merge_keys_may_still_override(tmp_path: Path) -> None:
    text = (
        "x-base: &base {name: x, image: one}\nname: a\ncontainers:\n  - <<: *base\n    image: two\n"
    )
    with pytest.raises(PlanError, match="unknown field"):  # x-base, but no duplicate error
        WorkloadPlan.from_file(write(tmp_path, text))


@pytest.mark.parametrize(
    "text",
    [
        b"\xff\xfe\x00n",
        b"[" * 5000,
        b"name: a\n? [1, 2]\n: x\n",
        b"a: &a [*a]\n",
        b"name: !!binary aGVsbG8=\ncontainers: []\n",
        b"name: 2020-01-01\ncontainers: []\n",
        b"1: 2\nname: a\n",
    ],
)
def test_unreadable_documents_are_plan_errors(tmp_path: Path, text: bytes) -> None:
    path = tmp_path / "plan.yaml"
    path.write_bytes(text)
    with pytest.raises(PlanError):
        WorkloadPlan.from_file(path)


@pytest.mark.parametrize("source", ["../info", "..", "a/b", "x", "-v", ".hidden", "a b", ""])
def test_volume_names_must_be_engine_volume_names(source: str) -> None:
    mount = {"type": "volume", "source": source, "target": "/data"}
    with pytest.raises(PlanError) as caught:
        WorkloadPlan.from_mapping(base(mounts=[mount]))
    assert caught.value.path == "containers[0].mounts[0].source"


def test_a_valid_volume_name_is_kept() -> None:
    mount = {"type": "volume", "source": "models_v1.2-x", "target": "/data"}
    assert WorkloadPlan.from_mapping(base(mounts=[mount])).containers[0].mounts[0].source


def test_only_engine_names_become_url_path_segments() -> None:
    assert spec.path_segment("models_v1.2-x") == "models_v1.2-x"
    for name in ("", ".", "..", "../info", "..%2Finfo", "a/b", "a b", "a?b", ".x"):
        with pytest.raises(PlanError, match="not a volume name"):
            spec.path_segment(name)


def test_no_two_workloads_want_the_same_engine_name() -> None:
    """Workload ``a`` with container ``x-pause`` and workload ``a-x`` (whose pause is ``pause``)."""
    assert spec.container_name("a", "x-pause") != spec.container_name("a-x", "pause")
    labels = ["a", "a-x", "x", "x-pause", "pause", "autoheal", "a-x-pause", "b-autoheal"]
    names: dict[str, tuple[str, str]] = {}
    for workload, container in itertools.product(labels, repeat=2):
        name = spec.container_name(workload, container)
        assert names.setdefault(name, (workload, container)) == (workload, container)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("host_ip", 5),
        ("name", ["p"]),
    ],
)
def test_port_strings_are_checked(field: str, value: Any) -> None:
    with pytest.raises(PlanError) as caught:
        WorkloadPlan.from_mapping(base(ports=[{"container_port": 80, field: value}]))
    assert caught.value.path == f"containers[0].ports[0].{field}"


def test_non_string_keys_and_paths_are_plan_errors() -> None:
    with pytest.raises(PlanError, match="unknown field"):
        WorkloadPlan.from_mapping({**base(), 1: "x", "zz": 2})
    probe = {"readiness": {"http": {"port": 80, "path": 5}}}
    with pytest.raises(PlanError) as caught:
        WorkloadPlan.from_mapping(base(checks=probe))
    assert caught.value.path == "containers[0].checks.readiness.http.path"
    with pytest.raises(PlanError, match="source"):
        WorkloadPlan.from_mapping(base(mounts=[{"source": 5, "target": "/x"}]))


def test_an_endless_file_is_refused_not_read_forever() -> None:
    with pytest.raises(PlanError, match="larger than"):
        WorkloadPlan.from_file("/dev/zero")
