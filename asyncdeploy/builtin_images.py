"""The images asyncdeploy makes itself: the drain gate and the demo inference server.

They are named under ``localhost/``, a registry host that never means Docker Hub: an engine that
lacks one cannot resolve it to someone else's account. They are built on the user's engine from
the installed package (``asyncdeploy images build``), never pulled: a create whose plan names one
that the engine lacks is refused with the command that builds it (any tag, any pull policy).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from asyncdeploy.durations import parse_duration

__all__ = [
    "BUILT_IN",
    "DEMO_IMAGE",
    "GATE_IMAGE",
    "REPOSITORY",
    "BuiltIn",
    "build_command",
    "built_in",
    "demo_window",
    "missing_message",
]

BuiltIn = Literal["gate", "demo"]

REPOSITORY = "localhost/asyncdeploy"
"""Where the built-in images live: ``localhost/asyncdeploy/<kind>:<tag>``."""
DEFAULT_TAG = "latest"
BUILT_IN: tuple[BuiltIn, ...] = ("gate", "demo")
GATE_IMAGE = f"{REPOSITORY}/gate:{DEFAULT_TAG}"
"""The drain gate (``python3 -m asyncdeploy.gate``): a plan's ``gate:`` runs it by default."""
DEMO_IMAGE = f"{REPOSITORY}/demo:{DEFAULT_TAG}"
"""The demo inference server (``python3 -m asyncdeploy.workload.demo``, port 8080)."""


DEMO_WINDOW_SECONDS = 10.0
"""The demo server's propagation window on SIGTERM: it keeps serving new requests up to this
long (less once a balancer's probes show it stopped sending) so that balancers notice, then
drains. The kit's ``PropagationWindow().max_seconds`` (``tests/unit/test_builtin_images.py``
holds them equal: the kit imports nothing of the package around it)."""


def demo_window(image: str, argv: Sequence[str]) -> float | None:
    """How long the demo image holds new requests on SIGTERM, its server's command line being
    ``argv`` (the plan's command and args; empty: the image's own, with the defaults); None for
    any other image."""
    if built_in(image) != "demo":
        return None
    if "--refuse-at-once" in argv:
        return 0.0
    window = DEMO_WINDOW_SECONDS
    for i, word in enumerate(argv):  # the last one given counts, as argparse reads them
        if word == "--propagation-window" and i + 1 < len(argv):
            window = parse_duration(argv[i + 1])
        elif word.startswith("--propagation-window="):
            window = parse_duration(word.partition("=")[2])
    return window


def _split(image: str) -> tuple[str, str]:
    """``(repository, tag)`` of a reference; a digest counts as its tag."""
    named, at, digest = image.partition("@")
    repository, tag = named, DEFAULT_TAG
    if ":" in named.rsplit("/", 1)[-1]:
        repository, _, tag = named.rpartition(":")
    return repository, ("@" + digest) if at else tag


def built_in(image: str) -> BuiltIn | None:
    """Which built-in image ``image`` names (at any tag or digest), or None."""
    repository, _ = _split(image)
    for kind in BUILT_IN:
        if repository == f"{REPOSITORY}/{kind}":
            return kind
    return None


def build_command(image: str, engine: str | None = None) -> str:
    """The command that builds ``image`` (a built-in one) on the user's engine."""
    kind = built_in(image)
    _, tag = _split(image)
    driver = f"--driver {engine} " if engine else ""
    command = f"asyncdeploy {driver}images build {kind or ''}".rstrip()
    return command if tag == DEFAULT_TAG or tag.startswith("@") else f"{command} --tag {tag}"


def missing_message(image: str, engine: str) -> str:
    """Why a create stops at a built-in image the engine lacks, and the command that fixes it."""
    return (
        f"image {image!r} is not on the {engine} engine: asyncdeploy builds it, it is never "
        f"pulled; build it with: {build_command(image, engine)}"
    )
