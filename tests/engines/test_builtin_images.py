"""The built-in images on real engines: one the engine lacks is never pulled, and the create
names the command that builds it; from a wheel in a fresh venv, with no checkout, the documented
command builds both and a gated plan and the demo plan run, with nothing pulled from anywhere."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.request
import venv
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from asyncdeploy import Container, Deployer
from asyncdeploy._errors import CreateError
from asyncdeploy._events import Event, PullStarted
from asyncdeploy.builtin_images import DEMO_IMAGE, GATE_IMAGE
from asyncdeploy.cli.images import base_missing
from asyncdeploy.verify._ports import free_port
from tests.cli_runner import invoke_in_thread
from tests.engines.conftest import PAUSE, RUN_ID, RUN_LABEL
from tests.engines.helpers import plan
from tests.engines.test_newcomer import DEFAULT_BASE, DEFAULT_PAUSE, README, bases_file, block

ROOT = Path(__file__).resolve().parents[2]
STOCK_IMAGE = "asyncdeploy-test/stock-engine:latest"  # ci/build-gate-image.sh: knows nothing of us


@pytest.mark.anyio
async def test_a_missing_built_in_image_is_refused_never_pulled(
    deployer: Deployer, name: Callable[[str], str]
) -> None:
    image = f"localhost/asyncdeploy/demo:absent-{RUN_ID}"
    seen: list[Event] = []
    missing = plan(name("absent"), [Container(name="s", image=image, image_pull_policy="Always")])
    with pytest.raises(CreateError) as caught:
        await deployer.create(missing, on_event=seen.append)
    command = f"asyncdeploy --driver {deployer.driver_name} images build demo --tag absent-{RUN_ID}"
    assert command in str(caught.value)
    assert not [e for e in seen if isinstance(e, PullStarted)], seen
    assert await deployer.list({RUN_LABEL: RUN_ID, "never": "made"}) == []


@pytest.mark.anyio
async def test_a_base_image_that_cannot_be_had_is_said_in_one_line(
    deployer: Deployer, tmp_path: Path
) -> None:
    """Issue 32 item 6: a base the engine lacks and cannot pull (here a name no registry
    serves; a newcomer's was Docker Hub's python image with no network: a DNS error) fails the
    build with one line that names it and what to do: ``docker load``, ``--base``,
    ``ASYNCDEPLOY_IMAGE_BASE``."""
    base = f"localhost/asyncdeploy-test/no-such-base:{RUN_ID}"
    env = {"XDG_CACHE_HOME": _wheel_cache(tmp_path)}
    args = ["--driver", deployer.driver_name, "images", "build", "demo", "--base", base]
    done = await invoke_in_thread(*args, "--tag", f"nobase-{RUN_ID}", env=env)
    assert done.exit_code == 1, done.output
    [line] = [x for x in done.stderr.splitlines() if x.startswith("Error:")]
    assert line == "Error: " + base_missing(base, deployer.driver_name), done.stderr
    assert done.stderr.rstrip().endswith(line), "the one line is the last word"
    assert "--base IMAGE or ASYNCDEPLOY_IMAGE_BASE" in line and "docker load" in line
    assert await deployer.image_labels(f"localhost/asyncdeploy/demo:nobase-{RUN_ID}") is None


@pytest.fixture
def bases_as_a_file(tmp_path: Path) -> Iterator[Path]:
    with bases_file(tmp_path) as tar:
        yield tar


def _sh(args: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, check=False, **kw)  # type: ignore[call-overload, no-any-return]


def _wheel_cache(tmp_path: Path) -> str:
    """Where ``images build`` keeps the wheels it downloads: ci/'s image cache when there is
    one (the download is the same every run), else this test's own folder."""
    shared = Path(os.environ.get("IMAGE_CACHE_DIR", "/var/cache/asyncdeploy-test-images"))
    if shared.is_dir() and os.access(shared, os.W_OK):
        return str(shared / "xdg")
    return str(tmp_path / "cache")


def _yaml_block(name: str) -> str:
    [code] = re.findall(rf"<!-- snippet: {name} -->\n```yaml\n(.*?)```", README, re.DOTALL)
    return str(code)


@pytest.mark.docker
@pytest.mark.engine
def test_the_offline_block_brings_in_the_default_base_and_pause(
    tmp_path: Path, bases_as_a_file: Path
) -> None:
    """The README's offline block, verbatim, with no registry in reach: the default base and
    pause images are on the engine under their names, and ``images build`` (this test's own
    tag: the untagged images are shared) builds on the default base, no ``--base`` needed."""
    [load] = block("offline")
    env = {k: v for k, v in os.environ.items() if k != "ASYNCDEPLOY_IMAGE_BASE"}
    loaded = _sh(["bash", "-c", load], cwd=bases_as_a_file.parent, env=env)
    assert loaded.returncode == 0, loaded.stderr
    for name in (DEFAULT_BASE, DEFAULT_PAUSE):
        assert _sh(["docker", "image", "inspect", name]).returncode == 0, name
    tag = f"offline-{RUN_ID}"
    env["XDG_CACHE_HOME"] = _wheel_cache(tmp_path)
    command = [sys.executable, "-m", "asyncdeploy", "--driver", "docker", "images", "build"]
    try:
        built = _sh([*command, "demo", "--tag", tag], env=env)
        assert built.returncode == 0, built.stderr
        assert f"(base {DEFAULT_BASE}," in built.stderr, built.stderr
    finally:
        _sh(["docker", "rmi", f"localhost/asyncdeploy/demo:{tag}"])


@pytest.mark.docker
@pytest.mark.engine
def test_from_a_wheel_with_no_checkout(tmp_path: Path, bases_as_a_file: Path) -> None:
    """The README's offline and wheel blocks, verbatim, in an empty folder holding only the
    wheel, the README's hello.yaml and the bases' file, from a fresh venv: ``docker load`` of the
    base and pause images (no registry is reachable here), ``asyncdeploy images build`` on the
    default base, the demo plan serves and drains; then a gated plan, read from stdin, before an
    engine that knows nothing of asyncdeploy. Nothing is pulled: the built-in images are never
    pulled, and no other image is missing."""
    home = bases_as_a_file.parent  # no checkout: the wheel, a plan and the bases, nothing else
    built = _sh(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(home), str(ROOT)]
    )
    assert built.returncode == 0, built.stderr
    [wheel] = [p.name for p in home.glob("asyncdeploy-*.whl")]
    (home / "hello.yaml").write_text(_yaml_block("hello-plan"))
    where = tmp_path / "venv"
    venv.create(where, with_pip=True)
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("PYTHONPATH", "VIRTUAL_ENV", "ASYNCDEPLOY_DRIVER", "CONTAINER_HOST")
    }
    env.update(
        PATH=f"{where / 'bin'}:{os.environ['PATH']}",
        VIRTUAL_ENV=str(where),
        XDG_CACHE_HOME=_wheel_cache(tmp_path),  # the images' wheels, kept between runs
        PIP_CACHE_DIR=os.environ.get("PIP_CACHE_DIR", os.path.expanduser("~/.cache/pip")),
        DOCKER_HOST=os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock"),
    )
    env.pop("ASYNCDEPLOY_IMAGE_BASE", None)  # the documented default base, loaded from the file

    def sh(line: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return _sh(["bash", "-c", line], cwd=home, env=env, input=stdin)

    lines = block("wheel")
    assert wheel in lines[0], f"the README installs {lines[0]!r}; the wheel is {wheel}"
    gated = (
        f"name: t{RUN_ID}-wheel-gated\nlabels: {{{RUN_LABEL}: '{RUN_ID}'}}\npause_image: {PAUSE}\n"
        f"containers:\n  - name: engine\n    image: {STOCK_IMAGE}\n"
        f"    ports: [{{container_port: 8000, host_port: {free_port()}, host_ip: 127.0.0.1}}]\n"
        "    gate: {upstream: 8001, ready: {path: /health}, propagation_seconds: 1}\n"
    )
    [load] = block("offline")
    loaded = sh(load)
    assert loaded.returncode == 0, loaded.stderr
    assert DEFAULT_BASE.removeprefix("docker.io/library/") in loaded.stdout, loaded.stdout
    assert DEFAULT_PAUSE in loaded.stdout, loaded.stdout
    try:
        outputs = {}
        for line in lines:
            done = sh(line)
            assert done.returncode == 0, (line, done.stdout, done.stderr)
            outputs[line.split()[1]] = done
        assert outputs["images"].stdout.split() == [GATE_IMAGE, DEMO_IMAGE]
        assert "pulling" not in outputs["create"].stderr, outputs["create"].stderr
        assert outputs["-s"].stdout.strip(), "the demo server answered nothing"
        created = sh("asyncdeploy create -f - --wait -o json", stdin=gated)
        assert created.returncode == 0, created.stderr
        events = [json.loads(line) for line in created.stdout.splitlines()]
        assert events and not [e for e in events if e.get("event", "").startswith("Pull")]
        port = gated.split("host_port: ")[1].split(",")[0]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/short", timeout=10) as answer:
            assert answer.status == 200  # through the gate, to the stock engine
        assert sh(f"asyncdeploy delete t{RUN_ID}-wheel-gated").returncode == 0
        again = sh("asyncdeploy images build demo")
        assert again.returncode == 0 and "is current" in again.stderr, again.stderr
    finally:
        for workload in ("hello", f"t{RUN_ID}-wheel-gated"):
            sh(f"asyncdeploy delete {workload} --grace-period-seconds 0")
