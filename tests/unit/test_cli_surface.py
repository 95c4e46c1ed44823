"""The CLI's kubectl-style surface without an engine: completion, tables, --since, usage errors."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from asyncdeploy.cli import main
from asyncdeploy.cli.containers import since_to_unix_time
from asyncdeploy.cli.views import render_table


def test_bash_completion_completes_commands_and_options() -> None:
    """The README's eval line works: click's completion, under the program's own name."""
    runner = CliRunner()
    script = runner.invoke(
        main, [], prog_name="asyncdeploy", env={"_ASYNCDEPLOY_COMPLETE": "bash_source"}
    )
    assert script.exit_code == 0 and "_asyncdeploy_completion" in script.stdout
    env = {
        "_ASYNCDEPLOY_COMPLETE": "bash_complete",
        "COMP_WORDS": "asyncdeploy re",
        "COMP_CWORD": "1",
    }
    done = runner.invoke(main, [], prog_name="asyncdeploy", env=env)
    assert "plain,replace" in done.stdout.splitlines()
    env = {**env, "COMP_WORDS": "asyncdeploy logs x --ta", "COMP_CWORD": "3"}
    done = runner.invoke(main, [], prog_name="asyncdeploy", env=env)
    assert "plain,--tail" in done.stdout.splitlines()


def test_table_columns_follow_the_longest_value() -> None:
    rows = [["a" * 40, "running", "1/1"], ["b", "exited", "0/1"]]
    lines = render_table(["NAME", "STATE", "READY"], rows)
    at = lines[0].index("STATE")
    assert all(line[at - 1] == " " and line[at] != " " for line in lines)
    assert [line[at:].split()[0] for line in lines] == ["STATE", "running", "exited"]


def test_since_takes_a_duration_or_an_rfc3339_time() -> None:
    assert since_to_unix_time("5m", now=1000.0) == 700.0
    assert since_to_unix_time("1970-01-01T00:10:00Z") == 600.0
    assert since_to_unix_time("1970-01-01T00:10:00") == 600.0  # no zone: UTC, as kubectl
    with pytest.raises(click.BadParameter, match="neither a duration"):
        since_to_unix_time("yesterday")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["exec", "w"], "Missing argument 'COMMAND...'"),
        (["logs", "w", "--since", "soon"], "neither a duration"),
        (["create", "-f", "x.yaml", "--wait", "--timeout", "forever"], "invalid duration"),
        (["--driver", "podman", "--context", "prod", "list"], "Kubernetes options"),
    ],
)
def test_usage_errors_exit_2_before_any_engine_call(args: list[str], message: str) -> None:
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2 and message in result.stderr, result.stderr
