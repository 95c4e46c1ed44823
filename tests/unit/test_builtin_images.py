"""The gate and demo images: names no registry resolves to someone else's account, never pulled,
and one recipe in the package that the project's own image scripts agree with."""

from __future__ import annotations

import re
import tarfile
from io import BytesIO
from pathlib import Path

import pytest

from asyncdeploy import Container, Port, WorkloadPlan
from asyncdeploy.builtin_images import (
    DEMO_IMAGE,
    GATE_IMAGE,
    build_command,
    built_in,
    missing_message,
)
from asyncdeploy.cli._recipes import DEMO_REQUIREMENTS, GATE_REQUIREMENTS, recipe
from asyncdeploy.drivers.kubernetes._manifest import pod_manifest
from asyncdeploy.plan import DEFAULT_GATE_IMAGE, Gate

ROOT = Path(__file__).resolve().parents[2]


def docker_hub(image: str) -> bool:
    """Whether an engine resolves ``image`` on Docker Hub (the distribution's normalisation: a
    first component with no '.' or ':' that is not ``localhost`` is a Docker Hub account)."""
    first, slash, _ = image.partition("/")
    return not slash or not ("." in first or ":" in first or first == "localhost")


def test_the_built_in_images_are_never_docker_hub_names() -> None:
    from asyncdeploy.verify import DEMO_IMAGE as VERIFY_DEMO

    for image in (DEFAULT_GATE_IMAGE, VERIFY_DEMO, GATE_IMAGE, DEMO_IMAGE):
        assert not docker_hub(image), image
        assert built_in(image) is not None, image


def test_the_examples_readme_and_docs_name_no_docker_hub_copy_of_them() -> None:
    texts = [ROOT / "README.md", *ROOT.glob("docs/*.md"), *ROOT.glob("examples/**/*.*")]
    for path in texts:
        for image in re.findall(r"[\w.:/-]*asyncdeploy-(?:gate|demo)/[\w.:-]+", path.read_text()):
            pytest.fail(f"{path.relative_to(ROOT)} names {image}, a Docker Hub name")


@pytest.mark.parametrize(
    ("image", "kind"),
    [
        ("localhost/asyncdeploy/gate:latest", "gate"),
        ("localhost/asyncdeploy/demo:kube", "demo"),
        ("localhost/asyncdeploy/demo@sha256:" + "a" * 64, "demo"),
        ("localhost/asyncdeploy/demo", "demo"),
        ("asyncdeploy/demo:latest", None),  # a Docker Hub account's: not ours
        ("127.0.0.1:5000/asyncdeploy/demo:latest", None),  # a registry's copy: pulled as usual
        ("localhost/asyncdeploy/other:latest", None),
    ],
)
def test_which_references_are_built_in(image: str, kind: str | None) -> None:
    assert built_in(image) == kind


def test_a_missing_one_names_the_command_that_builds_it() -> None:
    assert build_command(GATE_IMAGE) == "asyncdeploy images build gate"
    message = missing_message("localhost/asyncdeploy/demo:t1", "podman")
    assert "asyncdeploy --driver podman images build demo --tag t1" in message
    assert "never pulled" in message


def test_on_kubernetes_the_node_never_pulls_them() -> None:
    plan = WorkloadPlan(
        name="g",
        containers=[
            Container(
                name="engine",
                image="busybox:1",
                image_pull_policy="Always",
                ports=[Port(container_port=8000)],
                gate=Gate(upstream=8001),
            ),
            Container(name="demo", image=DEMO_IMAGE, image_pull_policy="Always"),
        ],
    )
    from asyncdeploy.plan.gating import expand_gates

    pod = pod_manifest(expand_gates(plan), namespace="default")
    containers = pod["spec"]["containers"] + pod["spec"].get("initContainers", [])
    policies = {c["name"]: c.get("imagePullPolicy") for c in containers}
    assert policies == {"engine": "Always", "engine-gate": "Never", "demo": "Never"}


def _bash_array(script: str, name: str) -> list[str]:
    [found] = re.findall(rf"^{name}=\(([^)]*)\)", script, re.MULTILINE)
    return found.split()


def test_the_ci_scripts_build_what_the_package_builds() -> None:
    """ci/build-*-image.sh make the images for the project's tests from a checkout; the package
    makes them from an install: the names, the requirement lists and the commands agree."""
    gate_script = (ROOT / "ci" / "build-gate-image.sh").read_text()
    demo_script = (ROOT / "ci" / "build-demo-image.sh").read_text()
    assert f"GATE=${{GATE_IMAGE:-{GATE_IMAGE}}}\n" in gate_script
    assert f"IMAGE=${{DEMO_IMAGE:-{DEMO_IMAGE}}}\n" in demo_script
    assert tuple(_bash_array(gate_script, "REQS")) == GATE_REQUIREMENTS
    [demo_list] = re.findall(r"^reqs = (\[.*\])$", demo_script, re.MULTILINE)
    assert tuple(eval(demo_list)) == DEMO_REQUIREMENTS
    gate, demo = recipe("gate", base=None, python="3.11"), recipe("demo", base=None, python="3.11")
    assert 'ENTRYPOINT ["python3", "-m", "asyncdeploy.gate"]' in gate.dockerfile()
    assert 'ENTRYPOINT ["python3", "-m", "asyncdeploy.gate"]' in gate_script
    assert '"asyncdeploy.workload.demo", "--port", "8080"' in demo.dockerfile()
    assert '"asyncdeploy.workload.demo", "--port", "8080"' in demo_script
    kube = (ROOT / "ci" / "kube-common.sh").read_text()
    for image in (GATE_IMAGE, DEMO_IMAGE):
        assert image.rpartition(":")[0] in kube


def test_the_build_context_holds_the_installed_package_and_no_network_step() -> None:
    made = recipe("demo", base="asyncdeploy-test/python:latest", python="3.11")
    with tarfile.open(fileobj=BytesIO(made.context([]))) as tar:
        names = tar.getnames()
        dockerfile = tar.extractfile("Dockerfile").read().decode()  # type: ignore[union-attr]
    assert "build/site/asyncdeploy/workload/demo.py" in names
    assert any(n.endswith(".dist-info/METADATA") for n in names)
    assert not any("__pycache__" in n for n in names)
    assert dockerfile.startswith("FROM asyncdeploy-test/python:latest\n")
    assert "pip install" not in dockerfile  # the wheels come in the context
    assert recipe("gate", base=None, python="3.12").base == (
        "docker.io/library/python:3.12-slim-bookworm"
    )


def test_a_node_without_one_says_how_to_provide_it() -> None:
    """The kubelet's ErrImageNeverPull for a built-in image names the command that builds it."""
    from asyncdeploy.drivers.kubernetes._kubelet import startup_failure

    waiting = {"reason": "ErrImageNeverPull", "message": "image is not present"}
    pod = {
        "spec": {
            "initContainers": [
                {"name": "engine-gate", "image": GATE_IMAGE, "restartPolicy": "Always"}
            ],
            "containers": [{"name": "engine", "image": "busybox:1"}],
        },
        "status": {
            "initContainerStatuses": [{"name": "engine-gate", "state": {"waiting": waiting}}]
        },
    }
    failure = startup_failure(pod)
    assert failure is not None and failure.reason == "ErrImageNeverPull"
    assert "asyncdeploy images build gate on Docker or Podman" in failure.message
