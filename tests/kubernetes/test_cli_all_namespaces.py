"""``-A/--all-namespaces`` on ``list`` and ``delete-all`` (issue 17 item 7), on the fake API
server: the same workload name in two namespaces, both listed (a NAMESPACE column, the
namespace in JSON) and both drained under one deadline; on Docker/Podman a usage error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from fake_apiserver import NAMESPACE, FakeApiServer

from tests.cli_runner import invoke_in_thread

pytestmark = pytest.mark.anyio


def _plan(tmp_path: Path, namespace: str) -> Path:
    plan = {
        "name": "twin",
        "namespace": namespace,
        "labels": {"team": "ml"},
        "termination_grace_period_seconds": 2,
        "containers": [{"name": "server", "image": "busybox:1.36"}],
    }
    path = tmp_path / f"plan-{namespace}.yaml"
    path.write_text(yaml.safe_dump(plan))
    return path


@pytest.fixture
async def twins(fake: FakeApiServer, kubeconfig: Path, tmp_path: Path) -> dict[str, str]:
    """``twin`` in ``default`` and in the context's namespace; the CLI's environment."""
    env = {"KUBECONFIG": str(kubeconfig)}
    for namespace in ("default", NAMESPACE):
        result = await invoke_in_thread(
            "--driver", "kubernetes", "create", "-f", str(_plan(tmp_path, namespace)), env=env
        )
        assert result.exit_code == 0, result.output
    assert sorted(fake.pods) == [(NAMESPACE, "twin"), ("default", "twin")]
    return env


async def test_list_all_namespaces_shows_each_workload_with_its_namespace(
    twins: dict[str, str],
) -> None:
    """Without -A only the context's namespace; with -A both, a NAMESPACE column first, the
    namespace in -o json and namespace/name for -o name."""
    result = await invoke_in_thread("--driver", "kubernetes", "list", "-o", "json", env=twins)
    assert result.exit_code == 0, result.output
    assert [(w["namespace"], w["name"]) for w in json.loads(result.stdout)] == [(NAMESPACE, "twin")]

    result = await invoke_in_thread("--driver", "kubernetes", "list", "-A", env=twins)
    assert result.exit_code == 0, result.output
    header, *rows = result.stdout.splitlines()
    assert header.split()[:3] == ["NAMESPACE", "NAME", "STATE"]
    assert sorted(tuple(row.split()[:2]) for row in rows) == [
        (NAMESPACE, "twin"),
        ("default", "twin"),
    ]

    result = await invoke_in_thread(
        "--driver", "kubernetes", "list", "--all-namespaces", "-l", "team=ml", "-o", "json",
        env=twins,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    found = sorted((w["namespace"], w["name"]) for w in json.loads(result.stdout))
    assert found == [(NAMESPACE, "twin"), ("default", "twin")]

    result = await invoke_in_thread("--driver", "kubernetes", "list", "-A", "-o", "name", env=twins)
    assert sorted(result.stdout.split()) == [f"{NAMESPACE}/twin", "default/twin"]


async def test_delete_all_all_namespaces_drains_every_namespace(
    fake: FakeApiServer, twins: dict[str, str]
) -> None:
    """delete-all -A --all drains both twins, each named namespace/name in its events, and
    leaves no Pod; delete-all without -A would only have seen the context's one."""
    result = await invoke_in_thread(
        "--driver", "kubernetes", "delete-all", "-A", "--all", "-o", "json", env=twins
    )
    assert result.exit_code == 0, result.output
    events = [json.loads(line) for line in result.stdout.splitlines()]
    finished = sorted(e["workload"] for e in events if e["event"] == "DrainFinished")
    assert finished == [f"{NAMESPACE}/twin", "default/twin"]
    started = [e for e in events if e["event"] == "DrainStarted"]
    assert len(started) == 2
    assert fake.pods == {}


async def test_delete_all_without_a_flag_stays_in_its_namespace(
    fake: FakeApiServer, twins: dict[str, str]
) -> None:
    result = await invoke_in_thread(
        "--driver", "kubernetes", "delete-all", "--all", "-o", "json", env=twins
    )
    assert result.exit_code == 0, result.output
    finished = [
        e["workload"]
        for e in map(json.loads, result.stdout.splitlines())
        if e["event"] == "DrainFinished"
    ]
    assert finished == ["twin"]
    assert list(fake.pods) == [("default", "twin")]


@pytest.mark.parametrize("driver", ["docker", "podman"])
async def test_all_namespaces_on_an_engine_is_a_usage_error(driver: str) -> None:
    """Engines have no namespaces: -A says so, exit 2, before any engine is opened."""
    for command in (["list", "-A"], ["delete-all", "-A", "--all"]):
        result = await invoke_in_thread("--driver", driver, *command)
        assert result.exit_code == 2, result.output
        assert "-A/--all-namespaces: a Kubernetes option" in result.stderr
        assert "Traceback" not in result.output


async def test_all_namespaces_with_a_namespace_is_a_usage_error(twins: dict[str, str]) -> None:
    result = await invoke_in_thread(
        "--driver", "kubernetes", "list", "-A", "-n", "default", env=twins
    )
    assert result.exit_code == 2, result.output
    assert "choose one" in result.stderr


async def test_the_readmes_all_namespaces_commands_as_written(
    fake: FakeApiServer, twins: dict[str, str]
) -> None:
    """-A as a user types it (the README, docs/kubernetes.md): ``asyncdeploy list -A`` and
    ``asyncdeploy delete-all -A --selector team=ml`` (with the context's kubeconfig)."""
    result = await invoke_in_thread("list", "-A", env=twins)
    assert result.exit_code == 0, result.output
    assert result.stdout.split()[:2] == ["NAMESPACE", "NAME"]
    result = await invoke_in_thread("delete-all", "-A", "--selector", "team=ml", env=twins)
    assert result.exit_code == 0, result.output
    drained = sorted(
        line.split(":")[0] for line in result.stdout.splitlines() if "drained in" in line
    )
    assert drained == [f"{NAMESPACE}/twin", "default/twin"]
    assert fake.pods == {}


async def test_list_watch_all_namespaces_tells_twins_apart(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``list -w -A``: a workload is its namespace and name, so two twins are two rows, and the
    one that goes is reported gone with its namespace (keyed by name alone, one would hide the
    other)."""
    import anyio

    from asyncdeploy._results import ContainerStatus, WorkloadStatus
    from asyncdeploy.cli.views import watch_workloads

    def twin(namespace: str) -> WorkloadStatus:
        run = ContainerStatus(name="server", role="run", image="i", state="running")
        return WorkloadStatus(
            name="twin", driver="kubernetes", labels={}, grace_period_seconds=2,
            plan_digest=None, containers=(run,), namespace=namespace,
        )  # fmt: skip

    polls = [[twin("a"), twin("b")], [twin("b")]]

    async def fetch() -> list[WorkloadStatus]:
        return polls.pop(0) if len(polls) > 1 else polls[0]

    with anyio.move_on_after(0.3):
        await watch_workloads(fetch, "text", period=0.01, namespaces=True)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:2] == ["NAMESPACE", "NAME"]
    assert [line.split()[:3] for line in lines[1:]] == [
        ["a", "twin", "running"],
        ["b", "twin", "running"],
        ["a", "twin", "deleted"],
    ]
