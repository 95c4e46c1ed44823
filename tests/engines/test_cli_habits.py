"""The kubectl and docker habits of the CLI on real engines: logs flags, exec, create --wait,
-o name|yaml|wide, aligned columns, plan order, delete-all with no match, list -w."""

from __future__ import annotations

import datetime
import json
import os
import re
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
from anyio.streams.buffered import BufferedByteReceiveStream

from asyncdeploy import Deployer, WorkloadConflict
from tests.cli_runner import invoke_in_thread
from tests.engines import helpers
from tests.engines.conftest import BUSYBOX, RUN_ID, RUN_LABEL

pytestmark = pytest.mark.anyio

STAY = "trap 'exit 0' TERM; while :; do sleep 1 & wait $!; done"


def talker(name: str, **extra: Any) -> dict[str, Any]:
    """A run container that prints three numbered lines, then idles until SIGTERM."""
    script = f"echo {name}-1; echo {name}-2; echo {name}-3; {STAY}"
    return {"name": name, "image": BUSYBOX, "command": ["sh", "-c", script], **extra}


def plan_file(tmp_path: Path, name: str, containers: list[dict[str, Any]], **kw: Any) -> str:
    kw.setdefault("termination_grace_period_seconds", 3)
    return str(helpers.plan_file(tmp_path, name, containers, **kw))


async def cli(deployer: Deployer, *args: str) -> tuple[int, str, str]:
    """Run the CLI on the deployer's engine: (exit code, stdout, stderr)."""
    result = await invoke_in_thread("--driver", deployer.driver_name, *args)
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
async def talkers(deployer: Deployer, tmp_path: Path, name: Callable[[str], str]) -> str:
    """A workload with an init container and two run containers, "first" then "second"."""
    workload = name("logs")
    setup = {"name": "setup", "role": "init", "image": BUSYBOX, "command": ["echo", "setup-ran"]}
    path = plan_file(
        tmp_path, workload, [setup, talker("first"), talker("second", env={"WHO": "second"})]
    )
    code, out, err = await cli(deployer, "create", "-f", path, "--wait", "--timeout", "60s")
    assert code == 0, out + err
    for container in ("first", "second"):  # each has printed its three lines
        for _ in range(100):
            if f"{container}-3" in (await cli(deployer, "logs", workload, "-c", container))[1]:
                break
            await anyio.sleep(0.2)
    return workload


async def test_logs_default_to_the_plans_first_run_container(
    deployer: Deployer, talkers: str
) -> None:
    """Not the newest container: the first run container of the plan, as documented."""
    code, out, _ = await cli(deployer, "logs", talkers)
    assert code == 0 and out.split() == ["first-1", "first-2", "first-3"]


async def test_logs_tail_since_timestamps_container(deployer: Deployer, talkers: str) -> None:
    code, out, _ = await cli(deployer, "logs", talkers, "--tail", "1")
    assert code == 0 and out.split() == ["first-3"]
    code, out, _ = await cli(deployer, "logs", talkers, "-c", "second", "--tail", "2")
    assert code == 0 and out.split() == ["second-2", "second-3"]
    code, out, _ = await cli(deployer, "logs", talkers, "--timestamps")
    lines = out.splitlines()
    assert code == 0 and len(lines) == 3
    assert all(
        re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d) first-", x)
        for x in lines
    ), lines
    code, out, _ = await cli(deployer, "logs", talkers, "--since", "1h")
    assert code == 0 and out.split() == ["first-1", "first-2", "first-3"]
    later = (datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1)).isoformat()
    code, out, _ = await cli(deployer, "logs", talkers, "--since", later)
    assert code == 0 and out == "", "nothing was logged after a time an hour ahead"
    code, _, err = await cli(deployer, "logs", talkers, "--since", "yesterday-ish")
    assert code == 2 and "--since" in err


async def test_logs_all_containers_in_plan_order(deployer: Deployer, talkers: str) -> None:
    code, out, _ = await cli(deployer, "logs", talkers, "--all-containers")
    assert code == 0
    assert out.splitlines() == [
        "[setup] setup-ran",
        *[f"[first] first-{i}" for i in (1, 2, 3)],
        *[f"[second] second-{i}" for i in (1, 2, 3)],
    ]
    code, _, err = await cli(deployer, "logs", talkers, "--all-containers", "-c", "first")
    assert code == 2 and "exclude" in err


async def test_exec_returns_the_commands_exit_code(deployer: Deployer, talkers: str) -> None:
    code, out, _ = await cli(deployer, "exec", talkers, "--", "sh", "-c", "echo out; exit 3")
    assert (code, out) == (3, "out\n")
    code, out, _ = await cli(
        deployer, "exec", talkers, "-c", "second", "--", "sh", "-c", "echo $WHO"
    )
    assert (code, out) == (0, "second\n")
    code, _, err = await cli(deployer, "exec", talkers, "-c", "nope", "--", "true")
    assert code == 1 and "no container 'nope'" in err


async def test_get_lists_containers_in_plan_order(deployer: Deployer, talkers: str) -> None:
    code, out, _ = await cli(deployer, "get", talkers, "-o", "json")
    assert code == 0
    data = json.loads(out)
    assert [c["name"] for c in data["containers"]] == ["pause", "setup", "first", "second"]


async def test_create_wait_returns_once_ready_and_times_out_when_never(
    deployer: Deployer, tmp_path: Path, name: Callable[[str], str]
) -> None:
    """--wait: the exec readiness check passes only after 2 s; a check that never passes fails."""
    ready_later = {
        "name": "app",
        "image": BUSYBOX,
        "command": ["sh", "-c", f"sleep 2; touch /tmp/ready; {STAY}"],
        "checks": {"readiness": {"exec": ["test", "-f", "/tmp/ready"], "period_seconds": 1}},
    }
    workload = name("wait")
    start = anyio.current_time()
    code, out, err = await cli(
        deployer,
        "create",
        "-f",
        plan_file(tmp_path, workload, [ready_later]),
        "--wait",
        "-o",
        "json",
    )
    assert code == 0, out + err
    assert anyio.current_time() - start >= 2, "it waited for the readiness check"
    assert json.loads(out)["workload"]["state"] == "running"
    code, out, _ = await cli(deployer, "exec", workload, "--", "test", "-f", "/tmp/ready")
    assert code == 0, "ready means the check passed, not only that the container runs"

    never = {**ready_later, "command": ["sh", "-c", STAY]}
    path = plan_file(tmp_path, name("never"), [never])
    code, _, err = await cli(deployer, "create", "-f", path, "--wait", "--timeout", "2s")
    assert code == 1 and "not ready within 2 s" in err


async def test_output_formats_and_aligned_columns(
    deployer: Deployer, tmp_path: Path, name: Callable[[str], str]
) -> None:
    short = name("s")
    long = name("a-workload-with-a-name-far-longer-than-twenty-four")
    for workload in (short, long):
        path = plan_file(tmp_path, workload, [talker("app")])
        assert (await cli(deployer, "create", "-f", path))[0] == 0
    selector = ["-l", f"{RUN_LABEL}={RUN_ID}"]
    code, out, _ = await cli(deployer, "list", *selector, "-o", "name")
    assert code == 0 and {short, long} <= set(out.split())
    code, out, _ = await cli(deployer, "list", *selector, "-o", "yaml")
    assert code == 0 and {short, long} <= {w["name"] for w in yaml.safe_load(out)}
    code, out, _ = await cli(deployer, "list", *selector, "-o", "wide")
    header, *rows = out.splitlines()
    assert header.split() == [
        "NAME",
        "STATE",
        "READY",
        "PORTS",
        "GRACE",
        "AGE",
        "RESTARTS",
        "DRIVER",
        "NODE",
        "CONTAINERS",
        "IMAGES",
    ]
    assert all(deployer.driver_name in row and BUSYBOX in row for row in rows)
    code, out, _ = await cli(deployer, "list", *selector)
    header, *rows = out.splitlines()
    for column in ("STATE", "READY", "PORTS", "GRACE", "AGE", "CONTAINERS"):
        at = header.index(column)
        for row in rows:  # every value starts where its heading starts, after a space
            assert row[at - 1] == " " and row[at] != " ", (column, out)
    mine = [row for row in rows if row.split()[0] in (short, long)]
    assert [row.split()[1:3] for row in mine] == [["running", "1/1"]] * 2


async def test_delete_all_with_no_match_says_so(deployer: Deployer) -> None:
    code, out, err = await cli(deployer, "delete-all", "-l", f"{RUN_LABEL}=nothing-{RUN_ID}")
    assert (code, out) == (0, "")
    assert "No resources found" in err


async def test_kubernetes_options_with_another_driver_are_a_usage_error(
    deployer: Deployer,
) -> None:
    code, _, err = await cli(deployer, "list", "-n", "ml")
    assert code == 2 and "--namespace" in err and deployer.driver_name in err


async def test_list_watch_prints_changes_and_ends_on_ctrl_c(
    deployer: Deployer, tmp_path: Path, name: Callable[[str], str]
) -> None:
    """-w prints the listing, then each change; Ctrl-C ends it quietly with 130."""
    first, second = name("w1"), name("w2")
    assert (await cli(deployer, "create", "-f", plan_file(tmp_path, first, [talker("a")])))[0] == 0
    args = ["--driver", deployer.driver_name, "list", "-w", "-l", f"{RUN_LABEL}={RUN_ID}"]
    seen: list[str] = []
    async with await anyio.open_process(
        [sys.executable, "-m", "asyncdeploy", *args], env={**os.environ, "PYTHONUNBUFFERED": "1"}
    ) as process:
        assert process.stdout is not None and process.stderr is not None
        lines = BufferedByteReceiveStream(process.stdout)

        async def read_until(text: str) -> None:
            while not any(text in line for line in seen):
                seen.append((await lines.receive_until(b"\n", 65536)).decode())

        try:
            with anyio.fail_after(30):
                await read_until(first)
                path = plan_file(tmp_path, second, [talker("b")])
                assert (await cli(deployer, "create", "-f", path))[0] == 0
                await read_until(second)
                code, _, _ = await cli(deployer, "delete", second, "--grace-period-seconds", "0")
                assert code == 0
                await read_until("deleted")
            process.send_signal(signal.SIGINT)
            with anyio.fail_after(20):
                code = await process.wait()
                stderr = b"".join([chunk async for chunk in process.stderr]).decode()
        finally:
            if process.returncode is None:
                process.kill()
    assert seen[0].split()[:2] == ["NAME", "STATE"]
    assert sum(line.startswith("NAME") for line in seen) == 1, "one header, then change rows"
    assert code == 130 and "Traceback" not in stderr, stderr


async def test_verify_without_a_plan_names_its_workload_itself(
    deployer: Deployer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not "demo": asyncdeploy-verify-<random>, a new one each run (run_verify, which refuses a
    taken name, is stood in for here; tests/engines/test_replace.py shows the refusal)."""
    import asyncdeploy.verify

    names: list[str] = []

    async def stand_in(deployer: Deployer, plan: Any, *args: Any, **kwargs: Any) -> Any:
        names.append(plan.name)
        raise WorkloadConflict("stop before any traffic", engine=deployer.driver_name)

    monkeypatch.setattr(asyncdeploy.verify, "run_verify", stand_in)
    for _ in range(2):
        code, _, err = await cli(deployer, "verify")
        assert code == 1 and "stop before any traffic" in err
    assert all(re.fullmatch(r"asyncdeploy-verify-[0-9a-f]{6}", n) for n in names), names
    assert len(set(names)) == 2


async def test_a_node_selector_is_refused_before_anything_is_touched(
    deployer: Deployer, tmp_path: Path, name: Callable[[str], str]
) -> None:
    """``node_selector`` places a Pod on Kubernetes nodes; Docker and Podman run on their one
    host, which no selector picks: a plan that sets it is refused (exit 2, naming the field),
    before anything is made — and a changed plan adding it leaves the running workload as it
    was (no drain of what it would replace)."""
    workload = name("nodesel")
    server = {"name": "server", "image": BUSYBOX, "command": ["sleep", "300"]}
    assert (await cli(deployer, "create", "-f", plan_file(tmp_path, workload, [server])))[0] == 0
    before = await deployer.get(workload)
    pinned = plan_file(tmp_path, workload, [server], node_selector={"kubernetes.io/hostname": "a"})
    code, _, err = await cli(deployer, "create", "-f", pinned)
    assert code == 2, err
    assert "node_selector" in err and "Traceback" not in err
    assert await deployer.get(workload) == before  # the same containers, still running
    fresh = plan_file(tmp_path, name("nodesel2"), [server], node_selector={"disk": "ssd"})
    code, _, err = await cli(deployer, "create", "-f", fresh)
    assert code == 2 and "node_selector" in err, err
    assert workload in (await cli(deployer, "list", "-o", "name"))[1]
    assert "nodesel2" not in (await cli(deployer, "list", "-o", "name"))[1]
