"""lint knows how vLLM, SGLang, TGI, Triton and llama.cpp's server stop."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import pytest

from asyncdeploy.plan import WorkloadPlan
from asyncdeploy.plan.gating import expand_gates
from asyncdeploy.plan.lint import lint_plan
from asyncdeploy.plan.presets import find_preset
from asyncdeploy.plan.schema import plan_schema

PLANS = Path(__file__).parents[2] / "examples" / "plans"
GATE = {"upstream": 8001, "ready": {"path": "/health"}}


def plan(grace: int = 120, **engine: Any) -> WorkloadPlan:
    container = {"name": "engine", "ports": [{"container_port": 8000}], **engine}
    return WorkloadPlan.from_mapping(
        {"name": "p", "termination_grace_period_seconds": grace, "containers": [container]}
    )


def messages(p: WorkloadPlan) -> list[str]:
    return [f.message for f in lint_plan(p)]


@pytest.mark.parametrize(
    ("image", "argv", "name"),
    [
        ("vllm/vllm-openai:v0.6.3", [], "vLLM"),
        ("registry.local/my/vllm-openai@sha256:abc", [], "vLLM"),
        ("my/image:1", ["vllm", "serve", "m"], "vLLM"),
        ("lmsysorg/sglang:v0.4.6", [], "SGLang"),
        ("my/image:1", ["python3", "-m", "sglang.launch_server"], "SGLang"),
        ("ghcr.io/huggingface/text-generation-inference:2.4.1", [], "TGI"),
        ("nvcr.io/nvidia/tritonserver:24.08-py3", [], "Triton"),
        ("ghcr.io/ggml-org/llama.cpp:server", [], "llama.cpp server"),
        ("my/image:1", ["/app/llama-server", "-m", "x"], "llama.cpp server"),
    ],
)
def test_presets_are_found_by_image_or_command(image: str, argv: list[str], name: str) -> None:
    preset = find_preset(image, argv)
    assert preset is not None and preset.name == name


def test_an_unknown_server_has_no_preset() -> None:
    assert find_preset("my/server:1", ["python3", "app.py"]) is None


@pytest.mark.parametrize(
    "image", ["vllm/vllm-openai:v0.6.3", "lmsysorg/sglang:v0", "ghcr.io/ggml-org/llama.cpp:server"]
)
def test_a_server_that_aborts_on_sigterm_without_a_drain_before_it_is_flagged(image: str) -> None:
    found = messages(plan(image=image))
    assert any("aborts in-flight requests on SIGTERM" in m and "gate" in m for m in found), found
    assert not any("aborts" in m for m in messages(plan(image=image, gate=GATE)))


def test_vllm_with_a_shutdown_timeout_drains_itself_and_the_budget_counts_it() -> None:
    ok = plan(image="vllm/vllm-openai:v0.6.3", args=["--shutdown-timeout", "30"])
    assert not any("aborts" in m for m in messages(ok))
    short = plan(grace=40, image="vllm/vllm-openai:v0.6.3", args=["--shutdown-timeout", "30"])
    assert any("cannot hold" in m and "vLLM's own shutdown (10 s)" in m for m in messages(short))


def test_the_budget_must_hold_the_engines_own_drain_shutdown_and_a_margin() -> None:
    """Triton waits up to 30 s on SIGTERM by default: with no hook, 40 s cannot hold that, its
    own exit and a margin; 60 s can. The gate's propagation counts in the general budget."""
    triton = "nvcr.io/nvidia/tritonserver:24.08-py3"
    found = messages(plan(grace=40, image=triton, pre_stop=None))
    assert any("40 s cannot hold" in m and "Triton's own shutdown" in m for m in found), found
    assert not any("cannot hold" in m for m in messages(plan(grace=60, image=triton)))
    gated = messages(plan(grace=20, image="lmsysorg/sglang:v0", gate=GATE))
    assert any("leaves 10 s after" in m for m in gated), gated
    assert sum("20 s" in m for m in gated) == 1, gated  # one budget finding, not two


@pytest.mark.parametrize(
    ("engine", "grace"),
    [
        ({"image": "vllm/vllm-openai:v0.6.3", "args": ["--shutdown-timeout=60"], "gate": GATE}, 90),
        (
            {
                "image": "nvcr.io/nvidia/tritonserver:24.08-py3",  # --exit-timeout-secs 30 by default
                "pre_stop": ["drain", "--propagation-wait", "10s", "--timeout", "60s"],
            },
            90,
        ),
    ],
)
def test_a_prestop_drain_and_a_sigterm_drain_spending_the_budget_twice_is_flagged(
    engine: dict[str, Any], grace: int
) -> None:
    found = messages(plan(grace=grace, **engine))
    assert any("spend the" in m and "twice" in m for m in found), found


def test_a_short_engine_timeout_after_a_prestop_drain_is_fine() -> None:
    engine = {"image": "vllm/vllm-openai:v0.6.3", "args": ["--shutdown-timeout", "3"], "gate": GATE}
    assert not any("twice" in m for m in messages(plan(grace=90, **engine)))


LISTENING = [
    # (image, argv, env, where the engine listens, flagged behind a gate)
    ("vllm/vllm-openai:v0.6.3", [], {}, "0.0.0.0", True),
    ("vllm/vllm-openai:v0.6.3", ["--host", "127.0.0.1"], {}, "127.0.0.1", False),
    ("vllm/vllm-openai:v0.6.3", ["--host=0.0.0.0"], {}, "0.0.0.0", True),
    ("lmsysorg/sglang:v0.4.6", [], {}, "127.0.0.1", False),
    ("lmsysorg/sglang:v0.4.6", ["--host", "0.0.0.0"], {}, "0.0.0.0", True),
    ("ghcr.io/huggingface/text-generation-inference:2.4.1", [], {}, "0.0.0.0", True),
    (
        "ghcr.io/huggingface/text-generation-inference:2.4.1",
        [],
        {"HOSTNAME": "tgi-0"},
        "tgi-0",
        True,
    ),
    (
        "ghcr.io/huggingface/text-generation-inference:2.4.1",
        ["--hostname", "127.0.0.1"],
        {"HOSTNAME": "tgi-0"},
        "127.0.0.1",
        False,
    ),
    ("nvcr.io/nvidia/tritonserver:24.08-py3", [], {}, "0.0.0.0", True),
    ("ghcr.io/ggml-org/llama.cpp:server", [], {}, "0.0.0.0", True),
    ("ghcr.io/ggml-org/llama.cpp:server", [], {"LLAMA_ARG_HOST": "127.0.0.1"}, "127.0.0.1", False),
    ("ghcr.io/ggml-org/llama.cpp:server", ["--host", "::1"], {}, "::1", False),
]


@pytest.mark.parametrize(("image", "argv", "env", "address", "flagged"), LISTENING)
def test_behind_a_gate_an_engine_listening_beyond_loopback_is_flagged(
    image: str, argv: list[str], env: dict[str, str], address: str, flagged: bool
) -> None:
    """Issue 22 item 7: behind a gate the engine's own port must be on the workload's loopback,
    else a client that finds it goes around the drain. Without a gate there is nothing to go
    around: no such finding."""
    preset = find_preset(image, argv)
    assert preset is not None
    assert preset.listen_address(argv, env)[0] == address
    gated = lint_plan(plan(image=image, args=argv, env=env, gate=GATE))
    found = [f for f in gated if "goes around the gate" in f.message]
    assert len(found) == flagged, gated
    if flagged:
        assert found[0].path == "containers[0].args" and found[0].level == "warning"
        assert f"{preset.listen_flag} 127.0.0.1" in found[0].message
    ungated = lint_plan(plan(image=image, args=argv, env=env, pre_stop=["drain"]))
    assert not any("goes around the gate" in f.message for f in ungated)


@pytest.mark.parametrize("name", ["vllm.yaml", "sglang.yaml", "tgi.yaml", "llama-server.yaml"])
def test_the_engine_example_plans_validate_lint_clean_and_put_a_gate_in_front(name: str) -> None:
    import yaml

    document = yaml.safe_load((PLANS / name).read_text())
    jsonschema.validate(document, plan_schema(), cls=jsonschema.Draft202012Validator)
    example = WorkloadPlan.from_file(PLANS / name)
    # the budget, the presets and the checks are clean; the one warning is the fixed host port
    # the plan shape publishes (a replace on one host then drains the old one first)
    findings = [(f.level, f.path) for f in lint_plan(example)]
    assert findings == [("warning", "containers[0].ports[0].host_port")]
    preset = find_preset(example.containers[0].image, example.containers[0].args or ())
    assert preset is not None
    sidecar, engine = expand_gates(example).containers
    assert (sidecar.role, engine.image) == ("sidecar", example.containers[0].image)
    assert engine.pre_stop_http is not None and engine.pre_stop_http.path.startswith("/-/drain")
    # the engine's own port on the workload's loopback: only the gate reaches it
    argv = example.containers[0].args or ()
    address, said_by = preset.listen_address(argv, example.containers[0].env)
    assert (address, said_by) == ("127.0.0.1", preset.listen_flag)
