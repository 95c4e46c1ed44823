"""Every example plan, as a new user runs it: created by the CLI, reached on its published port,
drained — on real Docker and Podman, with only the images the project builds.

The plans are taken as written except for what a shared test engine needs: a unique name, the
run's label, the host port left to the engine (two runs must not fight over 18000), and the
project's pause image where a plan takes the default one from registry.k8s.io. The
GPU plan is the one exception, named here with its reason; a new plan is picked up by itself.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
import yaml

from asyncdeploy import Deployer
from asyncdeploy.labels import LABEL_WORKLOAD
from tests.engines.conftest import BUSYBOX, PAUSE, RUN_ID, RUN_LABEL
from tests.polling import until

pytestmark = pytest.mark.anyio
PLANS = Path(__file__).parents[2] / "examples" / "plans"
NOT_RUN_HERE = {
    # a vLLM image from a private registry on an NVIDIA GPU: this machine has neither; the plan
    # is validated, linted and translated per engine in tests/unit/test_accelerators.py
    "gpu-inference.yaml": "needs an NVIDIA GPU and a vLLM image",
    # public engine images on a GPU, behind the drain gate: validated, linted and expanded as
    # written in tests/unit/test_engine_presets.py; the gated path itself runs on both engines
    # with a stock-like image in tests/engines/test_gate.py
    "vllm.yaml": "needs an NVIDIA GPU and the public vLLM image",
    "sglang.yaml": "needs an NVIDIA GPU and the public SGLang image",
    "tgi.yaml": "needs an NVIDIA GPU and the public TGI image",
    # the public llama.cpp image cannot be pulled here: the plan runs as written but for the
    # image (the same llama-server, built locally) and the model, in tests/engines/
    # test_llama_server.py, which also shows its engine listening on loopback only
    "llama-server.yaml": "runs with the local llama-server build in test_llama_server.py",
}
RUN_HERE = sorted(p.name for p in PLANS.glob("*.yaml") if p.name not in NOT_RUN_HERE)


def test_every_plan_is_run_or_excused() -> None:
    """A new example plan is run below unless it is excused here with a reason."""
    assert set(NOT_RUN_HERE) <= {p.name for p in PLANS.glob("*.yaml")}
    assert {"minimal.yaml", "multi-container.yaml"} <= set(RUN_HERE)


def for_this_run(document: dict[str, Any], name: str) -> dict[str, Any]:
    """The plan as written, with a unique name, the run's label and engine-chosen host ports;
    the default pause image (registry.k8s.io's) is the project's own, as everywhere in tests."""
    document = {"pause_image": PAUSE, **document, "name": name}
    document["labels"] = {**(document.get("labels") or {}), RUN_LABEL: RUN_ID}
    for container in document["containers"]:
        for port in container.get("ports") or []:
            port["host_port"] = None
    return document


async def cli(driver: str, *args: str) -> tuple[int, str, str]:
    done = await anyio.run_process(
        [sys.executable, "-m", "asyncdeploy", "--driver", driver, *args], check=False
    )
    return done.returncode, done.stdout.decode(), done.stderr.decode()


@pytest.mark.parametrize("plan_file", RUN_HERE)
async def test_example_plan_is_created_reached_and_drained(
    deployer: Deployer, plan_file: str, tmp_path: Path
) -> None:
    driver = deployer.driver_name
    document = yaml.safe_load((PLANS / plan_file).read_text())
    name = f"t{RUN_ID}-ex-{Path(plan_file).stem}-{driver}"[:63]
    path = tmp_path / plan_file
    path.write_text(yaml.safe_dump(for_this_run(document, name)))

    code, out, err = await cli(driver, "lint", str(PLANS / plan_file))
    assert "listens on" not in out, out  # the published port is one the server serves

    code, out, err = await cli(driver, "create", "-f", str(path), "--wait", "--timeout", "90s")
    assert code == 0, out + err

    code, out, err = await cli(driver, "get", name, "-o", "json")
    assert code == 0, err
    status = json.loads(out)  # one object, as kubectl get NAME -o json
    planned = [p["container_port"] for c in document["containers"] for p in c.get("ports") or []]
    published = {p["container_port"]: p["host_port"] for p in status["ports"]}
    assert set(published) == set(planned), status["ports"]

    code, described, err = await cli(driver, "get", name)
    assert code == 0, err
    for container_port, host_port in published.items():
        assert f"{host_port}->{container_port}/tcp" in described, described

    async with httpx.AsyncClient(timeout=5) as client:
        for host_port in published.values():

            async def answers(port: int = host_port) -> bool:
                try:
                    response = await client.get(f"http://127.0.0.1:{port}/short")
                except httpx.TransportError:
                    return False
                return response.status_code == 200

            await until(answers, timeout=20)

    code, out, err = await cli(driver, "delete", name, "--output", "json")
    assert code == 0, out + err
    last = json.loads(out.strip().splitlines()[-1])
    assert last["event"] == "DrainFinished"
    outcomes = {c["name"]: c["outcome"] for c in last["containers"]}
    assert "killed" not in outcomes.values() and last["errors"] == [], last
    assert await deployer.list({RUN_LABEL: RUN_ID, LABEL_WORKLOAD: name}) == []


async def test_lint_inspect_images_checks_ports_against_what_the_image_exposes(
    deployer: Deployer, tmp_path: Path
) -> None:
    """An image the lint knows nothing of by name (a tag of the demo image, which EXPOSEs 8080):
    with --inspect-images the engine says what it EXPOSEs."""
    driver = deployer.driver_name
    client = deployer.driver.session.client  # type: ignore[attr-defined]
    repository = f"t{RUN_ID}-lint/exposed-{driver}"
    await client.images.tag("localhost/asyncdeploy/demo:latest", repo=repository, tag="1")
    try:
        plan = tmp_path / "plan.yaml"
        for port, warned in ((9000, True), (8080, False)):
            plan.write_text(
                yaml.safe_dump(
                    {
                        "name": "lint-exposed",
                        "containers": [
                            {
                                "name": "s",
                                "image": f"{repository}:1",
                                "command": ["python3", "-m", "http.server"],
                                "args": None,
                                "ports": [{"container_port": port}],
                            }
                        ],
                    }
                )
            )
            code, out, err = await cli(driver, "lint", str(plan))
            assert "listens on" not in out  # a command of its own: nothing known
            document = yaml.safe_load(plan.read_text())
            del document["containers"][0]["command"], document["containers"][0]["args"]
            plan.write_text(yaml.safe_dump(document))
            code, out, err = await cli(driver, "lint", str(plan))
            assert "listens on" not in out, out  # without asking the engine: nothing known
            code, out, err = await cli(driver, "lint", "--inspect-images", str(plan))
            assert code == 0, err
            assert ("listens on 8080" in out and "EXPOSEs" in out) is warned, out
    finally:
        with anyio.CancelScope(shield=True):
            await client.images.delete(f"{repository}:1")


async def test_get_shows_a_containers_exit_and_restarts_from_the_engine(
    deployer: Deployer, name: Any, tmp_path: Path
) -> None:
    """`get NAME`: the engine's records say the container died and with which code."""
    driver = deployer.driver_name
    workload = name("desc")
    plan = tmp_path / "plan.yaml"
    plan.write_text(
        yaml.safe_dump(
            {
                "name": workload,
                "pause_image": PAUSE,
                "labels": {RUN_LABEL: RUN_ID},
                "containers": [
                    {
                        "name": "server",
                        "image": "localhost/asyncdeploy/demo:latest",
                        "ports": [{"container_port": 8080}],
                    },
                    {"name": "job", "image": BUSYBOX, "command": ["sh", "-c", "exit 3"]},
                ],
            }
        )
    )
    code, _, err = await cli(driver, "create", "-f", str(plan))
    assert code == 0, err

    async def job_died() -> bool:
        status = await deployer.get(workload)
        return any(c.name == "job" and c.state == "exited" for c in status.containers)

    await until(job_died, timeout=20)
    code, described, err = await cli(driver, "get", workload)
    assert code == 0, err
    job = next(line for line in described.splitlines() if line.split()[:2] == ["run", "job"])
    assert job.split()[2] == "exited" and " 3 " in job, described
    assert "->8080/tcp" in described
    events = described.split("Events", 1)[1]
    assert "die" in events and "exit code 3" in events, described
