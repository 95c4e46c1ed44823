"""A container's gate, expanded into its sidecar (pure), and what each driver makes of it."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

import asyncdeploy.gate
from asyncdeploy._errors import PlanError
from asyncdeploy.drivers.engine import _spec as spec
from asyncdeploy.drivers.kubernetes._manifest import pod_manifest
from asyncdeploy.labels import (
    LABEL_PRE_STOP_HTTP,
    LABEL_READINESS_NET,
    LABEL_ROLE,
)
from asyncdeploy.masking import mask_tree
from asyncdeploy.plan import (
    DEFAULT_GATE_IMAGE,
    GATE_TOKEN_ENV,
    HTTPGet,
    WorkloadPlan,
    plan_digest,
    plan_to_mapping,
)
from asyncdeploy.plan.gating import expand_gates
from asyncdeploy.plan.schema import plan_schema

# Exactly the shape issue 15 asks for (the held-out acceptance check).
ACCEPTANCE = """
containers:
  - name: engine
    image: vllm/vllm-openai:v0.6.3                     # unmodified
    args: ["--model", "/models/m", "--port", "8001"]
    ports: [{container_port: 8000, host_port: 8000}]   # what clients reach: the gate
    gate: {upstream: 8001, ready: {path: /health}}     # the engine's own port and health path
"""


def acceptance_document() -> dict[str, Any]:
    return {"name": "vllm", **yaml.safe_load(ACCEPTANCE)}


def acceptance_plan(**changes: Any) -> WorkloadPlan:
    return WorkloadPlan.from_mapping({**acceptance_document(), **changes})


def test_the_acceptance_plan_validates_against_the_plan_and_the_schema() -> None:
    jsonschema.validate(acceptance_document(), plan_schema(), cls=jsonschema.Draft202012Validator)
    gate = acceptance_plan().containers[0].gate
    assert gate is not None
    assert (gate.upstream, gate.ready and gate.ready.path, gate.image) == (
        8001,
        "/health",
        DEFAULT_GATE_IMAGE,
    )


def test_the_gate_becomes_a_sidecar_before_the_engine_with_its_ports_and_readiness() -> None:
    plan = expand_gates(acceptance_plan(termination_grace_period_seconds=60))
    sidecar, engine = plan.containers
    assert (sidecar.name, sidecar.role, sidecar.image) == (
        "engine-gate",
        "sidecar",
        DEFAULT_GATE_IMAGE,
    )
    assert sidecar.command == ("python3", "-m", "asyncdeploy.gate")
    args = dict(zip(sidecar.args[::2], sidecar.args[1::2], strict=True))  # type: ignore[index]
    assert args["--listen"] == "8000"
    assert args["--admin-port"] == "9901"
    assert args["--admin-token-env"] == GATE_TOKEN_ENV
    assert args["--upstream"] == "8001"
    assert args["--ready-path"] == "/health"
    assert args["--drain-timeout"] == "55s"  # the grace less the engine's own exit
    assert (args["--header-timeout"], args["--idle-timeout"]) == ("10s", "120s")
    assert "--max-connections" not in args  # the gate's own default: from its descriptors
    assert sidecar.ports == ()  # the Pod's host ports are mapped from its main containers
    assert sidecar.checks.readiness is not None
    assert sidecar.checks.readiness.http == HTTPGet(path="/ready", port=8000)
    # The engine keeps what it is (its ports too); its drain is a GET to the gate.
    assert engine.image == "vllm/vllm-openai:v0.6.3"
    assert engine.args == ("--model", "/models/m", "--port", "8001")
    assert (engine.gate, engine.pre_stop) == (None, None)
    assert [p.container_port for p in engine.ports] == [8000]
    # ... on the gate's admin port (not one clients reach), with the token the gate holds
    token = sidecar.env[GATE_TOKEN_ENV]
    assert engine.pre_stop_http == HTTPGet(
        path=f"/-/drain?propagation_wait=10s&timeout=55s&token={token}", port=9901
    )


def test_each_expansion_draws_its_own_token_and_the_digest_does_not_see_it() -> None:
    """A fresh random token per expansion (clients cannot guess it), shared by the gate and
    the hook; the plan digest covers where it goes, not its value: applying the same plan
    again is unchanged (and keeps the running token)."""
    first, second = expand_gates(acceptance_plan()), expand_gates(acceptance_plan())
    tokens = [plan.containers[0].env[GATE_TOKEN_ENV] for plan in (first, second)]
    assert tokens[0] != tokens[1]
    assert all(re.fullmatch(r"[A-Za-z0-9_-]{24}", token) for token in tokens)
    for plan, token in zip((first, second), tokens, strict=True):
        hook = plan.containers[1].pre_stop_http
        assert hook is not None and hook.path.endswith(f"&token={token}")
    assert plan_digest(first) == plan_digest(second)
    assert tokens[0] not in str(mask_tree(plan_to_mapping(first)))  # printed: masked
    other = expand_gates(acceptance_plan(termination_grace_period_seconds=90))
    assert plan_digest(other) != plan_digest(first)  # anything else still counts


def test_expansion_is_idempotent_and_leaves_plans_without_a_gate_alone() -> None:
    once = expand_gates(acceptance_plan())
    assert expand_gates(once) == once
    plain = WorkloadPlan.from_mapping({"name": "a", "containers": [{"name": "b", "image": "i"}]})
    assert expand_gates(plain) is plain


def test_the_gates_limits_come_from_the_plan() -> None:
    document = acceptance_document()
    document["containers"][0]["gate"] |= {
        "header_timeout_seconds": 3,
        "idle_timeout_seconds": 30,
        "max_connections": 500,
    }
    sidecar = expand_gates(WorkloadPlan.from_mapping(document)).containers[0]
    args = dict(zip(sidecar.args[::2], sidecar.args[1::2], strict=True))  # type: ignore[index]
    assert (args["--header-timeout"], args["--idle-timeout"]) == ("3s", "30s")
    assert args["--max-connections"] == "500"
    for bad in ({"header_timeout_seconds": 0}, {"max_connections": 0}):
        document["containers"][0]["gate"] = {"upstream": 8001, **bad}
        with pytest.raises(PlanError, match=next(iter(bad))):
            WorkloadPlan.from_mapping(document)


def test_a_gate_without_ready_checks_the_engine_by_tcp() -> None:
    document = acceptance_document()
    document["containers"][0]["gate"] = {"upstream": 8001}
    sidecar = expand_gates(WorkloadPlan.from_mapping(document)).containers[0]
    assert sidecar.args is not None
    assert sidecar.args[sidecar.args.index("--ready-path") + 1] == ""


def test_an_h2c_gate_tells_the_gate_its_engines_protocol_and_checks_it_by_tcp() -> None:
    document = acceptance_document()
    document["containers"][0]["gate"] = {"upstream": 8001, "protocol": "h2c"}
    sidecar = expand_gates(WorkloadPlan.from_mapping(document)).containers[0]
    assert sidecar.args is not None
    assert sidecar.args[sidecar.args.index("--upstream-protocol") + 1] == "h2c"
    assert sidecar.args[sidecar.args.index("--ready-path") + 1] == ""
    # the default (http1) leaves an existing gate's sidecar as it was
    default = expand_gates(acceptance_plan()).containers[0]
    assert default.args is not None and "--upstream-protocol" not in default.args


@pytest.mark.parametrize(
    ("change", "path"),
    [
        ({"gate": {"upstream": 8000}}, "containers[0].gate.upstream"),
        ({"gate": {"upstream": 8001, "protocol": "h3"}}, "containers[0].gate.protocol"),
        (
            {"gate": {"upstream": 8001, "protocol": "h2c", "ready": {"path": "/health"}}},
            "containers[0].gate.ready",
        ),
        ({"gate": {"upstream": 8001, "admin_port": 8000}}, "containers[0].gate.admin_port"),
        ({"gate": {"upstream": 8001, "admin_port": 8001}}, "containers[0].gate.admin_port"),
        ({"ports": []}, "containers[0].gate"),
        ({"pre_stop": ["drain"]}, "containers[0].gate"),
        ({"role": "init"}, "containers[0]"),
        (
            {"gate": {"upstream": 8001, "ready": {"path": "health"}}},
            "containers[0].gate.ready.path",
        ),
    ],
)
def test_gates_that_cannot_work_are_refused_naming_the_field(
    change: dict[str, Any], path: str
) -> None:
    document = acceptance_document()
    document["containers"][0].update(change)
    with pytest.raises(PlanError) as caught:
        WorkloadPlan.from_mapping(document)
    assert caught.value.path.startswith(path), caught.value.path


def test_a_container_named_like_the_gate_sidecar_is_refused() -> None:
    document = acceptance_document()
    document["containers"].append({"name": "engine-gate", "image": "x"})
    with pytest.raises(PlanError, match="engine-gate"):
        WorkloadPlan.from_mapping(document)


def test_docker_and_podman_get_a_sidecar_and_a_hook_the_deployer_sends() -> None:
    plan = expand_gates(acceptance_plan())
    sidecar, engine = plan.containers
    gate_config = spec.container_config(plan, sidecar, "pause-id")
    engine_config = spec.container_config(plan, engine, "pause-id")
    assert gate_config["Labels"][LABEL_ROLE] == "sidecar"
    # The gate's readiness is checked from outside: nothing in either image is needed.
    assert json.loads(gate_config["Labels"][LABEL_READINESS_NET]) == {
        "http": {"port": 8000, "path": "/ready"},
        "timeout": 1,
    }
    token = sidecar.env[GATE_TOKEN_ENV]
    assert json.loads(engine_config["Labels"][LABEL_PRE_STOP_HTTP]) == {
        "port": 9901,
        "path": f"/-/drain?propagation_wait=10s&timeout=25s&token={token}",
    }
    assert {"Env": [f"{GATE_TOKEN_ENV}={token}"]}.items() <= gate_config.items()
    assert "Healthcheck" not in engine_config
    assert spec.pause_config(plan)["HostConfig"]["PortBindings"] == {
        "8000/tcp": [{"HostIp": "", "HostPort": "8000"}]
    }


def test_kubernetes_gets_a_native_sidecar_and_an_http_get_pre_stop() -> None:
    plan = expand_gates(acceptance_plan())
    token = plan.containers[0].env[GATE_TOKEN_ENV]
    pod = pod_manifest(plan, namespace="default")["spec"]
    (gate,) = pod["initContainers"]
    (engine,) = pod["containers"]
    assert gate["name"] == "engine-gate"
    assert gate["restartPolicy"] == "Always"
    assert gate["readinessProbe"]["httpGet"] == {"path": "/ready", "port": 8000}
    assert "ports" not in gate
    assert engine["image"] == "vllm/vllm-openai:v0.6.3"
    path = f"/-/drain?propagation_wait=10s&timeout=25s&token={token}"
    assert engine["lifecycle"]["preStop"] == {"httpGet": {"path": path, "port": 9901}}
    assert gate["env"] == [{"name": GATE_TOKEN_ENV, "value": token}]
    # the admin port is no container port: no Service can select it by name
    assert all(p["containerPort"] != 9901 for p in engine["ports"])
    assert engine["ports"][0] == {"containerPort": 8000, "protocol": "TCP", "hostPort": 8000}


def test_a_plan_sidecar_is_a_native_sidecar_after_the_init_containers() -> None:
    plan = WorkloadPlan.from_mapping(
        {
            "name": "w",
            "containers": [
                {"name": "proxy", "image": "p", "role": "sidecar"},
                {"name": "setup", "image": "s", "role": "init"},
                {"name": "app", "image": "a"},
            ],
        }
    )
    pod = pod_manifest(plan, namespace="default")["spec"]
    assert [(c["name"], c.get("restartPolicy")) for c in pod["initContainers"]] == [
        ("setup", None),
        ("proxy", "Always"),
    ]
    assert [c["name"] for c in pod["containers"]] == ["app"]


def test_probe_targets_are_sent_from_outside_for_http_and_tcp_only() -> None:
    from asyncdeploy.plan import Probe

    assert spec.probe_target(Probe(tcp=8001)) == {"tcp": 8001, "timeout": 1}
    assert spec.probe_target(Probe(exec=("true",))) is None


def test_the_gate_imports_only_the_kit_inside_the_package() -> None:
    """The gate leans on the kit (and the stdlib, anyio, attrs; uvloop if installed; HAProxy,
    a process it runs), never the deployer or drivers."""
    for path in Path(asyncdeploy.gate.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            inside = [n for n in names if n.split(".")[0] == "asyncdeploy"]
            assert all(n.startswith("asyncdeploy.workload") for n in inside), (path.name, inside)
            outside = {n.split(".")[0] for n in names} - {"asyncdeploy", "__future__"}
            import sys

            # uvloop is optional: only the command line tries it (``--loop auto``)
            optional = {"uvloop"} if path.name == "__main__.py" else set()
            allowed = {"anyio", "attrs"} | optional | set(sys.stdlib_module_names)
            assert outside <= allowed, (
                path.name,
                outside,
            )
