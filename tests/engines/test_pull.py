"""Image pulls on real engines from the real local registry of ci/start-registry.sh.

127.0.0.1:5000 serves without auth, 127.0.0.1:5001 the same storage with htpasswd basic auth
(user and password in the registry's credentials file). Each run builds one image with a layer
of its own (so that Docker really downloads it), pushes it under a unique name, and removes it
from the registry and from the engines at the end; each test removes what it pulled.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import secrets
import subprocess
import tempfile
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import httpx
import pytest

from asyncdeploy import (
    Container,
    CreateError,
    Deployer,
    EngineUnavailable,
    Event,
    PullFailed,
    PullFinished,
    PullProgress,
    PullStarted,
    RegistryAuth,
    WorkloadNotFound,
    WorkloadPlan,
    open_deployer,
)
from tests.cli_runner import invoke_in_thread
from tests.engines.conftest import BUSYBOX, RUN_ID, RUN_LABEL, required_engines
from tests.engines.fault_proxy import EngineProxy
from tests.engines.helpers import plan, plan_file

pytestmark = pytest.mark.anyio

OPEN = "127.0.0.1:5000"
AUTH = "127.0.0.1:5001"
PROXY_PORT = 5002  # Podman calls it insecure (ci/start-engines.sh)
PROXY_PORT_LOCK = Path(tempfile.gettempdir()) / "asyncdeploy-test-proxy-port.lock"


@asynccontextmanager
async def proxy_listener() -> AsyncIterator[anyio.abc.SocketListener]:
    """A listener on PROXY_PORT, one per machine: the Docker and Podman streams' tests that
    serve a registry there take turns (a lock file held while it listens)."""
    with PROXY_PORT_LOCK.open("w") as lock:
        await anyio.to_thread.run_sync(fcntl.flock, lock, fcntl.LOCK_EX)
        try:
            listener = await anyio.create_tcp_listener(
                local_host="127.0.0.1", local_port=PROXY_PORT
            )
            async with listener:
                yield listener
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


CREDENTIALS = Path(os.environ.get("REGISTRY_CREDENTIALS", "/tmp/asyncdeploy-registry/credentials"))
REPOSITORY = f"asyncdeploy-test/pull-{RUN_ID}"


def _registry_up() -> bool:
    try:
        return httpx.get(f"http://{OPEN}/v2/", timeout=3).status_code == 200
    except httpx.HTTPError:
        return False


async def _run(*command: str, check: bool = True) -> str:
    result = await anyio.run_process(list(command), check=False)
    if check and result.returncode != 0:
        raise AssertionError(f"{' '.join(command)} failed: {result.stderr.decode()}")
    return result.stdout.decode()


async def _remove_image(engine: str, reference: str) -> None:
    await _run(engine, "rmi", reference, check=False)


@pytest.fixture(scope="session")
def pushed_image(tmp_path_factory: pytest.TempPathFactory) -> object:
    """``repository:tag`` in the registry (not on any engine): busybox plus 3 MB of its own."""
    if not _registry_up():
        if required_engines():
            pytest.fail(f"no registry answers on {OPEN}: run ci/start-registry.sh")
        pytest.skip(f"no registry answers on {OPEN}")
    context = tmp_path_factory.mktemp("image")
    (context / "blob").write_bytes(os.urandom(3_000_000))
    (context / "Dockerfile").write_text(f"FROM {BUSYBOX}\nCOPY blob /blob\n")
    reference = f"{OPEN}/{REPOSITORY}:v1"
    for command in (
        ["docker", "build", "-q", "-t", reference, str(context)],
        ["docker", "push", "-q", reference],
        ["docker", "rmi", reference],
    ):
        subprocess.run(command, check=True, capture_output=True)
    yield f"{REPOSITORY}:v1"
    _delete_from_registry(REPOSITORY, "v1")


@pytest.fixture
async def second_image(deployer: Deployer, pushed_image: str) -> AsyncIterator[str]:
    """Another tag in the registry (the busybox test image), absent from the engine."""
    reference = f"{OPEN}/{REPOSITORY}-second:v1"
    for command in (("tag", BUSYBOX, reference), ("push", "-q", reference), ("rmi", reference)):
        await _run("docker", *command)
    await _remove_image(deployer.driver_name, reference)
    yield reference
    with anyio.CancelScope(shield=True):
        await deployer.delete_all({RUN_LABEL: RUN_ID}, grace_period_seconds=0)
        await _remove_image(deployer.driver_name, reference)
        await anyio.to_thread.run_sync(_delete_from_registry, f"{REPOSITORY}-second", "v1")


def _delete_from_registry(repository: str, tag: str) -> None:
    """Delete ``tag``'s manifest, unless another tag shares it: a registry deletes a manifest by
    its digest, so deleting ``pause:verify-x`` would take ``pause:3.10``, which ci/setup.sh
    pushed from the same image, with it (and every later ``verify --registry`` would fail)."""
    accept = {"Accept": "application/vnd.docker.distribution.manifest.v2+json"}
    base = f"http://{OPEN}/v2/{repository}"

    def digest(of: str) -> str | None:
        head = httpx.head(f"{base}/manifests/{of}", headers=accept, timeout=10)
        return head.headers.get("Docker-Content-Digest") if head.status_code == 200 else None

    mine = digest(tag)
    if mine is None:
        return
    tags = httpx.get(f"{base}/tags/list", timeout=10).json().get("tags") or []
    if any(other != tag and digest(other) == mine for other in tags):
        return  # shared: leave it (the registry keeps ~3 MB more per run)
    httpx.delete(f"{base}/manifests/{mine}", timeout=10)


@pytest.fixture
async def image(deployer: Deployer, pushed_image: str) -> AsyncIterator[str]:
    """The pushed image as the open registry serves it, absent from the engine before and after."""
    reference = f"{OPEN}/{pushed_image}"
    await _remove_image(deployer.driver_name, reference)
    yield reference
    with anyio.CancelScope(shield=True):
        await deployer.delete_all({RUN_LABEL: RUN_ID}, grace_period_seconds=0)
        await _remove_image(deployer.driver_name, reference)


async def _create(deployer: Deployer, workload: WorkloadPlan) -> list[Event]:
    seen: list[Event] = []
    async with deployer.creating(workload) as events:
        async for event in events:
            seen.append(event)
    return seen


def _sleeper(image: str, **kw: Any) -> Container:
    return Container(name="app", image=image, command=["sleep", "600"], **kw)


async def _nothing_created(deployer: Deployer, workload: str) -> None:
    with pytest.raises(WorkloadNotFound):
        await deployer.get(workload)


async def test_absent_image_is_pulled_with_progress(
    deployer: Deployer, image: str, name: Callable[[str], str]
) -> None:
    """An image that is not on the engine is pulled before create, with typed progress events."""
    workload = name("pull")
    events = await _create(deployer, plan(workload, [_sleeper(image)]))
    pulls = [e for e in events if isinstance(e, PullStarted | PullProgress | PullFinished)]
    assert [type(e) for e in pulls[:1]] == [PullStarted]
    assert pulls[0].image == image and pulls[0].registry == OPEN
    assert pulls[0].policy == "IfNotPresent"
    finished = pulls[-1]
    assert isinstance(finished, PullFinished) and finished.image == image
    assert finished.digest.startswith("sha256:") and finished.seconds > 0
    progress = [e for e in pulls if isinstance(e, PullProgress)]
    assert progress and progress[-1].layers_done == progress[-1].layers_total >= 1
    if deployer.driver_name == "docker":  # Docker reports bytes; Podman 4.3 only layers
        assert progress[-1].bytes_done == progress[-1].bytes_total
        assert progress[-1].bytes_total is not None and progress[-1].bytes_total >= 3_000_000
    assert (await deployer.get(workload)).state == "running"


async def test_present_image_is_not_pulled_under_if_not_present(
    deployer: Deployer, image: str, name: Callable[[str], str]
) -> None:
    """IfNotPresent (the default) pulls an image once; a second create uses the engine's copy."""
    first = await _create(deployer, plan(name("once"), [_sleeper(image)]))
    assert any(isinstance(e, PullFinished) for e in first)
    again = await _create(
        deployer, plan(name("again"), [_sleeper(image, image_pull_policy="IfNotPresent")])
    )
    assert again == []
    local = await _create(deployer, plan(name("local"), [_sleeper(BUSYBOX)]))
    assert local == []  # a locally built image with no registry keeps working


async def test_always_pulls_again(
    deployer: Deployer, image: str, name: Callable[[str], str]
) -> None:
    """Always pulls an image even when the engine has it, once however many containers use it."""
    await _create(deployer, plan(name("first"), [_sleeper(image)]))
    containers = [
        _sleeper(image, image_pull_policy="Always"),
        Container(name="twin", image=image, command=["sleep", "600"], image_pull_policy="Always"),
    ]
    events = await _create(deployer, plan(name("always"), containers))
    started = [e for e in events if isinstance(e, PullStarted)]
    assert [(e.image, e.policy) for e in started] == [(image, "Always")]
    assert isinstance(events[-1], PullFinished)


async def test_never_with_an_absent_image_is_a_clear_error(
    deployer: Deployer, image: str, name: Callable[[str], str]
) -> None:
    """Never with an absent image fails before anything is created, saying how to provide it."""
    workload = name("never")
    with pytest.raises(CreateError) as caught:
        await deployer.create(plan(workload, [_sleeper(image, image_pull_policy="Never")]))
    message = str(caught.value)
    assert image in message and "Never" in message
    assert "build or load it" in message and "push it to a registry" in message
    await _nothing_created(deployer, workload)


async def test_a_failed_pull_leaves_the_workload_it_would_replace_serving(
    deployer: Deployer, image: str, name: Callable[[str], str]
) -> None:
    """A replacement pulls before it drains the old workload: a failed pull changes nothing."""
    workload = name("keep")
    await deployer.create(plan(workload, [_sleeper(BUSYBOX)]))
    before = await deployer.get(workload)
    changed = plan(workload, [_sleeper(image, image_pull_policy="Never")])
    with pytest.raises(CreateError, match="Never"):
        await deployer.create(changed)
    after = await deployer.get(workload)
    assert after.state == "running"
    assert [c.name for c in after.containers] == [c.name for c in before.containers]


async def test_different_images_are_pulled_concurrently(
    deployer: Deployer, image: str, second_image: str, name: Callable[[str], str]
) -> None:
    """Each image's pull starts before any other pull finishes."""
    containers = [
        _sleeper(image),
        Container(name="other", image=second_image, command=["sleep", "600"]),
    ]
    events = await _create(deployer, plan(name("both"), containers))
    started = {e.image: e.elapsed for e in events if isinstance(e, PullStarted)}
    finished = {e.image: e.elapsed for e in events if isinstance(e, PullFinished)}
    assert set(started) == set(finished) == {image, second_image}
    assert max(started.values()) < min(finished.values())


def _credentials() -> tuple[str, str]:
    values = dict(
        line.split("=", 1) for line in CREDENTIALS.read_text().splitlines() if "=" in line
    )
    return values["REGISTRY_USER"], values["REGISTRY_PASSWORD"]


def _auth_file(path: Path, user: str, password: str, *, encoded: bool = True) -> Path:
    if encoded:
        entry = {"auth": base64.b64encode(f"{user}:{password}".encode()).decode()}
    else:
        entry = {"username": user, "password": password}
    path.write_text(json.dumps({"auths": {f"http://{AUTH}": entry}}))
    return path


@pytest.fixture
async def auth_image(deployer: Deployer, image: str) -> AsyncIterator[str]:
    """The same image through the registry that wants a password."""
    reference = image.replace(OPEN, AUTH)
    await _remove_image(deployer.driver_name, reference)
    yield reference
    with anyio.CancelScope(shield=True):
        await deployer.delete_all({RUN_LABEL: RUN_ID}, grace_period_seconds=0)
        await _remove_image(deployer.driver_name, reference)


async def test_wrong_password_is_a_clear_error_and_creates_nothing(
    deployer: Deployer, auth_image: str, name: Callable[[str], str], tmp_path: Path
) -> None:
    """A refused password names the image and the registry, never the password itself."""
    user, _ = _credentials()
    wrong = f"wrong-{secrets.token_hex(8)}"
    auth = RegistryAuth(registry=AUTH, auth_file=str(_auth_file(tmp_path / "a.json", user, wrong)))
    workload = name("badpw")
    seen: list[Event] = []
    with pytest.raises(CreateError) as caught:
        await deployer.create(
            plan(workload, [_sleeper(auth_image)], registry_auth=[auth]), on_event=seen.append
        )
    message = str(caught.value)
    assert auth_image in message and AUTH in message and "unauthorized" in message
    assert wrong not in message and wrong not in repr(seen)
    assert isinstance(seen[-1], PullFailed) and "unauthorized" in seen[-1].reason
    await _nothing_created(deployer, workload)


async def test_credentials_from_the_plan_and_the_engines_files(
    deployer: Deployer,
    auth_image: str,
    name: Callable[[str], str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The plan's auth file, DOCKER_CONFIG and Podman's REGISTRY_AUTH_FILE each let a pull in."""
    user, password = _credentials()
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "none"))
    monkeypatch.delenv("REGISTRY_AUTH_FILE", raising=False)
    with pytest.raises(CreateError, match="unauthorized"):  # no credentials anywhere
        await deployer.create(plan(name("anon"), [_sleeper(auth_image)]))
    auth = RegistryAuth(
        registry=AUTH, auth_file=str(_auth_file(tmp_path / "plan.json", user, password))
    )
    from_plan = name("plan")
    events = await _create(deployer, plan(from_plan, [_sleeper(auth_image)], registry_auth=[auth]))
    assert isinstance(events[-1], PullFinished)
    assert password not in json.dumps(await deployer.inspect(from_plan), default=str)
    (tmp_path / "docker").mkdir()
    _auth_file(tmp_path / "docker" / "config.json", user, password)
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "docker"))
    for source in ("docker-config", "registry-auth-file"):
        if source == "registry-auth-file":
            if deployer.driver_name != "podman":
                break
            # Podman's own file is read before the Docker config
            _auth_file(tmp_path / "docker" / "config.json", user, "stale")
            path = _auth_file(tmp_path / "auth.json", user, password, encoded=False)
            monkeypatch.setenv("REGISTRY_AUTH_FILE", str(path))
        events = await _create(
            deployer,
            plan(name(source[:8]), [_sleeper(auth_image, image_pull_policy="Always")]),
        )
        assert isinstance(events[-1], PullFinished), source


class CuttingProxy:
    """A registry front that cuts every connection once ``limit`` bytes have come back, and
    every connection after that at once: a registry that drops the pull mid-way. With
    ``stall``, it holds the connections open instead, sending nothing more: a registry that hangs.
    """

    def __init__(self, limit: int, *, stall: bool = False) -> None:
        self.limit = limit
        self.stall = stall
        self.forwarded = 0
        self.cut = False
        self.reached = anyio.Event()  # set when the limit is reached

    async def handle(self, client: anyio.abc.SocketStream) -> None:
        async with client:
            if self.cut:
                return
            upstream = await anyio.connect_tcp("127.0.0.1", 5000)
            async with upstream, anyio.create_task_group() as tg:
                tg.start_soon(self._up, client, upstream, tg.cancel_scope)
                tg.start_soon(self._down, upstream, client, tg.cancel_scope)

    async def _up(
        self,
        client: anyio.abc.SocketStream,
        upstream: anyio.abc.SocketStream,
        scope: anyio.CancelScope,
    ) -> None:
        try:
            async for chunk in client:
                await upstream.send(chunk)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            pass
        scope.cancel()

    async def _down(
        self,
        upstream: anyio.abc.SocketStream,
        client: anyio.abc.SocketStream,
        scope: anyio.CancelScope,
    ) -> None:
        try:
            async for chunk in upstream:
                self.forwarded += len(chunk)
                if self.forwarded > self.limit:
                    self.cut = True
                    self.reached.set()
                    if self.stall:
                        await anyio.sleep_forever()
                    break
                await client.send(chunk)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            pass
        scope.cancel()


async def test_a_registry_that_drops_the_pull_is_a_clear_error(
    deployer: Deployer, pushed_image: str, name: Callable[[str], str]
) -> None:
    """A connection cut mid-layer fails the create, naming the image; nothing is created."""
    reference = f"127.0.0.1:{PROXY_PORT}/{pushed_image}"
    proxy = CuttingProxy(limit=100_000)  # past the manifest and config, inside the 3 MB layer
    workload = name("cut")
    try:
        async with proxy_listener() as listener, anyio.create_task_group() as tg:
            tg.start_soon(listener.serve, proxy.handle)
            # Docker retries a cut layer five times, waiting up to 20 s in between
            with pytest.raises(CreateError) as caught, anyio.fail_after(180):
                await deployer.create(plan(workload, [_sleeper(reference)]))
            tg.cancel_scope.cancel()
        message = str(caught.value)
        assert proxy.cut and reference in message and f"127.0.0.1:{PROXY_PORT}" in message
        assert "EOF" in message or "reset" in message or "cut" in message
        await _nothing_created(deployer, workload)
        assert await _run(deployer.driver_name, "images", "-q", reference) == ""
    finally:
        with anyio.CancelScope(shield=True):
            await _remove_image(deployer.driver_name, reference)


async def test_verify_pulls_what_it_needs_from_the_registry_named(
    deployer: Deployer, pushed_image: str
) -> None:
    """`verify --registry` on an engine without its images pulls them, and passes."""
    tag = f"verify-{RUN_ID}"
    # the registry's copy of the built-in demo image: verify names it without localhost/
    demo, pause = f"asyncdeploy/demo:{tag}", f"registry.k8s.io/pause:{tag}"
    pushed = {
        demo: "localhost/asyncdeploy/demo:latest",
        f"pause:{tag}": "asyncdeploy-test/pause:latest",
    }
    for target, source in pushed.items():
        await _run("docker", "tag", source, f"{OPEN}/{target}")
        await _run("docker", "push", "-q", f"{OPEN}/{target}")
        await _run("docker", "rmi", f"{OPEN}/{target}")
    try:
        result = await invoke_in_thread(
            "--driver",
            deployer.driver_name,
            "verify",
            "--registry",
            OPEN,
            "--image",
            f"localhost/{demo}",
            "--pause-image",
            pause,
            "--warmup",
            "1s",
            "--long-seconds",
            "1",
        )
        assert result.exit_code == 0, result.output
        assert f"pulled {OPEN}/{demo}" in result.stderr
        assert f"pulled {OPEN}/pause:{tag}" in result.stderr
    finally:
        with anyio.CancelScope(shield=True):
            for target in pushed:
                await _remove_image(deployer.driver_name, f"{OPEN}/{target}")
                await anyio.to_thread.run_sync(_delete_from_registry, *target.split(":"))


async def test_verify_without_the_default_pause_image_says_how_to_provide_it(
    deployer: Deployer,
) -> None:
    """The default pause image, absent and unreachable, is an error naming it and a remedy."""
    if deployer.driver_name == "docker":
        present = await _run("docker", "images", "-q", "registry.k8s.io/pause:3.10")
    else:
        present = await _run("podman", "images", "-q", "registry.k8s.io/pause:3.10")
    if present.strip():
        pytest.skip("registry.k8s.io/pause:3.10 is on this engine")
    result = await invoke_in_thread("--driver", deployer.driver_name, "verify")
    assert result.exit_code == 1, result.output
    assert "registry.k8s.io/pause:3.10" in result.output
    assert "--registry HOST:PORT" in result.output


async def test_one_failed_pull_stops_the_others(
    deployer: Deployer, pushed_image: str, name: Callable[[str], str]
) -> None:
    """When one image cannot be pulled the create fails at once: a pull still running (from a
    registry that hangs) is cancelled, and every pull that started is reported as ended."""
    stalled = f"127.0.0.1:{PROXY_PORT}/{pushed_image}"
    missing = f"{OPEN}/{REPOSITORY}:no-such-tag"
    proxy = CuttingProxy(limit=0, stall=True)
    containers = [
        _sleeper(stalled),
        Container(name="missing", image=missing, command=["sleep", "600"]),
    ]
    seen: list[Event] = []
    try:
        async with proxy_listener() as listener, anyio.create_task_group() as tg:
            tg.start_soon(listener.serve, proxy.handle)
            with pytest.raises(CreateError) as caught, anyio.fail_after(30):
                await deployer.create(plan(name("stop"), containers), on_event=seen.append)
            tg.cancel_scope.cancel()
        assert missing in str(caught.value) and stalled not in str(caught.value)
        started = {e.image for e in seen if isinstance(e, PullStarted)}
        ended = {e.image: e for e in seen if isinstance(e, PullFinished | PullFailed)}
        assert stalled in started and set(ended) == started
        assert isinstance(ended[stalled], PullFailed) and ended[stalled].reason == "cancelled"
    finally:
        with anyio.CancelScope(shield=True):
            await _remove_image(deployer.driver_name, stalled)


async def test_the_engine_dropping_mid_pull_is_engine_unavailable(
    deployer: Deployer, pushed_image: str, name: Callable[[str], str], tmp_path: Path
) -> None:
    """The engine's connection cut during a pull is EngineUnavailable (exit 3), not an
    exception group, and nothing is created."""
    stalled = f"127.0.0.1:{PROXY_PORT}/{pushed_image}"
    registry = CuttingProxy(limit=0, stall=True)
    socket = tmp_path / "engine.sock"
    workload = name("engine")
    try:
        async with proxy_listener() as listener, anyio.create_task_group() as tg:
            tg.start_soon(listener.serve, registry.handle)
            upstream = str(getattr(deployer.driver, "url", "")).removeprefix("unix://")
            engine = EngineProxy(socket, upstream)
            await tg.start(engine.serve)

            async def cut_when_the_pull_hangs() -> None:
                await registry.reached.wait()
                await anyio.sleep(0.5)  # the engine is now waiting on the registry
                engine.down()  # the engine's socket goes away mid-pull

            async with open_deployer(deployer.driver_name, url=f"unix://{socket}") as proxied:
                tg.start_soon(cut_when_the_pull_hangs)
                with pytest.raises(EngineUnavailable), anyio.fail_after(30):
                    await proxied.create(plan(workload, [_sleeper(stalled)]))
            tg.cancel_scope.cancel()
        await _nothing_created(deployer, workload)
    finally:
        with anyio.CancelScope(shield=True):
            await _remove_image(deployer.driver_name, stalled)


async def test_cli_create_shows_pulls_as_json_lines_and_text(
    deployer: Deployer, image: str, name: Callable[[str], str], tmp_path: Path
) -> None:
    """`create -o json` prints one object per pull event, then the result; text prints a line
    per pull start and end (progress bars are for terminals)."""

    outputs = {}
    for output in ("json", "text"):
        await deployer.delete_all({RUN_LABEL: RUN_ID}, grace_period_seconds=0)
        await _remove_image(deployer.driver_name, image)  # absent again
        workload = name(output)
        app = {"name": "app", "image": image, "command": ["sleep", "600"]}
        path = plan_file(tmp_path, workload, [app])
        args = ["--driver", deployer.driver_name, "create", "-f", str(path), "-o", output]
        result = await invoke_in_thread(*args)
        assert result.exit_code == 0, result.output
        outputs[output] = result
    lines = [json.loads(line) for line in outputs["json"].stdout.splitlines()]
    kinds = [line.get("event") for line in lines]
    assert kinds[0] == "PullStarted" and kinds[-2] == "PullFinished" and "PullProgress" in kinds
    assert lines[-1]["action"] == "created"
    text = outputs["text"].stderr
    assert f"pulling {image} (IfNotPresent)" in text and f"pulled {image} (sha256:" in text
    assert outputs["text"].stdout.startswith("created: ")


async def test_pull_progress_fits_a_terminal_of_80_columns(
    deployer: Deployer, image: str, name: Callable[[str], str], tmp_path: Path
) -> None:
    """`create` in a real 80-column terminal (a pty read back through pyte): every progress line
    is shorter than the terminal, so each redraw stays in place (a wrapped line would leave a
    line behind at every redraw); the bar ends as done."""
    from tests.engines.pty_screen import run_in_pty, screen_of

    long_name = name("a-workload-whose-name-is-long-enough")
    app = {"name": "app", "image": image, "command": ["sleep", "600"]}
    path = plan_file(tmp_path, long_name, [app])
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    args = ["--driver", deployer.driver_name, "create", "-f", str(path)]
    code, output = await anyio.to_thread.run_sync(
        lambda: run_in_pty(args, columns=80, lines=24, env={**env, "TERM": "xterm"})
    )
    screen = screen_of(output, columns=80, lines=24)
    shown = "\n".join(screen)
    assert code == 0, shown
    assert max(len(line) for line in screen) < 80, f"a line reached the edge:\n{shown}"
    tag = image.rsplit("/", 1)[1]  # the name's end stays: its middle gives way
    bars = [line for line in screen if tag in line]
    assert len(bars) == 1 and "done in" in bars[0], shown
