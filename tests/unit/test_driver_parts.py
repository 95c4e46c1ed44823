"""The driver seam, cut by concern (``drivers/base.py``): ``Driver`` is exactly its five parts,
no method in two; every driver (Docker and Podman's, Kubernetes', the in-memory fake) has every
part, written or mixed in from ``drivers/parts.py``; the fake writes the drain primitive and
its looks, and takes the rest from the parts."""

from __future__ import annotations

import inspect

import pytest

from asyncdeploy.drivers import base, parts
from asyncdeploy.drivers.engine import DockerDriver, PodmanDriver
from asyncdeploy.drivers.kubernetes import KubernetesDriver
from asyncdeploy.testing import FakeDriver

PARTS = (base.Drains, base.Lifecycle, base.Looks, base.Images, base.Markers)


def members(protocol: type) -> set[str]:
    return {
        name
        for name in vars(protocol)
        if not name.startswith("_") and (callable(vars(protocol)[name]) or name == "name")
    } | set(getattr(protocol, "__annotations__", {}))


def test_the_driver_is_its_five_parts_and_no_method_is_in_two() -> None:
    seen: dict[str, str] = {}
    for part in PARTS:
        for name in members(part):
            assert name not in seen, f"{name} is in {seen.get(name)} and {part.__name__}"
            seen[name] = part.__name__
    assert base.Driver.__mro__[1:6] == PARTS
    assert not members(base.Driver) - set(seen)  # the whole adds nothing of its own
    assert len(seen) == 24  # name + the 21 methods before the cut + the two retiring a lock


@pytest.mark.parametrize("driver", [DockerDriver, PodmanDriver, KubernetesDriver, FakeDriver])
def test_every_driver_has_every_part(driver: type) -> None:
    for part in PARTS:
        missing = [name for name in members(part) if not hasattr(driver, name)]
        assert missing == [], f"{driver.__name__} lacks {part.__name__}: {missing}"


def test_the_fake_writes_the_drain_and_its_looks_and_mixes_in_the_rest() -> None:
    """What the fake itself defines: the drain primitive, its looks, ``make`` and the life of a
    connection; ``apply``, the ready wait, images and markers come from the parts."""
    written = {
        name
        for name, value in vars(FakeDriver).items()
        if inspect.isfunction(value) or isinstance(value, classmethod)
    }
    for part in (base.Drains, base.Looks):
        assert members(part) - {"name"} <= written
    mixed = {"apply", "wait_ready", "image_labels", "image_ports", "build_image"}
    mixed |= members(base.Markers)
    assert not written & mixed
    assert issubclass(FakeDriver, parts.DrainThenMake)
    assert issubclass(KubernetesDriver, parts.NoImages)
