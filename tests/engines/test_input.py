"""Input that must be refused or masked, on the real engines: selectors, secrets, names, URLs."""

from __future__ import annotations

import json
from collections.abc import Callable

import anyio
import pytest

from asyncdeploy import Container, Deployer, Mount, PlanError, WorkloadNotFound
from tests import cli_runner
from tests.engines.conftest import BUSYBOX, RUN_ID, RUN_LABEL
from tests.engines.helpers import plan

pytestmark = pytest.mark.anyio


def invoke(*args: str) -> tuple[int, str]:
    result = cli_runner.invoke(*args)
    return result.exit_code, result.output


def sleeper(name: str = "app", **kw: object) -> Container:
    return Container(name=name, image=BUSYBOX, command=["sleep", "3600"], **kw)  # type: ignore[arg-type]


async def exists(deployer: Deployer, workload: str) -> bool:
    try:
        await deployer.get(workload)
    except WorkloadNotFound:
        return False
    return True


async def test_delete_all_team_empty_spares_team_ml(
    deployer: Deployer, name: Callable[[str], str]
) -> None:
    """``team=`` selects the empty value only (Podman's own filter reads it as "any value")."""
    ml, empty = name("ml"), name("empty")
    await deployer.create(plan(ml, [sleeper()], {"team": "ml"}, termination_grace_period_seconds=0))
    await deployer.create(
        plan(empty, [sleeper()], {"team": ""}, termination_grace_period_seconds=0)
    )
    driver = deployer.driver_name
    code, out = await anyio.to_thread.run_sync(
        invoke, "--driver", driver, "delete-all", "--selector", f"team=,{RUN_LABEL}={RUN_ID}"
    )
    assert code == 0, out
    assert await exists(deployer, ml), "delete-all --selector team= deleted the team=ml workload"
    assert not await exists(deployer, empty)

    listed = [s.name for s in await deployer.list(f"team!=ml,{RUN_LABEL}={RUN_ID}")]
    assert ml not in listed
    assert [s.name for s in await deployer.list(f"team in (ml),{RUN_LABEL}={RUN_ID}")] == [ml]
    assert [s.name for s in await deployer.list(f"!team,{RUN_LABEL}={RUN_ID}")] == []

    code, out = await anyio.to_thread.run_sync(invoke, "--driver", driver, "delete-all")
    assert code == 2 and "--all" in out
    assert await exists(deployer, ml)


async def test_inspect_never_prints_a_password(
    deployer: Deployer, name: Callable[[str], str]
) -> None:
    """Not in a URL in the env, not in a DSN, not in a command-line argument."""
    workload = name("secret")
    app = Container(
        name="app",
        image=BUSYBOX,
        command=["sh", "-c", "sleep 3600", "sh", "postgres://app:ArgPw7x@db/x"],
        env={
            "DATABASE_URL": "postgres://app:S3cretPw@db:5432/models",
            "PG_CONN": "host=db user=app password=DsnPw9q",
            "SESSION_COOKIE": "CookieVal1",
            "MODEL": "tiny",
        },
    )
    await deployer.create(plan(workload, [app], termination_grace_period_seconds=0))
    code, out = await anyio.to_thread.run_sync(
        invoke, "--driver", deployer.driver_name, "inspect", workload, "-o", "json"
    )
    assert code == 0, out
    for secret in ("S3cretPw", "DsnPw9q", "CookieVal1", "ArgPw7x"):
        assert secret not in out
    env = json.loads(out)["containers"]["app"]["Config"]["Env"]
    assert "DATABASE_URL=postgres://app:****@db:5432/models" in env
    assert "MODEL=tiny" in env


async def test_workloads_never_compete_for_an_engine_name(
    deployer: Deployer, name: Callable[[str], str]
) -> None:
    """Workload ``w`` with a container ``x-pause`` and workload ``w-x`` both exist at once."""
    first = name("n")
    second = f"{first}-x"
    await deployer.create(plan(first, [sleeper("x-pause")], termination_grace_period_seconds=0))
    await deployer.create(plan(second, [sleeper()], termination_grace_period_seconds=0))
    assert {c.name for c in (await deployer.get(first)).containers} == {"pause", "x-pause"}
    assert {c.name for c in (await deployer.get(second)).containers} == {"pause", "app"}


async def test_a_volume_name_never_reaches_another_endpoint(
    deployer: Deployer, name: Callable[[str], str]
) -> None:
    """Even a plan that slipped past validation: the driver sends no ``volumes/../info``
    (which reads ``GET /info`` as an existing volume) and creates nothing."""
    workload = name("vol")
    mount = Mount(type="volume", source="models", target="/models")
    object.__setattr__(mount, "source", "../info")  # what validation would have refused
    with pytest.raises(PlanError, match="not a volume name"):
        await deployer.create(plan(workload, [sleeper(mounts=[mount])]))
    assert not await exists(deployer, workload)
