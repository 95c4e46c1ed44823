"""kubectl and docker habits on real engines: name completion (bash, zsh, fish), ``delete`` of
several names, ``-l`` and ``--ignore-not-found``, ``wait --for ready|deleted``, ``version``."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest
from click.testing import CliRunner

from asyncdeploy import Checks, Container, Deployer, Probe, WorkloadNotFound
from asyncdeploy.cli import _common, main
from tests.cli_runner import invoke_in_thread
from tests.engines.conftest import BUSYBOX, RUN_ID
from tests.engines.helpers import plan, plan_file

pytestmark = pytest.mark.anyio


async def _sleepers(deployer: Deployer, *names: str, side: bool = False, **labels: str) -> None:
    """Workloads that sleep (``side``: a second container, for completing ``-c``)."""
    for name in names:
        containers = [Container(name="app", image=BUSYBOX, command=["sleep", "600"])]
        if side:
            containers.append(Container(name="side", image=BUSYBOX, command=["sleep", "600"]))
        await deployer.create(
            plan(name, containers, extra_labels=labels, termination_grace_period_seconds=1)
        )


async def _complete(shell: str, words: str, cword: str) -> list[str]:
    return await anyio.to_thread.run_sync(_complete_now, shell, words, cword)


def _complete_now(shell: str, words: str, cword: str) -> list[str]:
    env = {"_ASYNCDEPLOY_COMPLETE": f"{shell}_complete", "COMP_WORDS": words, "COMP_CWORD": cword}
    result = CliRunner(env=env).invoke(main, [], prog_name="asyncdeploy")
    assert result.exit_code == 0, result.output
    if shell == "zsh":  # type, value, help: three lines each
        return result.output.splitlines()[1::3]
    return [line.split(",", 1)[1].split("\t")[0] for line in result.output.splitlines()]


async def test_workload_and_container_names_complete(
    deployer: Deployer, name: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A completion asks the engine for 5 s at most (a slow one completes nothing); a loaded
    # clean clone's Docker took longer to list, and the names are this test's subject
    monkeypatch.setattr(_common, "COMPLETION_SECONDS", 60.0)
    workload = name("complete")
    await _sleepers(deployer, workload, side=True)
    driver = deployer.driver_name
    prefix = f"t{RUN_ID}-complete"
    assert await _complete("bash", f"asyncdeploy --driver {driver} logs {prefix}", "4") == [
        workload
    ]
    assert await _complete("zsh", f"asyncdeploy --driver {driver} delete {prefix}", "4") == [
        workload
    ]
    line = f"asyncdeploy --driver {driver} exec {workload} -c "
    assert await _complete("fish", line, "") == ["app", "side"]  # not the pause container
    assert await _complete("bash", f"asyncdeploy --driver {driver} logs {workload} -c s", "6") == [
        "side"
    ]
    wrong = await invoke_in_thread("--driver", driver, "logs", workload, "-c", "nope")
    assert wrong.exit_code == 1 and "no container 'nope' (it has app, side)" in wrong.output


async def test_delete_several_by_name_or_selector(
    deployer: Deployer, name: Callable[[str], str]
) -> None:
    one, two, three = name("del1"), name("del2"), name("del3")
    await _sleepers(deployer, one)
    await _sleepers(deployer, two, three, tier=f"t{RUN_ID}")
    driver = ["--driver", deployer.driver_name]
    missing = f"t{RUN_ID}-missing"
    refused = await invoke_in_thread(*driver, "delete", one, missing)
    assert refused.exit_code == 1 and f"no workload named '{missing}'" in refused.output
    assert (await deployer.get(one)).name == one  # refused before anything was drained
    done = await invoke_in_thread(*driver, "delete", one, missing, "--ignore-not-found")
    assert done.exit_code == 0, done.output
    by_label = await invoke_in_thread(*driver, "delete", "-l", f"tier=t{RUN_ID}", "-o", "json")
    assert by_label.exit_code == 0, by_label.output
    finished = [json.loads(line) for line in by_label.stdout.splitlines()]
    assert sorted(e["workload"] for e in finished if e["event"] == "DrainFinished") == [two, three]
    for gone in (one, two, three):
        with pytest.raises(WorkloadNotFound):
            await deployer.get(gone)
    again = await invoke_in_thread(*driver, "delete", "-l", f"tier=t{RUN_ID}")
    assert again.exit_code == 0 and "No resources found" in again.output
    nothing = await invoke_in_thread(*driver, "delete", missing, "--ignore-not-found")
    assert nothing.exit_code == 0, nothing.output
    usage = await invoke_in_thread(*driver, "delete")
    assert usage.exit_code == 2


async def test_wait_for_ready_and_deleted(deployer: Deployer, name: Callable[[str], str]) -> None:
    workload = name("wait")
    await _sleepers(deployer, workload)
    driver = ["--driver", deployer.driver_name]
    ready = await invoke_in_thread(*driver, "wait", workload, "--for", "ready", "--timeout", "30s")
    assert ready.exit_code == 0 and ready.stdout == f"{workload}: ready\n", ready.output
    early = await invoke_in_thread(*driver, "wait", workload, "--for", "deleted", "--timeout", "1s")
    assert early.exit_code == 1, early.output
    assert f"Error: {workload} was not deleted within 1 s (--timeout)\n" in early.output
    await deployer.delete(workload)
    gone = await invoke_in_thread(*driver, "wait", workload, "--for", "deleted", "-o", "json")
    assert gone.exit_code == 0 and json.loads(gone.stdout)["condition"] == "deleted"
    absent = await invoke_in_thread(*driver, "wait", workload, "--timeout", "5s")
    assert absent.exit_code == 1 and "no workload" in absent.output


async def test_wait_for_ready_says_the_timeout_given(
    deployer: Deployer, name: Callable[[str], str]
) -> None:
    """Issue 32 item 2: the figure is the one the user typed, never the time left of it
    (was: "not ready within 1.99979 s"), and the line names the workload."""
    workload = name("never")
    never = Container(
        name="app",
        image=BUSYBOX,
        command=["sleep", "600"],
        checks=Checks(readiness=Probe(exec=["test", "-f", "/tmp/never"], period_seconds=1)),
    )
    await deployer.create(plan(workload, [never], termination_grace_period_seconds=1))
    late = await invoke_in_thread(
        "--driver", deployer.driver_name, "wait", workload, "--timeout", "2s"
    )
    assert late.exit_code == 1, late.output
    assert late.stderr.splitlines()[-1] == f"Error: {workload} was not ready within 2 s (--timeout)"


async def test_create_wait_says_ready_and_the_api_counts_restarts(
    deployer: Deployer, tmp_path: Path, name: Callable[[str], str]
) -> None:
    """Issue 32 item 5: ``create --wait`` says the workload is ready once it is; a create's
    status counts 0 restarts (as ``get`` shows), not None (not known)."""
    workload = name("waitsay")
    app = {"name": "app", "image": BUSYBOX, "command": ["sleep", "600"]}
    path = plan_file(tmp_path, workload, [app], termination_grace_period_seconds=1)
    driver = ["--driver", deployer.driver_name]
    made = await invoke_in_thread(*driver, "create", "-f", str(path), "--wait")
    assert made.exit_code == 0, made.output
    assert made.stdout == f"created: {workload} on {deployer.driver_name}, ready\n"
    again = await invoke_in_thread(*driver, "create", "-f", str(path), "-o", "json")
    assert again.exit_code == 0 and json.loads(again.stdout)["action"] == "unchanged"
    counted = [c["restarts"] for c in json.loads(again.stdout)["workload"]["containers"]]
    assert counted == [0, 0], counted  # the pause, the app: read, as get reads them
    other = name("restarts")
    made_here = await deployer.create(
        plan(other, [Container(name="app", image=BUSYBOX, command=["sleep", "600"])])
    )
    assert [c.restarts for c in made_here.status.containers] == [0, 0]  # the pause, the app
    assert [c.restarts for c in (await deployer.get(other)).containers] == [0, 0]


async def test_version_names_the_client_and_the_engine(deployer: Deployer) -> None:
    result = await invoke_in_thread("--driver", deployer.driver_name, "version", "-o", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["client"]["version"] and data["engine"]["driver"] == deployer.driver_name
    assert data["engine"]["version"] and data["engine"]["api_version"]
    text = await invoke_in_thread("--driver", deployer.driver_name, "version")
    assert text.stdout.startswith("Client: asyncdeploy ") and "\nEngine: " in text.stdout
