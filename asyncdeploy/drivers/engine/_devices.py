"""Pure translation of a container's accelerators into Engine API create fields.

- Docker: NVIDIA counts and pinned NVIDIA devices become ``DeviceRequests`` for the ``nvidia``
  driver (the NVIDIA container toolkit's runtime hook, any Docker since 19.03); every other CDI
  name goes through the ``cdi`` driver, which Docker has only from 25 (API 1.44). Other extended
  resources (``amd.com/gpu: 1``) are refused: Docker can count only NVIDIA GPUs.
- Podman: CDI names as ``Devices`` (Podman's own ``--device vendor/class=name``); counts are
  refused, because Podman cannot count devices and mapping N to ``=all`` would hand out more
  than the plan asks for. Podman 4.3's Docker-compatible create refuses CDI names, so the
  Podman driver creates such containers through the libpod endpoint (``_libpod.py``).

Every refusal is a :class:`~asyncdeploy._errors.CreateError` naming the container and the
resource, raised before anything is created.
"""

from __future__ import annotations

from typing import Any

from asyncdeploy._errors import CreateError
from asyncdeploy.plan import Container
from asyncdeploy.plan._fields import cdi_kind

__all__ = [
    "CDI_MIN_DOCKER_API",
    "NVIDIA_GPU",
    "accelerators",
    "device_host_config",
]

NVIDIA_GPU = "nvidia.com/gpu"
CDI_MIN_DOCKER_API = (1, 44)  # Docker 25: DeviceRequests with the "cdi" driver
_GPU_CAPABILITIES = [["gpu"]]


def accelerators(container: Container) -> str:
    """What the container asks for, for messages: ``nvidia.com/gpu: 1, devices vendor/c=n``."""
    parts = [f"{kind}: {count}" for kind, count in container.resources.extended.items() if count]
    if container.resources.devices:
        parts.append("devices " + ", ".join(container.resources.devices))
    return ", ".join(parts)


def device_host_config(
    container: Container, *, engine: str, api_version: str, where: str
) -> dict[str, Any]:
    """The ``HostConfig`` fields that give ``container`` its devices on ``engine``."""
    if not container.resources.accelerated:
        return {}
    if engine == "podman":
        return _podman(container, where)
    return _docker(container, api_version, where)


def _docker(container: Container, api_version: str, where: str) -> dict[str, Any]:
    device_requests: list[dict[str, Any]] = []
    for kind, count in container.resources.extended.items():
        if count == 0:
            continue
        if kind != NVIDIA_GPU:
            raise CreateError(
                f"{where} asks for {kind}: {count}, but Docker can count only NVIDIA GPUs "
                f"({NVIDIA_GPU}); pin this vendor's devices by CDI name in resources.devices "
                "(Docker 25 or later, with the vendor's CDI specification installed)"
            )
        device_requests.append(
            {"Driver": "nvidia", "Count": count, "Capabilities": _GPU_CAPABILITIES}
        )
    nvidia = [d.partition("=")[2] for d in container.resources.devices if cdi_kind(d) == NVIDIA_GPU]
    if "all" in nvidia:
        device_requests.append({"Driver": "nvidia", "Count": -1, "Capabilities": _GPU_CAPABILITIES})
    elif nvidia:
        device_requests.append(
            {"Driver": "nvidia", "DeviceIDs": nvidia, "Capabilities": _GPU_CAPABILITIES}
        )
    others = [d for d in container.resources.devices if cdi_kind(d) != NVIDIA_GPU]
    if others:
        if _api_tuple(api_version) < CDI_MIN_DOCKER_API:
            raise CreateError(
                f"{where} asks for CDI device {others[0]}, but this Docker engine speaks API "
                f"{api_version or 'unknown'}: CDI devices need Docker 25 or later (API "
                f"{'.'.join(map(str, CDI_MIN_DOCKER_API))}) with the CDI feature enabled"
            )
        device_requests.append({"Driver": "cdi", "DeviceIDs": others})
    return {"DeviceRequests": device_requests}


def _podman(container: Container, where: str) -> dict[str, Any]:
    for kind, count in container.resources.extended.items():
        if count:
            raise CreateError(
                f"{where} asks for {kind}: {count}, but Podman cannot count devices: pin them by "
                f"CDI name in resources.devices instead (e.g. {kind}=0, or {kind}=all for every "
                "one), with the vendor's CDI specification under /etc/cdi"
            )
    return {
        "Devices": [
            {"PathOnHost": name, "PathInContainer": "", "CgroupPermissions": ""}
            for name in container.resources.devices
        ]
    }


def _api_tuple(version: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in version.split("."))
    except ValueError:
        return ()
