"""Two deployers in two containers that share a host name (issue 24 item 7): each is pid 1 of its
own PID namespace, on one kernel (one boot id). Host name, boot id and pid cannot tell them
apart; one must never judge the other dead while it lives (it would take over its drain or its
replace lock). The containers run the real ``asyncdeploy._owner`` on Docker and Podman.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import anyio
import attrs
import pytest

import asyncdeploy
from asyncdeploy import Deployer
from tests.engines.conftest import PYTHON, RUN_ID, RUN_LABEL
from tests.polling import until

pytestmark = pytest.mark.anyio

SOURCE = Path(asyncdeploy.__file__).parent.parent
LIBRARIES = Path(attrs.__file__).parent.parent  # attrs is all _owner needs

RECORD = """
import json, time
from asyncdeploy._owner import Owner
open("/out/first.json", "w").write(json.dumps(Owner.this_process().to_data()))
time.sleep(60)
"""
JUDGE = """
import json
from asyncdeploy._owner import Owner
first = Owner.from_data(json.load(open("/out/first.json")))
here = Owner.this_process()
json.dump({"same": [first.host == here.host, first.boot_id == here.boot_id, first.pid == here.pid],
           "alive": first.alive()}, open("/out/judged.json", "w"))
"""


async def test_a_live_deployer_in_another_pid_namespace_is_never_judged_dead(
    deployer: Deployer, name: Callable[[str], str], markers: Path
) -> None:
    tmp_path = markers  # a directory the containers may write into
    session = deployer.driver.session  # type: ignore[attr-defined]
    made: list[str] = []

    async def run(script: str, which: str) -> None:
        config = {
            "Image": PYTHON,
            "Hostname": "deployers",
            "Cmd": ["python3", "-c", script],
            "Env": ["PYTHONPATH=/src:/libs"],
            "Labels": {RUN_LABEL: RUN_ID},
            "HostConfig": {
                "Binds": [
                    f"{SOURCE / 'asyncdeploy'}:/src/asyncdeploy:ro",
                    f"{LIBRARIES / 'attrs'}:/libs/attrs:ro",
                    f"{LIBRARIES / 'attr'}:/libs/attr:ro",
                    f"{tmp_path}:/out",
                ]
            },
        }
        with session.errors(f"create {which}"):
            ident = await session.create(config, name(which))
        made.append(ident)
        with session.errors(f"start {which}"):
            await session.start(ident)

    try:
        await run(RECORD, "first")
        await until((tmp_path / "first.json").exists, timeout=30, interval=0.1)
        await run(JUDGE, "judge")
        await until((tmp_path / "judged.json").exists, timeout=30, interval=0.1)
        judged = json.loads((tmp_path / "judged.json").read_text())
    finally:
        with anyio.CancelScope(shield=True):
            for ident in made:
                await session.client.containers.container(ident).delete(force=True)
    assert judged["same"] == [True, True, True], "what cannot tell them apart"
    assert judged["alive"] is not False, "the first deployer lives: never judged dead"
