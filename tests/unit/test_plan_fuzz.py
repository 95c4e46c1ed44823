"""Property-based fuzzing of plan documents: any document is a valid plan or a ``PlanError``.

Nothing else may escape (no ``TypeError``, ``AttributeError``, ``decimal.InvalidOperation``...),
and every valid plan translates into engine and Kubernetes specs whose numbers fit the engines.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from asyncdeploy._errors import PlanError
from asyncdeploy.drivers.engine import _spec as spec
from asyncdeploy.drivers.kubernetes._manifest import pod_manifest
from asyncdeploy.plan import WorkloadPlan, plan_to_mapping

INT64 = 2**63 - 1

VALID: dict[str, Any] = {
    "name": "demo",
    "labels": {"team": "ml"},
    "termination_grace_period_seconds": 20,
    "shm_size": "64Mi",
    "autoheal": {"image": "autoheal", "interval_seconds": 5},
    "containers": [
        {"name": "setup", "role": "init", "image": "busybox", "command": ["true"]},
        {
            "name": "app",
            "image": "server",
            "command": ["serve"],
            "args": ["--port", "8080"],
            "env": {"MODEL": "tiny", "API_TOKEN": "t"},
            "ports": [{"container_port": 8080, "host_port": 18080}],
            "mounts": [
                {"type": "volume", "source": "models", "target": "/models"},
                {"type": "tmpfs", "target": "/tmp"},
                {"source": "/srv", "target": "/srv", "read_only": True},
            ],
            "resources": {"cpu": "500m", "memory": "1Gi"},
            "stop_signal": "SIGINT",
            "pre_stop": ["drain"],
            "checks": {
                "startup": {"exec": ["true"], "period_seconds": 2, "failure_threshold": 30},
                "readiness": {"http": {"port": 8080, "path": "/ready"}},
                "liveness": {"tcp": 8080, "initial_delay_seconds": 5},
            },
            "restart_policy": "on-failure",
        },
    ],
}

scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12)
    | st.sampled_from(["", "1e30", "1e-999999999", "../info", "a_b", "SIGTERM", "500m", "/x"])
)
documents = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text(max_size=8) | st.integers(), inner, max_size=4)
    ),
    max_leaves=20,
)


def paths(data: Any, here: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in a document a value can be swapped or dropped."""
    found = [here]
    if isinstance(data, dict):
        for key, value in data.items():
            found += paths(value, (*here, key))
    elif isinstance(data, list):
        for i, value in enumerate(data):
            found += paths(value, (*here, i))
    return found


ALL_PATHS = paths(VALID)[1:]


@st.composite
def mutated_plans(draw: st.DrawFn) -> dict[str, Any]:
    """The valid plan with one to three places replaced, dropped, or given an extra key."""
    data = copy.deepcopy(VALID)
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(ALL_PATHS))
        parent: Any = data
        try:
            for step in path[:-1]:
                parent = parent[step]
            action = draw(st.sampled_from(["replace", "drop", "extra"]))
            if action == "replace":
                parent[path[-1]] = draw(documents)
            elif action == "drop":
                del parent[path[-1]]
            elif isinstance(parent, dict):
                parent[draw(st.text(max_size=6))] = draw(scalars)
        except (KeyError, IndexError, TypeError):
            continue  # an earlier mutation removed or replaced this place
    return data


def check_document(document: Any) -> WorkloadPlan | None:
    """The property: a valid plan, or a ``PlanError`` naming a field when the document is a
    mapping (only a document that is no mapping at all has no field to name)."""
    try:
        plan = WorkloadPlan.from_mapping(document)
    except PlanError as exc:
        error = exc
    else:
        check_translations(plan)
        return plan
    if isinstance(document, dict):
        assert error.path, f"no field path in {error!s}"
    return None


def check_translations(plan: WorkloadPlan) -> None:
    """A valid plan becomes specs the engines can hold, and maps back to itself."""
    assert WorkloadPlan.from_mapping(plan_to_mapping(plan)) == plan
    pause = spec.pause_config(plan)
    assert pause["HostConfig"].get("ShmSize", 0) <= INT64
    for container in plan.containers:
        config = spec.container_config(plan, container, "pause-id")
        host = config["HostConfig"]
        assert 0 <= host.get("NanoCpus", 0) <= INT64
        assert 0 <= host.get("Memory", 0) <= INT64
        assert config["StopTimeout"] <= 2**31 - 1
        for key in ("Interval", "Timeout", "StartPeriod"):
            assert config.get("Healthcheck", {}).get(key, 0) <= INT64
        for mount in host["Mounts"]:
            if mount["Type"] == "volume":
                assert spec.path_segment(mount["Source"]) == mount["Source"]
    pod_manifest(plan, namespace="default")


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(documents)
def test_random_documents_are_plans_or_plan_errors(document: Any) -> None:
    check_document(document)


@settings(max_examples=500, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_plans())
@example(VALID)
def test_mutations_of_a_valid_plan_are_plans_or_plan_errors(document: dict[str, Any]) -> None:
    check_document(document)


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_plans(), st.integers(0, 2000), st.text(max_size=6))
def test_damaged_plan_files_are_plans_or_plan_errors(
    tmp_path_factory: Any, document: dict[str, Any], cut: int, insert: str
) -> None:
    """The YAML text itself damaged: a cut, an insertion, a repeated line."""
    text = yaml.safe_dump(document, sort_keys=False)
    lines = text.splitlines(keepends=True)
    damaged = text[:cut] + insert + text[cut:] + (lines[cut % len(lines)] if lines else "")
    path: Path = tmp_path_factory.mktemp("fuzz") / "plan.yaml"
    path.write_text(damaged)
    try:
        plan = WorkloadPlan.from_file(path)
    except PlanError:
        return
    check_translations(plan)


def test_the_valid_plan_is_valid() -> None:
    """The seed of the mutations is itself valid, so the mutations test what they claim."""
    plan = check_document(copy.deepcopy(VALID))
    assert plan is not None and math.isfinite(plan.termination_grace_period_seconds)
