"""kubectl's -n/--namespace, --context, --kubeconfig (before or after the command), and logs
flags, with ``--driver kubernetes`` against the fake API server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from fake_apiserver import FakeApiServer
from fake_kubelet import ContainerScript

from asyncdeploy.cli import main
from tests.cli_runner import invoke_in_thread

pytestmark = pytest.mark.anyio


async def cli(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    result = await invoke_in_thread(*args, env=env or {"KUBECONFIG": None})
    return result.exit_code, result.stdout, result.stderr


def plan_file(tmp_path: Path) -> str:
    plan = {
        "name": "nsx",
        "termination_grace_period_seconds": 3,
        "containers": [{"name": "server", "image": "busybox:1.36"}],
    }
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(plan))
    return str(path)


async def test_namespace_context_and_kubeconfig_on_the_command_line(
    fake: FakeApiServer, kubeconfig: Path, tmp_path: Path
) -> None:
    """No --driver needed: a Kubernetes option chooses Kubernetes, kubectl-style, anywhere."""
    config = ["--kubeconfig", str(kubeconfig)]
    code, out, err = await cli(*config, "create", "-f", plan_file(tmp_path), "-n", "default")
    assert code == 0, out + err
    assert ("default", "nsx") in fake.pods
    code, out, _ = await cli("list", "-o", "name", "--namespace=default", *config)
    assert (code, out) == (0, "nsx\n")
    code, out, _ = await cli("list", "-o", "name", *config)  # the context's namespace
    assert (code, out) == (0, "")
    code, out, _ = await cli(
        "--context", "fake", "-n", "default", *config, "get", "nsx", "-o", "json"
    )
    assert code == 0 and json.loads(out)["driver"] == "kubernetes"
    code, _, err = await cli("--context", "nope", *config, "list")
    assert code in (2, 3) and "nope" in err, err
    code, _, err = await cli("--driver", "docker", "-n", "default", "list")
    assert code == 2 and "Kubernetes options" in err


async def test_logs_tail_on_kubernetes(
    fake: FakeApiServer, kubeconfig: Path, tmp_path: Path
) -> None:
    fake.scripts["server"] = ContainerScript(logs=("one", "two", "three"))
    env = {"KUBECONFIG": str(kubeconfig)}
    path = plan_file(tmp_path)
    code, out, err = await cli("--driver", "kubernetes", "create", "-f", path, "--wait", env=env)
    assert code == 0, out + err
    code, out, _ = await cli("--driver", "kubernetes", "logs", "nsx", "--tail", "2", env=env)
    assert (code, out.split()) == (0, ["two", "three"])
    code, out, _ = await cli("--driver", "kubernetes", "logs", "nsx", env=env)
    assert (code, out.split()) == (0, ["one", "two", "three"])


def test_cluster_options_are_parsed_in_place_never_taken_from_a_value_or_past_a_double_dash(
    tmp_path: Path,
) -> None:
    """``-n`` after a command is the namespace; as the value of another option, or after
    ``--`` in an exec command line, it is left to what it belongs to."""
    result = CliRunner().invoke(main, ["--driver", "docker", "list", "-n", "ml"])
    assert result.exit_code == 2 and "Kubernetes options" in result.output
    result = CliRunner().invoke(main, ["verify", "--warmup", "-n"])
    assert result.exit_code == 2 and "Invalid value for '--warmup'" in result.output
    result = CliRunner().invoke(main, ["lint", str(tmp_path / "absent.yaml"), "-n", "ml"])
    assert result.exit_code == 2 and "No such option '-n'" in result.output


async def test_logs_default_to_the_first_run_container_on_kubernetes(
    fake: FakeApiServer, kubeconfig: Path, tmp_path: Path
) -> None:
    fake.scripts["first"] = ContainerScript(logs=("from-first",))
    fake.scripts["second"] = ContainerScript(logs=("from-second",))
    plan = {
        "name": "two",
        "termination_grace_period_seconds": 3,
        "containers": [
            {"name": "setup", "role": "init", "image": "busybox:1.36"},
            {"name": "first", "image": "busybox:1.36"},
            {"name": "second", "image": "busybox:1.36"},
        ],
    }
    path = tmp_path / "two.yaml"
    path.write_text(yaml.safe_dump(plan))
    env = {"KUBECONFIG": str(kubeconfig)}
    code, out, err = await cli(
        "--driver", "kubernetes", "create", "-f", str(path), "--wait", env=env
    )
    assert code == 0, out + err
    code, out, _ = await cli("--driver", "kubernetes", "logs", "two", env=env)
    assert (code, out.split()) == (0, ["from-first"])
    code, out, _ = await cli("--driver", "kubernetes", "logs", "two", "--all-containers", env=env)
    assert code == 0 and "[first] from-first" in out and "[second] from-second" in out
    code, out, _ = await cli("--driver", "kubernetes", "get", "two", "-o", "name", env=env)
    assert (code, out) == (0, "two\n")
