"""Zero-downtime replacement on real engines: the new instance ready first, then the old drained."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from asyncdeploy import (
    Checks,
    Container,
    Deployer,
    DrainStarted,
    EngineTimeout,
    Probe,
    WorkloadConflict,
    WorkloadNotFound,
)
from asyncdeploy.labels import LABEL_INSTANCE_OF
from asyncdeploy.verify import VerifyOptions, demo_plan, run_verify
from tests.cli_runner import invoke_in_thread
from tests.engines.conftest import BUSYBOX, RUN_ID, RUN_LABEL
from tests.engines.helpers import plan

pytestmark = pytest.mark.anyio

STAY = "trap 'exit 0' TERM; while :; do sleep 1 & wait $!; done"


def server(version: str, *, ready_after: float = 1) -> Container:
    """A run container that turns ready ``ready_after`` s after it starts (-1: never)."""
    become_ready = "" if ready_after < 0 else f"sleep {ready_after}; touch /tmp/ready; "
    return Container(
        name="server",
        image=BUSYBOX,
        command=["sh", "-c", f"{become_ready}{STAY}"],
        env={"VERSION": version},
        checks=Checks(readiness=Probe(exec=["test", "-f", "/tmp/ready"], period_seconds=1)),
    )


async def test_replace_starts_the_new_instance_before_draining_the_old(
    deployer: Deployer, name: Callable[[str], str]
) -> None:
    """The old one keeps running until the new one is ready; then it alone is drained."""
    app = name("app")
    await deployer.create(plan(app, [server("v1")], termination_grace_period_seconds=3))
    await deployer.wait_ready(app)
    seen_while_ready: list[set[str]] = []

    async def on_ready(status: object) -> None:
        seen_while_ready.append({w.name for w in await deployer.list({RUN_LABEL: RUN_ID})})

    result = await deployer.replace(
        plan(app, [server("v2", ready_after=2)], termination_grace_period_seconds=3),
        on_ready=on_ready,
    )
    new = result.new.name
    assert new.startswith(f"{app}-") and new != app
    assert result.new.state == "running" and result.new.labels[LABEL_INSTANCE_OF] == app
    assert seen_while_ready == [{app, new}], "both ran when the new one turned ready"
    assert [s.workload for s in result.drained] == [app]
    assert {c.outcome for c in result.drained[0].containers if c.role == "run"} == {"exited"}
    remaining = {w.name for w in await deployer.list({RUN_LABEL: RUN_ID})}
    assert app not in remaining and new in remaining

    again = await deployer.replace(plan(app, [server("v3")], termination_grace_period_seconds=3))
    assert [s.workload for s in again.drained] == [new], "the earlier instance, by its label"


async def test_a_replacement_that_never_becomes_ready_leaves_the_old_one_alone(
    deployer: Deployer, name: Callable[[str], str]
) -> None:
    app = name("stays")
    await deployer.create(plan(app, [server("v1")], termination_grace_period_seconds=3))
    before = await deployer.wait_ready(app)
    with pytest.raises(EngineTimeout, match="not ready within 2 s"):
        await deployer.replace(
            plan(app, [server("v2", ready_after=-1)]), ready_timeout=2, new_name=f"{app}-next"
        )
    assert {w.name for w in await deployer.list({RUN_LABEL: RUN_ID})} >= {app}
    assert all(w.name != f"{app}-next" for w in await deployer.list()), "the new one is removed"
    assert (await deployer.get(app)).containers == before.containers, "the old one untouched"


async def test_replace_on_the_command_line(
    deployer: Deployer, tmp_path: Path, name: Callable[[str], str]
) -> None:
    app = name("cli")
    await deployer.create(plan(app, [server("v1")], termination_grace_period_seconds=3))
    await deployer.wait_ready(app)
    path = tmp_path / "plan.yaml"
    path.write_text(
        f"""
name: {app}
labels: {{{RUN_LABEL}: "{RUN_ID}"}}
pause_image: asyncdeploy-test/pause:latest
termination_grace_period_seconds: 3
containers:
  - name: server
    image: {BUSYBOX}
    command: [sh, -c, "touch /tmp/ready; {STAY}"]
    checks: {{readiness: {{exec: [test, -f, /tmp/ready], period_seconds: 1}}}}
"""
    )

    args = ["--driver", deployer.driver_name, "replace", "-f", str(path), "--name", f"{app}-b"]
    result = await invoke_in_thread(*args)
    code, out, err = result.exit_code, result.stdout, result.stderr
    assert code == 0, out + err
    assert f"ready: {app}-b; draining {app}" in err
    assert f"{app}: drained in" in out
    assert {w.name for w in await deployer.list({RUN_LABEL: RUN_ID})} == {f"{app}-b"}


async def test_verify_refuses_a_name_that_is_taken(
    deployer: Deployer, name: Callable[[str], str]
) -> None:
    """Someone else's workload with the plan's name is neither replaced nor removed."""
    theirs = name("theirs")
    await deployer.create(plan(theirs, [server("theirs")]))
    before = await deployer.get(theirs)
    events: list[object] = []
    with pytest.raises(WorkloadConflict, match="already exists"):
        await run_verify(deployer, demo_plan(theirs), VerifyOptions(), on_event=events.append)
    assert events == [] and not any(isinstance(e, DrainStarted) for e in events)
    assert (await deployer.get(theirs)) == before


async def test_replace_checks_its_names_before_starting_anything(
    deployer: Deployer, name: Callable[[str], str]
) -> None:
    """An unknown --old or a taken new name fails before the new instance is created."""
    app, other = name("names"), name("other")
    await deployer.create(plan(app, [server("v1")], termination_grace_period_seconds=3))
    await deployer.create(plan(other, [server("v1")], termination_grace_period_seconds=3))
    before = {w.name for w in await deployer.list({RUN_LABEL: RUN_ID})}
    with pytest.raises(WorkloadNotFound, match="typo"):
        await deployer.replace(plan(app, [server("v2")]), old=[f"{app}-typo"])
    with pytest.raises(WorkloadConflict, match="has that name"):
        await deployer.replace(plan(app, [server("v2")]), new_name=other)
    assert {w.name for w in await deployer.list({RUN_LABEL: RUN_ID})} == before
