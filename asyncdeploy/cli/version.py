"""``asyncdeploy version``: the client's version, and the engine's or the cluster's."""

from __future__ import annotations

import platform

import attrs
import click

from asyncdeploy.cli._common import Settings, echo_out, emit_json, output_option, pass_settings, run

__all__ = ["version"]


@click.command()
@click.option("--client", "client_only", is_flag=True, help="The client's version only.")
@output_option
@pass_settings
def version(settings: Settings, client_only: bool, output: str) -> None:
    """Print the client's version and the engine's (Docker, Podman) or the cluster's.

    Exit 3 when no engine answers, after the client's version (as kubectl version).
    """
    from asyncdeploy.cli._recipes import package_version

    client = {"version": package_version(), "python": platform.python_version()}
    if output == "text":
        echo_out(f"Client: asyncdeploy {client['version']} (Python {client['python']})")

    async def engine() -> dict[str, str]:
        async with settings.open_deployer() as deployer:
            info = await deployer.engine_info()
        return attrs.asdict(info)

    data: dict[str, object] = {"client": client}
    try:
        if not client_only:
            data["engine"] = found = run(engine)
            if output == "text":
                name = found.get("engine") or found["driver"]
                api = f", API {found['api_version']}" if found.get("api_version") else ""
                echo_out(f"Engine: {name} {found['version']}{api} (driver {found['driver']})")
    finally:
        if output == "json":
            emit_json(data)  # the client's version also when no engine answers
