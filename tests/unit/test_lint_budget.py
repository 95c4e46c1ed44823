"""``lint`` prints the termination budget line by line, and knows a gate's ports."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from asyncdeploy import Container, Port, WorkloadPlan
from asyncdeploy.plan import Gate
from asyncdeploy.plan.lint import lint_plan
from tests.cli_runner import invoke

ROOT = Path(__file__).resolve().parents[2]


def test_lint_prints_the_budget_of_the_readmes_first_plan_line_by_line() -> None:
    result = invoke("lint", str(ROOT / "examples" / "plans" / "minimal.yaml"))
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[:5] == [
        "hello: termination budget, grace 30 s",
        "  server propagation wait   10 s  the demo image's own (--propagation-window)",
        "         drain               0 s  not known: --expected-drain",
        "         margin             15 s  sidecars, logs (--margin)",
        "         total              25 s  holds, 5 s to spare",
    ], result.stdout  # issue 32 item 4: the built-in demo image's window is counted


def test_the_demo_images_window_is_the_kits_default_and_the_readme_shortens_it(
    tmp_path: Path,
) -> None:
    """The package builds the demo image, so lint knows its window: the kit's default, or the
    ``--propagation-window`` its command line gives (the README's hello plan says how)."""
    from asyncdeploy.builtin_images import DEMO_WINDOW_SECONDS
    from asyncdeploy.workload.window import PropagationWindow

    assert PropagationWindow().max_seconds == DEMO_WINDOW_SECONDS
    readme = (ROOT / "README.md").read_text()
    [command] = re.findall(r"`(command: \[python3, -m, asyncdeploy\.workload\.demo[^`]*)`", readme)
    hello = yaml.safe_load(
        readme.split("<!-- snippet: hello-plan -->\n```yaml\n")[1].split("```")[0]
    )
    hello["containers"][0].update(yaml.safe_load(command))
    path = tmp_path / "hello.yaml"
    path.write_text(yaml.safe_dump(hello))
    result = invoke("lint", str(path), "-o", "json")
    [report] = [json.loads(line) for line in result.stdout.splitlines()]
    [budget] = report["budget"]
    assert budget["lines"][0]["what"] == "propagation wait"
    assert budget["lines"][0]["seconds"] == 1


def test_the_budget_adds_what_it_knows_and_says_when_it_is_short(tmp_path: Path) -> None:
    path = tmp_path / "plan.yaml"
    path.write_text(
        "name: llm\ntermination_grace_period_seconds: 40\ncontainers:\n"
        "  - name: server\n    image: i\n"
        "    pre_stop: [asyncdeploy, drain, --propagation-wait, 10s, --timeout, 30s]\n"
        "    resources: {nvidia.com/gpu: 1}\n"
    )
    result = invoke("lint", str(path), "-o", "json")
    [report] = [json.loads(line) for line in result.stdout.splitlines()]
    [budget] = report["budget"]
    parts = [(line["what"], line["seconds"]) for line in budget["lines"]]
    assert parts == [("propagation wait", 10), ("drain", 30), ("GPU release", 10), ("margin", 15)]
    assert budget["total"] == 65 and budget["holds"] is False
    text = invoke("lint", str(path)).stdout
    assert "total              65 s  short by 25 s" in text
    assert all(len(line) < 80 for line in text.splitlines()[:6])


def _gated(engine_port: int) -> WorkloadPlan:
    demo = ["python3", "-m", "asyncdeploy.workload.demo", "--port", str(engine_port)]
    return WorkloadPlan(
        name="g",
        containers=[
            Container(
                name="engine",
                image="localhost/asyncdeploy/demo:latest",
                command=demo,
                ports=[Port(container_port=8000, host_port=18000)],
                gate=Gate(upstream=8001),
            )
        ],
    )


def test_a_gated_engine_behind_its_gate_is_no_port_warning() -> None:
    """The gate answers on 8000 and passes on to 8001, where the engine listens: quiet."""
    findings = [f for f in lint_plan(_gated(8001)) if "listens on" in f.message]
    assert findings == []


def test_an_engine_not_on_the_gates_upstream_is_warned_there() -> None:
    [finding] = [f for f in lint_plan(_gated(8002)) if "listens on" in f.message]
    assert finding.path == "containers[0].gate.upstream"
    assert "listens on 8002" in finding.message and "not on 8001" in finding.message
