"""``asyncdeploy schema``: the plan's JSON Schema, or its reference page."""

from __future__ import annotations

import click

__all__ = ["schema"]


@click.command("schema")
@click.option(
    "--format",
    "format_",
    type=click.Choice(["json", "markdown"]),
    default="json",
    show_default=True,
    help="The JSON Schema of a plan, or the plan reference page.",
)
def schema(format_: str) -> None:
    """Print the plan's JSON Schema (for editors) or its reference page."""
    from asyncdeploy.plan.schema import plan_reference_markdown, plan_schema_json

    click.echo(plan_schema_json() if format_ == "json" else plan_reference_markdown(), nl=False)
