"""``asyncdeploy images build``: the gate and demo images, built on the user's engine from the
installed package (no checkout, no registry of ours): wheels downloaded on the host by pip, the
build's steps without network."""

from __future__ import annotations

import hashlib
import os
import platform
import sys
import time
from pathlib import Path

import anyio
import click

from asyncdeploy._errors import CreateError
from asyncdeploy.builtin_images import BUILT_IN, REPOSITORY, BuiltIn
from asyncdeploy.cli._common import Settings, echo_out, pass_settings, run
from asyncdeploy.cli._debs import HAPROXY_PACKAGES
from asyncdeploy.cli._recipes import HASH_LABEL, Recipe, package_version, recipe

__all__ = ["images"]


@click.group()
def images() -> None:
    """Build the gate and demo images on your engine from the installed package."""


@images.command()
@click.argument("kinds", nargs=-1, type=click.Choice(BUILT_IN))
@click.option(
    "--base",
    envvar="ASYNCDEPLOY_IMAGE_BASE",
    default=None,
    help="The base image: Debian-like, glibc, python3 on its PATH "
    "[env ASYNCDEPLOY_IMAGE_BASE; default: docker.io/library/python:X.Y-slim-bookworm, X.Y "
    "this Python's].",
)
@click.option(
    "--python-version",
    default=None,
    metavar="X.Y",
    help="The base image's Python, for the wheels [default: this Python's].",
)
@click.option(
    "--tag",
    default="latest",
    show_default=True,
    help=f"The tag: {REPOSITORY}/<gate|demo>:<tag>.",
)
@click.option(
    "--wheels",
    "wheelhouse",
    type=click.Path(file_okay=False, exists=True),
    default=None,
    help="Take the wheels from this folder only (offline), not from the package index.",
)
@click.option(
    "--debs",
    "debs_dir",
    type=click.Path(file_okay=False, exists=True),
    default=None,
    help="Take the gate's haproxy .debs (and its libraries') from this folder, not from "
    "apt-get download (a machine without a Debian bookworm mirror).",
)
@click.option("--force", is_flag=True, help="Build even when the image is already current.")
@pass_settings
def build(
    settings: Settings,
    kinds: tuple[BuiltIn, ...],
    base: str | None,
    python_version: str | None,
    tag: str,
    wheelhouse: str | None,
    debs_dir: str | None,
    force: bool,
) -> None:
    """Build the gate and demo images (or those named) from the installed package.

    Named localhost/asyncdeploy/gate and localhost/asyncdeploy/demo: a name no registry
    resolves to someone else's account. Plans use them as they are (never pulled); a create
    that needs one the engine lacks names this command. Prints each image's name on stdout.
    """
    if settings.driver == "kubernetes":
        raise click.UsageError(
            "images are built on Docker or Podman (--driver docker|podman); load them into "
            "the cluster's nodes or push them to a registry the nodes reach"
        )
    chosen = kinds or BUILT_IN

    async def impl() -> None:
        from asyncdeploy import open_deployer

        async with open_deployer(settings.driver) as deployer:
            if deployer.driver_name == "kubernetes":
                raise click.UsageError("images are built on Docker or Podman: --driver docker")
            for kind in chosen:
                debs = await _debs(debs_dir) if kind == "gate" else ()
                made = recipe(kind, base=base, python=python_version, debs=debs)
                image = f"{REPOSITORY}/{kind}:{tag}"
                wheels = await _wheels(made, wheelhouse)
                source_hash = made.source_hash(wheels)
                labels = await deployer.image_labels(image)
                if not force and labels is not None and labels.get(HASH_LABEL) == source_hash:
                    click.echo(f"{image} is current on {deployer.driver_name}", err=True)
                    echo_out(image)
                    continue
                click.echo(
                    f"building {image} on {deployer.driver_name} from asyncdeploy "
                    f"{package_version()} (base {made.base}, Python {made.python})",
                    err=True,
                )
                began = time.monotonic()
                try:
                    await deployer.build_image(
                        made.context(wheels), image, labels={HASH_LABEL: source_hash}
                    )
                except CreateError as failure:
                    if await deployer.image_labels(made.base) is not None:
                        raise  # the base was there: the build's own lines say what failed
                    raise CreateError(base_missing(made.base, deployer.driver_name)) from failure
                click.echo(f"built {image} in {time.monotonic() - began:.1f} s", err=True)
                echo_out(image)

    run(impl)


def base_missing(base: str, engine: str) -> str:
    """One line for a build whose base image the engine neither has nor could pull (no
    registry in reach, an unknown name): what to do about it."""
    return (
        f"the base image {base} is not on {engine} and could not be pulled: load it (docker "
        "load -i FILE, see the README's offline build) or name a base image you have with "
        "--base IMAGE or ASYNCDEPLOY_IMAGE_BASE"
    )


def _cache_dir() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(root) / "asyncdeploy" / "wheels"


async def _debs(debs_dir: str | None) -> tuple[Path, ...]:
    """The gate's haproxy ``.deb`` files: from ``debs_dir``, or ``apt-get download`` (cached)."""
    if debs_dir is not None:
        found = await anyio.to_thread.run_sync(lambda: tuple(sorted(Path(debs_dir).glob("*.deb"))))
        if not any(p.name.startswith("haproxy_") for p in found):
            raise click.UsageError(f"--debs {debs_dir}: no haproxy_*.deb there")
        return found
    where = _cache_dir().parent / "debs" / platform.machine()
    if not (where / ".complete").exists():
        where.mkdir(parents=True, exist_ok=True)
        try:
            done = await anyio.run_process(
                ["apt-get", "download", *HAPROXY_PACKAGES], cwd=where, check=False
            )
        except FileNotFoundError:
            raise click.UsageError(
                "the gate image needs Debian bookworm's haproxy: this machine has no apt-get; "
                "copy haproxy's .debs (and its libraries') into a folder and pass --debs DIR"
            ) from None
        if done.returncode != 0:
            reason = done.stderr.decode(errors="replace").strip().splitlines()[-3:]
            raise CreateError(
                "apt-get download of haproxy failed (a Debian bookworm mirror is needed; "
                "or --debs DIR): " + "\n".join(reason)
            )
        (where / ".complete").touch()
    return tuple(sorted(where.glob("*.deb")))


async def _wheels(made: Recipe, wheelhouse: str | None) -> list[Path]:
    """The wheels ``made`` needs for its Python and this machine's architecture: pip downloads
    them on the host (cached), from ``wheelhouse`` alone when given."""
    arch = platform.machine()
    key = "\n".join([made.python, arch, wheelhouse or "", *made.requirements])
    where = _cache_dir() / hashlib.sha256(key.encode()).hexdigest()[:16]
    if not (where / ".complete").exists():
        where.mkdir(parents=True, exist_ok=True)
        for stale in where.glob("*.whl"):
            stale.unlink()
        source = ["--no-index", "--find-links", wheelhouse] if wheelhouse else []
        command = [
            sys.executable,
            *("-m", "pip", "download", "--quiet", "--disable-pip-version-check"),
            *("--only-binary=:all:", "--python-version", made.python),
            *("--platform", f"manylinux_2_36_{arch}", "--platform", f"manylinux2014_{arch}"),
            *("--platform", "any", "-d", str(where), *source, *made.requirements),
        ]
        done = await anyio.run_process(command, check=False)
        if done.returncode != 0:
            reason = done.stderr.decode(errors="replace").strip().splitlines()[-5:]
            raise CreateError(
                f"downloading the wheels of the {made.kind} image failed (pip, for Python "
                f"{made.python} on {arch}): " + "\n".join(reason)
            )
        (where / ".complete").touch()
    return sorted(where.glob("*.whl"))
