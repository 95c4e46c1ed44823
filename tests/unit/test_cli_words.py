"""Words a kubectl or docker user types (issue 32 item 5): kubectl's ``apply`` and
``describe`` run the command that does exactly that, docker's ``ps`` and ``rm`` are answered
with the command that does it and how it differs, a typo with the nearest command, and
``completion SHELL`` prints the script click's variable gives."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from asyncdeploy.cli import ALIASES, COMMANDS, SUGGESTIONS, main
from tests.cli_runner import invoke


@pytest.mark.parametrize(("alias", "command"), sorted(ALIASES.items()))
def test_an_alias_is_its_command(alias: str, command: str) -> None:
    assert command in COMMANDS
    mine, theirs = invoke(alias, "--help"), invoke(command, "--help")
    assert mine.exit_code == theirs.exit_code == 0
    assert mine.output.replace(f"main {alias} ", f"main {command} ", 1) == theirs.output


def test_apply_creates_from_a_plan_as_create_does() -> None:
    """``apply -f`` reads the plan as ``create -f`` does (here a bad one: exit 2, its line)."""
    result = CliRunner().invoke(main, ["apply", "-f", "-"], input="name: Bad_Name\n")
    assert result.exit_code == 2, result.output
    assert "No such command" not in result.output and "<stdin>" in result.output


@pytest.mark.parametrize(("word", "command"), [("ps", "list"), ("rm", "delete")])
def test_a_docker_word_names_the_command(word: str, command: str) -> None:
    result = invoke(word, "demo")
    assert result.exit_code == 2
    line = result.output.strip().splitlines()[-1]
    assert line.startswith(f"Error: No such command '{word}'. Did you mean '{command}'? (")
    assert SUGGESTIONS[word][0] == command


def test_a_typo_names_the_nearest_command() -> None:
    result = invoke("delet", "demo")
    assert result.exit_code == 2
    assert "Error: No such command 'delet'. Did you mean 'delete'?" in result.output
    far = invoke("xyzzy")
    assert far.exit_code == 2 and "No such command 'xyzzy'." in far.output
    assert "Did you mean" not in far.output


def test_the_help_lists_the_aliases() -> None:
    result = invoke("--help")
    assert result.exit_code == 0
    aliases = result.output.split("Aliases:")[1]
    assert "apply" in aliases and "= create" in aliases and "describe" in aliases


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_prints_what_the_variable_prints(shell: str) -> None:
    result = invoke("completion", shell)
    assert result.exit_code == 0, result.output
    variable = CliRunner(env={"_ASYNCDEPLOY_COMPLETE": f"{shell}_source"}).invoke(
        main, [], prog_name="asyncdeploy"
    )
    assert variable.exit_code == 0
    assert result.output == variable.output
    assert "_ASYNCDEPLOY_COMPLETE" in result.output


def test_completion_of_an_unknown_shell_is_a_usage_error() -> None:
    result = invoke("completion", "powershell")
    assert result.exit_code == 2 and "'powershell' is not one of" in result.output
