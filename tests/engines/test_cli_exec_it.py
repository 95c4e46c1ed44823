"""``exec -it`` and ``exec -i``, as docker and kubectl have them, on real Docker and Podman: a
shell in a terminal (a pty read back through pyte), stdin to a command's end of file."""

from __future__ import annotations

import os
import subprocess
import sys

import anyio
import pytest

from asyncdeploy import Container, Deployer
from tests.engines.conftest import BUSYBOX, RUN_ID
from tests.engines.helpers import plan
from tests.engines.pty_screen import run_in_pty, screen_of

pytestmark = pytest.mark.anyio


async def _sleeper(deployer: Deployer, short: str) -> str:
    name = f"t{RUN_ID}-{short}-{deployer.driver_name}"
    sleeper = Container(name="app", image=BUSYBOX, command=["sleep", "600"])
    await deployer.create(plan(name, [sleeper], termination_grace_period_seconds=1))
    return name


async def test_exec_it_is_a_shell_in_a_terminal(deployer: Deployer) -> None:
    """``exec -it NAME -- sh`` in an 80x24 terminal: the prompt comes, typed keys reach the
    shell (which sees a terminal of that size), its exit code is the command's."""
    name = await _sleeper(deployer, "it")
    args = ["--driver", deployer.driver_name, "exec", "-it", name, "--", "sh"]
    code, output = await anyio.to_thread.run_sync(
        lambda: run_in_pty(
            args,
            columns=80,
            lines=24,
            env={
                **{k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")},
                "TERM": "xterm",
            },
            timeout=60,
            keys=[(b"# ", b"echo $((6*7)); tty; stty size; exit 3\r")],
        )
    )
    shown = "\n".join(screen_of(output, columns=80, lines=24))
    assert code == 3, shown
    assert "42" in shown.split("exit 3", 1)[1], shown  # the answer, not the typed line
    assert "/dev/pts/" in shown and "24 80" in shown, shown


async def test_exec_i_passes_stdin_to_its_end(deployer: Deployer) -> None:
    name = await _sleeper(deployer, "i")
    args = ["--driver", deployer.driver_name, "exec", "-i", name, "--", "sh", "-c"]
    done = await anyio.to_thread.run_sync(
        lambda: subprocess.run(
            [sys.executable, "-m", "asyncdeploy", *args, "wc -l; exit 5"],
            input=b"one\ntwo\nthree\n",
            capture_output=True,
            timeout=60,
            check=False,
        )
    )
    assert done.returncode == 5, done.stderr
    assert done.stdout.split() == [b"3"]
