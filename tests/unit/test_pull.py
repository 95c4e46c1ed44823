"""The pure parts of image pulls: which images, the engine's progress stream, credentials,
the Kubernetes fields, the text output. The real pulls are in tests/engines/test_pull.py."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

import pytest

from asyncdeploy import Autoheal, Container, CreateError, PlanError, RegistryAuth, WorkloadPlan
from asyncdeploy._events import PullFailed, PullFinished, PullProgress, PullStarted, event_to_dict
from asyncdeploy.cli.render import EventRenderer, PullView
from asyncdeploy.drivers.engine._auth import auth_header, find_credentials, registry_of
from asyncdeploy.drivers.engine._pull import LayerProgress, images_to_pull, reference_params
from asyncdeploy.drivers.kubernetes._manifest import pod_manifest
from asyncdeploy.verify import from_registry

# Recorded from Docker 20.10 pulling a two-layer image (one layer already on the engine).
DOCKER_STREAM = [
    {"status": "Pulling from asyncdeploy-test/pull", "id": "v1"},
    {"status": "Already exists", "progressDetail": {}, "id": "1236c82ba4de"},
    {"status": "Pulling fs layer", "progressDetail": {}, "id": "2a1433ace73e"},
    {"status": "Downloading", "progressDetail": {"current": 32768, "total": 3000512}, "id": "2a1433ace73e"},
    {"status": "Downloading", "progressDetail": {"current": 1500000, "total": 3000512}, "id": "2a1433ace73e"},
    {"status": "Retrying in 5 seconds", "progressDetail": {}, "id": "2a1433ace73e"},
    {"status": "Verifying Checksum", "progressDetail": {}, "id": "2a1433ace73e"},
    {"status": "Download complete", "progressDetail": {}, "id": "2a1433ace73e"},
    {"status": "Extracting", "progressDetail": {"current": 3000512, "total": 3000512}, "id": "2a1433ace73e"},
    {"status": "Pull complete", "progressDetail": {}, "id": "2a1433ace73e"},
    {"status": "Digest: sha256:2ae72b217c90fac101d0901458059b3cc0aa594351e520f5af22c515bf19599e"},
]  # fmt: skip
# Recorded from Podman 4.3's compatible endpoint: no byte counts.
PODMAN_STREAM = [
    {"status": "Pulling fs layer", "progressDetail": {}, "id": "b659dd0a2ec5"},
    {"status": "Download complete", "progressDetail": {}, "id": "b659dd0a2ec5"},
    {"status": "Pulling fs layer", "progressDetail": {}, "id": "ea13ae514aaf"},
    {"status": "Download complete", "progressDetail": {}, "id": "ea13ae514aaf"},
    {"status": "Download complete", "progressDetail": {}, "id": "ea13ae514aaf"},
]


def _plan(**kw: object) -> WorkloadPlan:
    containers = kw.pop("containers", [Container(name="app", image="a:1")])
    return WorkloadPlan(name="w", containers=containers, **kw)  # type: ignore[arg-type]


def test_each_image_once_with_the_strongest_policy() -> None:
    """Two users of one image pull it once, under the policy that pulls most."""
    plan = _plan(
        containers=[
            Container(name="a", image="x:1", image_pull_policy="Never"),
            Container(name="b", image="x:1", image_pull_policy="Always"),
            Container(name="c", image="y:1"),
        ],
        pause_image="p:1",
        pause_image_pull_policy="Never",
        autoheal=Autoheal(image="h:1"),
    )
    assert images_to_pull(plan) == {
        "p:1": "Never",
        "x:1": "Always",
        "y:1": "IfNotPresent",
        "h:1": "IfNotPresent",
    }


@pytest.mark.parametrize(
    ("image", "params"),
    [
        ("busybox", {"fromImage": "busybox", "tag": "latest"}),
        ("127.0.0.1:5000/a/b", {"fromImage": "127.0.0.1:5000/a/b", "tag": "latest"}),
        ("127.0.0.1:5000/a/b:v1", {"fromImage": "127.0.0.1:5000/a/b:v1"}),
        ("a/b@sha256:00", {"fromImage": "a/b@sha256:00"}),
    ],
)
def test_an_untagged_reference_pulls_latest_not_every_tag(
    image: str, params: dict[str, str]
) -> None:
    assert reference_params(image) == params


def test_docker_progress_sums_bytes_and_layers() -> None:
    """Bytes come from Downloading; a finished layer counts in full, once."""
    progress = LayerProgress()
    finished = [progress.feed(m) for m in DOCKER_STREAM]
    assert finished.count(True) == 2  # Already exists, then the download completing
    event = progress.event("w", 1.0, "img")
    assert (event.bytes_done, event.bytes_total) == (3000512, 3000512)
    assert (event.layers_done, event.layers_total) == (2, 2)


def test_podman_progress_counts_layers_without_bytes() -> None:
    progress = LayerProgress()
    for message in PODMAN_STREAM:
        progress.feed(message)
    event = progress.event("w", 1.0, "img")
    assert (event.bytes_done, event.bytes_total, event.layers_done, event.layers_total) == (
        None,
        None,
        2,
        2,
    )


@pytest.mark.parametrize(
    ("image", "registry"),
    [
        ("busybox", "docker.io"),
        ("library/busybox:1", "docker.io"),
        ("registry.k8s.io/pause:3.10", "registry.k8s.io"),
        ("127.0.0.1:5001/a/b:v1", "127.0.0.1:5001"),
        ("localhost/a", "localhost"),
    ],
)
def test_registry_of_an_image(image: str, registry: str) -> None:
    assert registry_of(image) == registry


def _config(path: Path, entry: dict[str, str], key: str = "http://127.0.0.1:5001") -> str:
    path.write_text(json.dumps({"auths": {key: entry}}))
    return str(path)


@pytest.mark.anyio
async def test_credentials_from_a_plan_reference_and_both_entry_forms(tmp_path: Path) -> None:
    """``auth`` (base64 user:password) and username/password entries give the same header."""
    encoded = base64.b64encode(b"me:s3cret").decode()
    by_auth = _config(tmp_path / "a.json", {"auth": encoded})
    by_fields = _config(tmp_path / "b.json", {"username": "me", "password": "s3cret"})
    headers = []
    for path in (by_auth, by_fields):
        refs = [RegistryAuth(registry="127.0.0.1:5001", auth_file=path)]
        found = await find_credentials("127.0.0.1:5001", engine="docker", plan_auth=refs)
        assert found is not None and "s3cret" not in repr(found)
        headers.append(json.loads(base64.urlsafe_b64decode(auth_header(found))))
    assert (
        headers == [{"username": "me", "password": "s3cret", "serveraddress": "127.0.0.1:5001"}] * 2
    )


@pytest.mark.anyio
async def test_engine_files_in_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Podman reads REGISTRY_AUTH_FILE before the Docker config; Docker reads DOCKER_CONFIG."""
    (tmp_path / "docker").mkdir()
    _config(tmp_path / "docker" / "config.json", {"username": "docker", "password": "d"})
    podman_file = _config(tmp_path / "auth.json", {"username": "podman", "password": "p"})
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "docker"))
    monkeypatch.setenv("REGISTRY_AUTH_FILE", podman_file)
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    docker = await find_credentials("127.0.0.1:5001", engine="docker")
    podman = await find_credentials("127.0.0.1:5001", engine="podman")
    assert docker is not None and docker.username == "docker"
    assert podman is not None and podman.username == "podman"
    assert await find_credentials("127.0.0.1:5000", engine="podman") is None


@pytest.mark.anyio
async def test_docker_hub_keys_match_docker_io(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _config(
        tmp_path / "config.json", {"username": "u", "password": "p"}, "https://index.docker.io/v1/"
    )
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    found = await find_credentials(registry_of("python:3.12"), engine="docker")
    assert found is not None and found.registry == "docker.io"


@pytest.mark.anyio
async def test_a_bad_plan_reference_is_a_create_error_that_quotes_no_secret(tmp_path: Path) -> None:
    secret_file = tmp_path / "bad.json"
    secret_file.write_text('{"auths": {"127.0.0.1:5001": {"auth": "s3cret-not-base64!"}}')
    other = _config(tmp_path / "other.json", {"username": "u", "password": "s3cret"}, "elsewhere:1")
    for path, says in (
        (str(tmp_path / "missing.json"), "cannot read"),
        (str(secret_file), "not valid JSON"),
        (other, "no auths entry for 127.0.0.1:5001"),
    ):
        refs = [RegistryAuth(registry="127.0.0.1:5001", auth_file=path)]
        with pytest.raises(CreateError, match=says) as caught:
            await find_credentials("127.0.0.1:5001", engine="docker", plan_auth=refs)
        assert "s3cret" not in str(caught.value)


def test_plan_fields_are_validated() -> None:
    with pytest.raises(PlanError, match=r"containers\[0\].image_pull_policy"):
        WorkloadPlan.from_mapping(
            {
                "name": "w",
                "containers": [{"name": "a", "image": "i", "image_pull_policy": "always"}],
            }
        )
    with pytest.raises(PlanError, match=r"registry_auth\[0\].registry"):
        WorkloadPlan.from_mapping(
            {
                "name": "w",
                "containers": [{"name": "a", "image": "i"}],
                "registry_auth": [{"registry": "https://x/y", "auth_file": "/a"}],
            }
        )
    with pytest.raises(PlanError, match="image_pull_secrets"):
        _plan(image_pull_secrets=["Not_A_Name"])


def test_kubernetes_takes_the_policy_when_set_and_the_secrets() -> None:
    plan = _plan(
        containers=[
            Container(name="a", image="i:1", image_pull_policy="Always"),
            Container(name="b", image="i:latest"),
        ],
        image_pull_secrets=["regcred"],
    )
    spec = pod_manifest(plan, namespace="default")["spec"]
    assert spec["imagePullSecrets"] == [{"name": "regcred"}]
    assert spec["containers"][0]["imagePullPolicy"] == "Always"
    assert "imagePullPolicy" not in spec["containers"][1]  # the cluster's default


def test_from_registry_keeps_the_repository_and_tag() -> None:
    assert (
        from_registry("registry.k8s.io/pause:3.10", "127.0.0.1:5000") == "127.0.0.1:5000/pause:3.10"
    )
    assert (
        from_registry("localhost/asyncdeploy/demo:latest", "127.0.0.1:5000")
        == "127.0.0.1:5000/asyncdeploy/demo:latest"
    )


PULL_EVENTS = [
    PullStarted(workload="w", elapsed=0.0, image="r/i:1", registry="r", policy="Always"),
    PullProgress(workload="w", elapsed=0.2, image="r/i:1", bytes_done=5_000_000,
                 bytes_total=10_000_000, layers_done=1, layers_total=2),
    PullFinished(workload="w", elapsed=0.4, image="r/i:1", digest="sha256:ab", seconds=0.4),
    PullFailed(workload="w", elapsed=0.4, image="r/j:1", reason="unauthorized at r"),
]  # fmt: skip


def test_pull_events_as_json_and_lines() -> None:
    assert event_to_dict(PULL_EVENTS[1]) == {
        "event": "PullProgress",
        "workload": "w",
        "elapsed": 0.2,
        "image": "r/i:1",
        "bytes_done": 5_000_000,
        "bytes_total": 10_000_000,
        "layers_done": 1,
        "layers_total": 2,
    }
    out = io.StringIO()
    renderer = EventRenderer(out)
    for event in PULL_EVENTS:
        renderer.show(event)
    lines = out.getvalue().splitlines()
    assert len(lines) == 3  # progress is drawn as bars on a terminal only
    assert "pulling r/i:1 (Always)" in lines[0] and "sha256:ab" in lines[1]
    assert "pull of r/j:1 failed: unauthorized at r" in lines[2]


def test_pull_view_draws_a_bar_per_image() -> None:
    out = io.StringIO()
    view = PullView(out)
    for event in PULL_EVENTS[:2]:
        view.show(event)
    last = out.getvalue().rsplit("\x1b[J", 1)[-1]
    assert "[############............] 5.0/10.0 MB, 1/2 layers" in last
