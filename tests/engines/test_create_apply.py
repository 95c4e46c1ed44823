"""``create`` of a changed plan behaves like ``kubectl apply`` (issue 24 item 5): it replaces the
workload with the strategy ``replace`` would choose, says which and why before it touches
anything, keeps the old instance serving until the new one is ready (surge), and announces a
recreate's gap; ``--strategy`` is accepted. Through the real CLI on Docker and Podman.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from asyncdeploy import Deployer
from asyncdeploy.plan import plan_to_mapping
from tests.engines.cli_process import start_cli
from tests.engines.helpers import plan
from tests.engines.test_failed_recreate import web
from tests.engines.test_replace import server
from tests.engines.test_replace_strategies import free_port, serves
from tests.polling import until

pytestmark = pytest.mark.anyio


async def test_create_of_a_changed_plan_surges_and_keeps_the_old_serving_until_the_new_is_ready(
    deployer: Deployer, name: Callable[[str], str], tmp_path: Path
) -> None:
    app = name("apply")
    await deployer.create(plan(app, [server("v1")], termination_grace_period_seconds=2))
    await deployer.wait_ready(app, timeout=20)
    path = tmp_path / "v2.yaml"
    changed = plan(app, [server("v2", ready_after=3)], termination_grace_period_seconds=2)
    path.write_text(yaml.safe_dump(plan_to_mapping(changed)))

    cli = await start_cli(deployer.driver_name, "create", "-f", str(path), "-o", "json")
    code, stderr = await cli.finish()

    assert code == 0, stderr
    kinds = [line.get("event") for line in cli.lines]
    assert kinds[0] == "ReplaceStrategy", kinds  # said before anything was touched
    assert cli.lines[0]["strategy"] == "surge", cli.lines[0]
    assert kinds.index("ReplaceReady") < kinds.index("DrainStarted"), "the old served meanwhile"
    assert cli.lines[-1]["action"] == "replaced" and cli.lines[-1]["strategy"] == "surge"
    [instance] = {w.name for w in await deployer.list({"replace.asyncdeploy.io/instance-of": app})}
    assert (await deployer.get(app)).name == instance


async def test_create_of_a_changed_plan_on_a_fixed_host_port_announces_the_recreate_gap(
    deployer: Deployer, name: Callable[[str], str], tmp_path: Path
) -> None:
    app, port = name("applygap"), free_port()
    await deployer.create(web(app, "v1", port))
    await deployer.wait_ready(app, timeout=20)
    path = tmp_path / "v2.yaml"
    path.write_text(yaml.safe_dump(plan_to_mapping(web(app, "v2", port))))

    cli = await start_cli(deployer.driver_name, "create", "-f", str(path), "--strategy", "auto")
    code, stderr = await cli.finish()

    assert code == 0, stderr
    lines = stderr.splitlines()
    said = next(i for i, line in enumerate(lines) if "recreate (host port" in line)
    assert "nothing serves until the new one is ready" in lines[said], stderr
    drained = next(i for i, line in enumerate(lines) if "drain started" in line)
    assert said < drained, "announced before the old one's drain"
    await until(lambda: serves(port, "v2"), timeout=15)
    again = await start_cli(deployer.driver_name, "create", "-f", str(path), "-o", "json")
    code, stderr = await again.finish()
    assert code == 0 and again.lines[-1]["action"] == "unchanged", stderr
