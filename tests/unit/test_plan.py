"""The plan: validation with field paths, file loading, canonical values and digests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import pytest

from asyncdeploy import Checks, Container, HTTPGet, PlanError, Probe, Resources, WorkloadPlan
from asyncdeploy.plan import plan_digest, plan_to_mapping

MINIMAL: dict[str, Any] = {"name": "llm", "containers": [{"name": "server", "image": "vllm:1"}]}


def with_container(**fields: Any) -> dict[str, Any]:
    return {
        "name": "llm",
        "containers": [
            {"name": "server", "image": "vllm:1"},
            {"name": "b", "image": "i", **fields},
        ],
    }


def test_minimal_plan_has_the_documented_defaults() -> None:
    """A plan needs a name and one run container; grace defaults to 30 s."""
    plan = WorkloadPlan.from_mapping(MINIMAL)
    assert plan.termination_grace_period_seconds == 30
    assert plan.containers[0].role == "run"
    assert plan.pause_image == "registry.k8s.io/pause:3.10"


@pytest.mark.parametrize(
    ("data", "path"),
    [
        (with_container(resources={"memory": "1_0Mi"}), "containers[1].resources.memory"),
        (with_container(resources={"cpu": " 1"}), "containers[1].resources.cpu"),
        (with_container(resources={"cpu": "\uff11"}), "containers[1].resources.cpu"),
        (with_container(resources={"cpu": "-1"}), "containers[1].resources.cpu"),
        (with_container(resources={"memory": "1K"}), "containers[1].resources.memory"),
        (with_container(image=""), "containers[1].image"),
        (with_container(image=None), "containers[1].image"),
        (with_container(name="Bad_Name"), "containers[1].name"),
        (with_container(command="a b", args=5), "containers[1].args"),
        (with_container(env={"1X": "v"}), "containers[1].env.1X"),
        (with_container(env={"X": 1}), "containers[1].env.X"),
        (
            with_container(ports=[{"container_port": 70000}]),
            "containers[1].ports[0].container_port",
        ),
        (with_container(ports={"container_port": 80}), "containers[1].ports"),
        (
            with_container(mounts=[{"target": "rel", "source": "/x"}]),
            "containers[1].mounts[0].target",
        ),
        (
            with_container(checks={"readiness": {"exec": ["true"], "tcp": 80}}),
            "containers[1].checks.readiness",
        ),
        (
            with_container(checks={"liveness": {"http": {"path": "/x"}}}),
            "containers[1].checks.liveness.http.port",
        ),
        (with_container(role="sidecar"), "containers[1].role"),
        (with_container(stop_signal="TERM NOW"), "containers[1].stop_signal"),
        (with_container(extra=1), "containers[1].extra"),
        ({**MINIMAL, "termination_grace_period_seconds": -1}, "termination_grace_period_seconds"),
        ({**MINIMAL, "termination_grace_period_seconds": 2.5}, "termination_grace_period_seconds"),
        ({**MINIMAL, "termination_grace_period_seconds": True}, "termination_grace_period_seconds"),
        ({**MINIMAL, "name": "UPPER"}, "name"),
        ({**MINIMAL, "name": "x" * 64}, "name"),
        ({**MINIMAL, "host_network": "yes"}, "host_network"),
        ({**MINIMAL, "labels": {"asyncdeploy.io/workload": "x"}}, "labels.asyncdeploy.io/workload"),
        ({**MINIMAL, "shm_size": "lots"}, "shm_size"),
        ({"name": "llm", "containers": []}, "containers"),
        (
            {"name": "llm", "containers": [{"name": "i", "image": "x", "role": "init"}]},
            "containers",
        ),
        (
            {
                "name": "llm",
                "containers": [{"name": "a", "image": "x"}, {"name": "a", "image": "y"}],
            },
            "containers[1].name",
        ),
        ({"name": "llm", "containers": [{"name": "pause", "image": "x"}]}, "containers[0].name"),
        ({"containers": MINIMAL["containers"]}, "name"),
    ],
)
def test_invalid_plans_name_the_field(data: dict[str, Any], path: str) -> None:
    """Every invalid value raises PlanError whose path names the field."""
    with pytest.raises(PlanError) as caught:
        WorkloadPlan.from_mapping(data)
    assert caught.value.path == path
    assert str(caught.value).startswith(f"{path}: ")


def test_quantities_are_kept_canonical() -> None:
    """0.5 CPU reads as 500m and 1.5Gi as 1536Mi, as the API server stores them."""
    assert Resources(cpu=0.5, memory="1.5Gi") == Resources(cpu="500m", memory="1536Mi")
    assert Resources(cpu="2", memory="1e9").memory == "1G"


def test_plan_file_in_yaml_reads_like_python(tmp_path: Path) -> None:
    """A YAML plan with the same snake_case keys equals the Python plan."""
    path = tmp_path / "plan.yaml"
    path.write_text(
        "name: llm\n"
        "termination_grace_period_seconds: 120\n"
        "containers:\n"
        "  - name: server\n"
        "    image: vllm:1\n"
        "    pre_stop: [asyncdeploy, drain, --propagation-wait, 10s]\n"
        "    checks:\n"
        "      readiness: {http: {path: /ready, port: 8000}, period_seconds: 2, failure_threshold: 1}\n"
    )
    plan = WorkloadPlan.from_file(path)
    expected = WorkloadPlan(
        name="llm",
        termination_grace_period_seconds=120,
        containers=[
            Container(
                name="server",
                image="vllm:1",
                pre_stop=["asyncdeploy", "drain", "--propagation-wait", "10s"],
                checks=Checks(
                    readiness=Probe(
                        http=HTTPGet(path="/ready", port=8000),
                        period_seconds=2,
                        failure_threshold=1,
                    )
                ),
            )
        ],
    )
    assert plan == expected
    assert plan.containers[0].checks.readiness is not None
    assert plan.containers[0].checks.readiness.http is not None
    assert plan.containers[0].checks.readiness.http.port == 8000
    assert WorkloadPlan.from_mapping(plan_to_mapping(plan)) == plan


def test_unreadable_and_malformed_files_are_plan_errors(tmp_path: Path) -> None:
    with pytest.raises(PlanError, match="cannot read plan file"):
        WorkloadPlan.from_file(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(PlanError, match="not valid YAML"):
        WorkloadPlan.from_file(bad)
    bad.write_text("- a list\n")
    with pytest.raises(PlanError, match="must be a mapping"):
        WorkloadPlan.from_file(bad)


def test_plans_are_frozen_and_hashable() -> None:
    plan = WorkloadPlan.from_mapping({**MINIMAL, "labels": {"team": "ml"}})
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        plan.name = "other"  # type: ignore[misc]
    assert hash(plan) == hash(WorkloadPlan.from_mapping({**MINIMAL, "labels": {"team": "ml"}}))


def test_digest_changes_with_anything_that_matters() -> None:
    """Equal plans share a digest; a new grace period or image changes it."""
    plan = WorkloadPlan.from_mapping(MINIMAL)
    assert plan_digest(plan) == plan_digest(WorkloadPlan.from_mapping(MINIMAL))
    assert plan_digest(plan) != plan_digest(attrs.evolve(plan, termination_grace_period_seconds=31))
    other_image = attrs.evolve(plan, containers=[attrs.evolve(plan.containers[0], image="vllm:2")])
    assert plan_digest(plan) != plan_digest(other_image)


def test_only_a_volume_can_be_kept_and_keep_is_a_boolean() -> None:
    def plan(mount: dict[str, Any]) -> WorkloadPlan:
        return WorkloadPlan.from_mapping(
            {"name": "w", "containers": [{"name": "a", "image": "x", "mounts": [mount]}]}
        )

    assert (
        plan({"type": "volume", "source": "vol", "target": "/v", "keep": True})
        .containers[0]
        .mounts[0]
        .keep
    )
    with pytest.raises(PlanError, match="keep"):
        plan({"type": "tmpfs", "target": "/t", "keep": True})
    with pytest.raises(PlanError, match="keep"):
        plan({"type": "volume", "source": "vol", "target": "/v", "keep": "yes"})
    unkept = plan({"type": "volume", "source": "vol", "target": "/v"})
    assert "keep" not in str(plan_to_mapping(unkept))  # plans without it keep their digest
