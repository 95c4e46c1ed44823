"""The CLI's start (issue 18 item 3, issue 25 item 7): ``--help`` imports no command, no
deployer, no driver and no engine client; a command imports what it uses (``list``, ``get`` and
``logs`` on Docker no Kubernetes client and no YAML; on Kubernetes no Docker client and none of
kubernetes-asyncio's generated API classes and models); the lazy group's table says what each
command says of itself. Speed itself is the benchmark's (``benchmarks/kube.py``,
``benchmarks/start.py``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import click
import pytest

from asyncdeploy.cli import COMMANDS, main

PROBE = """
import contextlib, io, json, sys
from asyncdeploy.cli import main
with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
    main(sys.argv[1:], prog_name="asyncdeploy")
print(json.dumps(sorted(sys.modules)))
"""
NOWHERE = "unix:///nonexistent/asyncdeploy-start-test.sock"  # an engine that cannot answer
READ_ONLY = [["list"], ["get", "demo"], ["logs", "demo"]]
NEVER_READING = (  # what no read-only command uses, on any engine
    "asyncdeploy.cli.render",
    "asyncdeploy.cli.workloads",
    "asyncdeploy.cli.verify",
    "asyncdeploy.verify",
    "asyncdeploy.gate",
    "asyncdeploy.workload",
    "asyncdeploy.timeline",
    "asyncdeploy.plan.lint",
    "asyncdeploy.plan.schema",
)
# the API groups' package and its modules, the models' modules (their package is only registered)
K8S_GENERATED = ("kubernetes_asyncio.client.api.", "kubernetes_asyncio.client.models.")
HEAVY = (
    "asyncdeploy.deployer",
    "asyncdeploy.drivers.base",
    "asyncdeploy.plan",
    "asyncdeploy._events",
    "asyncdeploy.cli._common",
    "aiohttp",
    "aiodocker",
    "kubernetes_asyncio",
    "yaml",
)


def _loaded(*args: str, env: dict[str, str] | None = None) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, **(env or {})},
    )
    return set(json.loads(done.stdout.splitlines()[-1]))


def _kubeconfig(tmp_path: Path) -> dict[str, str]:
    """A kubeconfig naming an API server that cannot answer (the discard port): the command
    loads its driver, fails to connect (exit 3), and the probe lists what it loaded."""
    path = tmp_path / "kubeconfig"
    user = {"name": "u", "user": {"token": "t"}}
    context = {"name": "c", "context": {"cluster": "k", "user": "u", "namespace": "ns"}}
    cluster = {"name": "k", "cluster": {"server": "http://127.0.0.1:9"}}
    config = {"clusters": [cluster], "users": [user], "contexts": [context]}
    path.write_text(json.dumps({**config, "current-context": "c"}))
    return {"KUBECONFIG": str(path)}


def _starting(loaded: set[str], prefixes: tuple[str, ...]) -> list[str]:
    return sorted(m for m in loaded if m.startswith(prefixes))


def test_help_loads_no_command_deployer_driver_or_engine_client() -> None:
    loaded = _loaded("--help")
    assert not [m for m in loaded if m.startswith(HEAVY)], sorted(
        m for m in loaded if m.startswith(HEAVY)
    )
    assert not [
        m
        for m in loaded
        if m.startswith("asyncdeploy.cli.") and m != "asyncdeploy.cli._kube_options"
    ]


def test_a_commands_help_loads_that_command_and_no_engine_client() -> None:
    loaded = _loaded("delete", "--help")
    assert "asyncdeploy.cli.workloads" in loaded
    assert "asyncdeploy.cli.verify" not in loaded and "asyncdeploy.cli.replace" not in loaded
    assert not [m for m in loaded if m.startswith(("kubernetes_asyncio", "aiodocker"))]


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_the_tables_help_line_is_the_commands_own(name: str) -> None:
    """The group lists the commands from its table without importing them: each line must be
    what the command's own help begins with (click cuts it to the terminal's width)."""
    command = main.get_command(click.Context(main), name)
    assert command is not None and command.name == name
    own = " ".join((command.help or "").split("\n\n")[0].split())
    line = COMMANDS[name][2]
    assert own.startswith(line.removesuffix("...").rstrip(" ,.")), (line, own)
    assert any(p.name == "kubeconfig" for p in command.params) == COMMANDS[name][1]


@pytest.mark.parametrize("command", READ_ONLY, ids=lambda c: c[0])
def test_a_read_only_command_on_docker_loads_no_kubernetes_client_and_no_yaml(
    command: list[str],
) -> None:
    loaded = _loaded("--driver", "docker", *command, env={"DOCKER_HOST": NOWHERE})
    assert "asyncdeploy.drivers.engine._docker" in loaded and "aiodocker" in loaded  # it ran
    unused = _starting(loaded, ("kubernetes_asyncio", "yaml", *NEVER_READING))
    assert not unused, unused


@pytest.mark.parametrize("command", READ_ONLY, ids=lambda c: c[0])
def test_a_read_only_command_on_kubernetes_loads_no_generated_api_or_model(
    command: list[str], tmp_path: Path
) -> None:
    loaded = _loaded("--driver", "kubernetes", *command, env=_kubeconfig(tmp_path))
    assert "kubernetes_asyncio.client.api_client" in loaded  # it ran, on the library's client
    assert "kubernetes_asyncio.config.kube_config" in loaded
    unused = _starting(loaded, ("aiodocker", *K8S_GENERATED, *NEVER_READING))
    assert not unused and "kubernetes_asyncio.client.api" not in loaded, unused


def test_yaml_output_loads_yaml() -> None:
    """The probe sees what a command loads on its way: ``-o yaml`` (which fails here, as no
    engine answers) has loaded nothing more than ``list``, and yaml only when it prints."""
    loaded = _loaded("--driver", "docker", "list", "-o", "yaml", env={"DOCKER_HOST": NOWHERE})
    assert "yaml" not in loaded  # exit 3 before anything was printed
    assert "asyncdeploy.drivers.engine._api" in loaded
