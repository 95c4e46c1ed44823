"""The CLI's start (issue 18 item 3): ``--help`` imports no command, no deployer, no driver and
no engine client; a command imports what it uses; the lazy group's table says what each command
says of itself."""

from __future__ import annotations

import json
import subprocess
import sys

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
HEAVY = (
    "asyncdeploy.deployer",
    "asyncdeploy.drivers.base",
    "asyncdeploy.plan",
    "asyncdeploy.events",
    "asyncdeploy.cli._common",
    "aiohttp",
    "aiodocker",
    "kubernetes_asyncio",
    "yaml",
)


def _loaded(*args: str) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args], capture_output=True, text=True, check=True
    )
    return set(json.loads(done.stdout.splitlines()[-1]))


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
