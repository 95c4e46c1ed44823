"""``asyncdeploy completion SHELL``: the shell completion script, as ``kubectl completion``
prints it (click's ``_ASYNCDEPLOY_COMPLETE=bash_source`` variable gives the same script)."""

from __future__ import annotations

import click
from click.shell_completion import get_completion_class

__all__ = ["SHELLS", "completion"]

SHELLS = ("bash", "zsh", "fish")
COMPLETE_VAR = "_ASYNCDEPLOY_COMPLETE"  # click's variable for the program name asyncdeploy


@click.command()
@click.argument("shell", type=click.Choice(SHELLS))
def completion(shell: str) -> None:
    """Print the shell completion script for bash, zsh or fish.

    Load it in the running shell with eval "$(asyncdeploy completion bash)"; to keep it, add
    that line to ~/.bashrc (~/.zshrc; for fish: asyncdeploy completion fish >
    ~/.config/fish/completions/asyncdeploy.fish).
    """
    from asyncdeploy.cli import main

    shell_class = get_completion_class(shell)
    if shell_class is None:  # pragma: no cover - click knows the three
        raise click.UsageError(f"no completion for {shell}")
    click.echo(shell_class(main, {}, "asyncdeploy", COMPLETE_VAR).source(), nl=False)
