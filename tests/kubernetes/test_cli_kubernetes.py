"""The CLI with ``--driver kubernetes``, every command, against the fake API server."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest
import yaml
from click.testing import CliRunner
from fake_apiserver import NAMESPACE, FakeApiServer
from fake_kubelet import ContainerScript

from asyncdeploy.cli import main
from tests.cli_runner import invoke, invoke_in_thread
from tests.polling import until

pytestmark = pytest.mark.anyio


async def cli(kubeconfig: Path, *args: str) -> tuple[int, str]:
    result = await invoke_in_thread(
        "--driver", "kubernetes", *args, env={"KUBECONFIG": str(kubeconfig)}
    )
    return result.exit_code, result.stdout


async def test_every_command(fake: FakeApiServer, kubeconfig: Path, tmp_path: Path) -> None:
    plan = {
        "name": "cli",
        "labels": {"team": "ml"},
        "termination_grace_period_seconds": 3,
        "containers": [
            {
                "name": "server",
                "image": "busybox:1.36",
                "command": [
                    "sh",
                    "-c",
                    "trap 'sleep 1; exit 0' TERM; while true; do sleep 1; done",
                ],
                "env": {"API_TOKEN": "hunter2"},
            }
        ],
    }
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(plan))
    code, out = await cli(kubeconfig, "create", "-f", str(path), "-o", "json")
    assert code == 0, out
    assert json.loads(out)["action"] == "created"
    code, out = await cli(kubeconfig, "create", "-f", str(path))
    assert (code, out.split(":")[0]) == (0, "unchanged")
    code, out = await cli(kubeconfig, "list", "--selector", "team=ml", "-o", "json")
    assert [w["name"] for w in json.loads(out)] == ["cli"]
    code, out = await cli(kubeconfig, "get", "cli")
    assert code == 0 and "cli (kubernetes)" in out
    code, out = await cli(kubeconfig, "inspect", "cli", "-o", "json")
    assert code == 0 and "hunter2" not in out
    code, out = await cli(kubeconfig, "logs", "cli")
    assert code == 0, out
    code, out = await cli(kubeconfig, "delete", "cli", "-o", "json")
    assert code == 0, out
    lines = [json.loads(line) for line in out.splitlines()]
    assert lines[0]["event"] == "DrainStarted" and lines[-1]["event"] == "DrainFinished"
    assert lines[-1]["containers"][0]["outcome"] == "exited"
    code, out = await cli(kubeconfig, "delete", "cli")
    assert code == 1
    code, out = await cli(kubeconfig, "delete-all", "--selector", "team=ml", "-o", "json")
    assert (code, out) == (0, "")


async def test_create_wait_reports_why_it_will_not_start_and_removes_it(
    fake: FakeApiServer, kubeconfig: Path, tmp_path: Path
) -> None:
    """A container that ends at once: exit 1 with the reason and the container's name, no
    traceback, and nothing left behind."""
    fake.scripts["server"] = ContainerScript(exit_on_start=3)
    plan = {
        "name": "broken",
        "containers": [{"name": "server", "image": "busybox:1.36", "command": ["false"]}],
    }
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(plan))

    def invoke() -> tuple[int, str]:
        result = CliRunner(env={"KUBECONFIG": str(kubeconfig)}).invoke(
            main, ["--driver", "kubernetes", "create", "-f", str(path), "--wait", "--timeout", "20"]
        )
        return result.exit_code, result.stderr

    code, err = await anyio.to_thread.run_sync(invoke)
    assert code == 1
    assert "container exited: server of 'broken' (exit code 3)" in err
    assert "removed broken: it will not start" in err
    assert "Traceback" not in err
    assert not [key for key in fake.pods if key[1] == "broken"]


async def test_a_failed_delete_still_prints_its_summary_table(
    fake: FakeApiServer, kubeconfig: Path, tmp_path: Path
) -> None:
    """The Pod's delete is refused: exit 1, and the table that says why is printed first."""
    plan = {"name": "stuck", "containers": [{"name": "server", "image": "busybox:1.36"}]}
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(plan))
    code, out = await cli(kubeconfig, "create", "-f", str(path))
    assert code == 0, out
    pods = f"/api/v1/namespaces/{NAMESPACE}/pods"
    fake.inject("DELETE", pods, 405)
    fake.inject("DELETE", f"{pods}/stuck", 403)
    code, out = await cli(kubeconfig, "delete", "stuck")
    assert code == 1, out
    table = out.splitlines()
    assert table[0].startswith("stuck: drained in ")
    assert table[1].split() == ["CONTAINER", "ROLE", "OUTCOME", "EXIT", "SECONDS"]
    assert table[-1].startswith("error: delete pod stuck: ") and "forbidden" in table[-1]


def _plan_in_default(tmp_path: Path) -> Path:
    plan = {
        "name": "nsplan",
        "namespace": "default",
        "termination_grace_period_seconds": 2,
        "containers": [{"name": "server", "image": "busybox:1.36"}],
    }
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(plan))
    return path


async def test_create_wait_works_in_the_plans_namespace_and_a_conflicting_n_is_refused(
    fake: FakeApiServer, kubeconfig: Path, tmp_path: Path
) -> None:
    """Issue 16 item 15: the context's namespace is asyncdeploy-test, the plan names default.
    create --wait finds the Pod it made there; -n naming another namespace than the plan's is
    refused (exit 2, nothing made); -n naming the plan's is no conflict."""
    path = _plan_in_default(tmp_path)
    code, out = await cli(kubeconfig, "create", "-f", str(path), "--wait", "-o", "json")
    assert code == 0, out
    assert json.loads(out)["workload"]["state"] == "running"
    assert list(fake.pods) == [("default", "nsplan")]
    env = {"KUBECONFIG": str(kubeconfig)}
    result = await invoke_in_thread(
        "--driver", "kubernetes", "create", "-f", str(path), "-n", NAMESPACE, env=env
    )
    assert result.exit_code == 2, result.output
    assert (
        "namespace 'default'" in result.stderr and f"{NAMESPACE!r} was asked for" in result.stderr
    )
    assert list(fake.pods) == [("default", "nsplan")]
    result = await invoke_in_thread(
        "--driver", "kubernetes", "create", "-f", str(path), "-n", "default", env=env
    )
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("unchanged: nsplan")


async def test_replace_works_in_the_plans_namespace(
    fake: FakeApiServer, kubeconfig: Path, tmp_path: Path
) -> None:
    """replace of a plan naming default, from a context in asyncdeploy-test: the new instance
    is made, waited for and kept there, the old one drained there; nothing elsewhere."""
    path = _plan_in_default(tmp_path)
    code, out = await cli(kubeconfig, "create", "-f", str(path), "--wait", "--settle", "0")
    assert code == 0, out
    result = await invoke_in_thread(
        "--driver", "kubernetes", "replace", "-f", str(path), "--name", "nsplan-2",
        env={"KUBECONFIG": str(kubeconfig)},
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert sorted(fake.pods) == [("default", "nsplan-2")]  # the old one drained, the new kept


async def test_a_pod_still_torn_down_at_the_timeout_is_exit_4_not_a_failure(
    fake: FakeApiServer, kubeconfig: Path, tmp_path: Path
) -> None:
    """Issue 25 item 6: ``delete --timeout`` bounds the wait for the Pod to go; when it ends
    with every container ended and the Pod still being torn down (a slow node), the drain is
    reported as such: ``TeardownPending``, ``tearing_down`` in the summary, exit 4 (not 1);
    ``delete-all`` the same. With a longer timeout the same node's delete succeeds."""
    fake.scripts["server"] = ContainerScript(drain=0.1)
    plan = {
        "name": "slow",
        "labels": {"node": "slow"},
        "termination_grace_period_seconds": 1,
        "containers": [{"name": "server", "image": "busybox:1.36"}],
    }
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(plan))
    # running before the delete (a container the fake kubelet has not started never ends)
    assert (await cli(kubeconfig, "create", "-f", str(path), "--wait", "--settle", "0"))[0] == 0
    fake.final_delay = 4
    result = await invoke_in_thread(
        "--driver", "kubernetes", "delete", "slow", "--timeout", "1500ms", "-o", "json",
        env={"KUBECONFIG": str(kubeconfig)},
    )  # fmt: skip
    assert result.exit_code == 4, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [line["event"] for line in lines][-2:] == ["TeardownPending", "DrainFinished"]
    assert lines[-2]["timeout"] == 1.5
    assert lines[-1]["tearing_down"] is True and lines[-1]["errors"] == []
    assert "still being torn down" in result.stderr
    await until(lambda: not [key for key in fake.pods if key[1] == "slow"], timeout=10)

    fake.final_delay = 2
    assert (await cli(kubeconfig, "create", "-f", str(path), "--wait", "--settle", "0"))[0] == 0
    code, out = await cli(kubeconfig, "delete-all", "-l", "node=slow", "--timeout", "1s")
    assert code == 4, out
    assert "(its Pod still being torn down)" in out  # the summary table says it too
    await until(lambda: not [key for key in fake.pods if key[1] == "slow"], timeout=10)
    fake.final_delay = 0.5  # a node that tears down within the timeout
    assert (await cli(kubeconfig, "create", "-f", str(path), "--wait", "--settle", "0"))[0] == 0
    code, out = await cli(kubeconfig, "delete", "slow", "--timeout", "30s")
    assert code == 0, out
    assert not [key for key in fake.pods if key[1] == "slow"]


def test_timeout_is_a_kubernetes_option() -> None:
    result = invoke("--driver", "docker", "delete", "demo", "--timeout", "10s")
    assert result.exit_code == 2
    assert "--timeout: a Kubernetes option" in result.stderr


async def test_a_pod_held_by_a_node_that_stopped_reporting_is_exit_5(
    fake: FakeApiServer, kubeconfig: Path
) -> None:
    """Issue 31 item 5: the delete ends at its ``--timeout`` with ``NodeUnreachable`` (the node,
    the Pod, what to run) and exit 5 — not exit 4's "every container ended", not 1; the text
    output says the same; ``delete-all`` too. ``list -o wide`` and ``get`` say where the Pod is."""
    fake.lose_node("lost-node", silent_for=60)
    for name in ("held", "kept"):
        fake.create_pod(
            NAMESPACE,
            {
                "metadata": {"name": name, "labels": {"asyncdeploy.io/workload": name}},
                "spec": {
                    "nodeName": "lost-node",
                    "terminationGracePeriodSeconds": 10,
                    "containers": [{"name": "c", "image": "x:1"}],
                },
            },
        )
    env = {"KUBECONFIG": str(kubeconfig)}
    kube = ("--driver", "kubernetes")
    result = await invoke_in_thread(*kube, "list", "-o", "wide", env=env)
    assert result.exit_code == 0, result.output
    header, *rows = result.stdout.splitlines()
    assert [row[header.index("NODE") :].split()[0] for row in rows] == ["lost-node"] * 2
    result = await invoke_in_thread(*kube, "get", "held", "-o", "json", env=env)
    assert json.loads(result.stdout)["node"] == "lost-node"

    result = await invoke_in_thread(
        *kube, "delete", "held", "--timeout", "1s", "-o", "json", env=env
    )
    assert result.exit_code == 5, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [line["event"] for line in lines][-2:] == ["NodeUnreachable", "DrainFinished"]
    assert lines[-2]["node"] == "lost-node" and lines[-2]["pod"] == "held"
    assert lines[-1]["unreachable_node"] == "lost-node" and lines[-1]["tearing_down"] is False
    assert "kubectl delete pod held -n asyncdeploy-test --force" in result.stderr
    assert ("default", "held") not in fake.pods and (NAMESPACE, "held") in fake.pods

    result = await invoke_in_thread(*kube, "delete-all", "--all", "--timeout", "1s", env=env)
    assert result.exit_code == 5, result.output
    assert "node lost-node stopped reporting" in result.stderr  # the event's line
    assert "the kubelet on lost-node" in result.stderr
