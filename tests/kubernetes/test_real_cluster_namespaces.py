"""``list -A`` and ``delete-all -A`` on the real cluster (issue 17 item 7): the same workload
name in two namespaces of this run's own, listed with their namespaces and drained together.

Only this run's workloads are ever touched: every command carries the run's label selector
(other suites and other runs share the cluster).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import k8s_contract
import pytest
import yaml
from click.testing import CliRunner
from real_cluster import IMAGE, RUN_ID, cleaning_driver, cli_kubeconfig, scratch_namespace

from asyncdeploy.cli import main
from asyncdeploy.drivers.kubernetes import KubernetesDriver

pytestmark = pytest.mark.anyio

FIRST, SECOND = f"asyncdeploy-nsa-{RUN_ID}", f"asyncdeploy-nsb-{RUN_ID}"


@pytest.fixture(scope="module")
async def namespaces() -> AsyncIterator[tuple[str, str]]:
    async with scratch_namespace(FIRST), scratch_namespace(SECOND):
        yield FIRST, SECOND


@pytest.fixture
async def drivers(namespaces: tuple[str, str]) -> AsyncIterator[list[KubernetesDriver]]:
    async with cleaning_driver(namespaces[0]) as first, cleaning_driver(namespaces[1]) as second:
        yield [first, second]


async def _cli(env: dict[str, str], *args: str) -> tuple[int, str, str]:
    def invoke() -> tuple[int, str, str]:
        result = CliRunner(env=env).invoke(main, ["--driver", "kubernetes", *args])
        assert "Traceback" not in result.output, result.output
        return result.exit_code, result.stdout, result.stderr

    return await anyio.to_thread.run_sync(invoke)


async def test_list_and_delete_all_across_two_namespaces_on_a_real_cluster(
    drivers: list[KubernetesDriver], namespaces: tuple[str, str], tmp_path: Path
) -> None:
    """One ``twin`` in each namespace: ``list`` (context: the first) sees one, ``list -A``
    both with a NAMESPACE column and the namespace in JSON; ``delete-all -A`` drains both,
    each named namespace/name, and nothing of the run is left."""
    env = {"KUBECONFIG": str(cli_kubeconfig(namespaces[0], tmp_path / "kubeconfig"))}
    selector = f"{k8s_contract.RUN_LABEL}={RUN_ID}"
    for namespace in namespaces:
        plan = {
            "name": "twin",
            "namespace": namespace,
            "labels": {k8s_contract.RUN_LABEL: RUN_ID},
            "termination_grace_period_seconds": 5,
            "containers": [
                {"name": "server", "image": IMAGE, "command": k8s_contract.trap_script(0.5, False)}
            ],
        }
        path = tmp_path / f"{namespace}.yaml"
        path.write_text(yaml.safe_dump(plan))
        code, out, err = await _cli(env, "create", "-f", str(path), "--wait", "--timeout", "90")
        assert code == 0, (out, err)

    code, out, err = await _cli(env, "list", "-l", selector, "-o", "json")
    assert code == 0, err
    assert [(w["namespace"], w["name"]) for w in json.loads(out)] == [(FIRST, "twin")]

    code, out, err = await _cli(env, "list", "-A", "-l", selector, "-o", "json")
    assert code == 0, err
    assert [(w["namespace"], w["name"]) for w in json.loads(out)] == [
        (FIRST, "twin"),
        (SECOND, "twin"),
    ]
    code, out, err = await _cli(env, "list", "-A", "-l", selector)
    assert code == 0, err
    header, *rows = out.splitlines()
    assert header.split()[:2] == ["NAMESPACE", "NAME"]
    assert [row.split()[:3] for row in rows] == [
        [FIRST, "twin", "running"],
        [SECOND, "twin", "running"],
    ]

    code, out, err = await _cli(env, "delete-all", "-A", "-l", selector, "-o", "json")
    assert code == 0, err
    events = [json.loads(line) for line in out.splitlines()]
    finished = [e for e in events if e["event"] == "DrainFinished"]
    assert sorted(e["workload"] for e in finished) == [f"{FIRST}/twin", f"{SECOND}/twin"]
    assert all(e["containers"][0]["outcome"] == "exited" for e in finished), finished
    for driver in drivers:
        assert await driver.list({k8s_contract.RUN_LABEL: RUN_ID}) == []
