"""Pure translation of a Docker-compatible create body into Podman's libpod ``SpecGenerator``.

Only containers with CDI devices take this path: Podman 4.3's compatible create refuses a CDI
name in ``HostConfig.Devices`` ("stat ...: no such file") and ignores a ``DeviceRequests`` entry
for the ``cdi`` driver, while its libpod create injects the device. The translation covers
exactly the fields ``_spec.container_config`` writes and refuses any other, so that a field added
there cannot be dropped here unnoticed.
"""

from __future__ import annotations

import signal
from typing import Any

__all__ = ["libpod_spec"]

CPU_PERIOD_US = 100_000
_KNOWN = {"Image", "Labels", "Env", "StopSignal", "StopTimeout", "HostConfig"}
_KNOWN |= {"Entrypoint", "Cmd", "Healthcheck"}
_KNOWN_HOST = {"NetworkMode", "IpcMode", "PidMode", "RestartPolicy", "Mounts", "NanoCpus"}
_KNOWN_HOST |= {"Memory", "Devices"}


def libpod_spec(config: dict[str, Any], name: str) -> dict[str, Any]:
    """The libpod create body for ``config`` (what ``container_config`` returns)."""
    host = config.get("HostConfig") or {}
    unknown = sorted((set(config) - _KNOWN) | (set(host) - _KNOWN_HOST))
    if unknown:
        raise ValueError(f"no libpod translation for create field(s) {', '.join(unknown)}")
    out: dict[str, Any] = {
        "name": name,
        "image": config["Image"],
        "labels": dict(config.get("Labels") or {}),
        "env": dict(entry.partition("=")[::2] for entry in config.get("Env") or []),
        "restart_policy": (host.get("RestartPolicy") or {}).get("Name", "no"),
        "devices": [{"path": d["PathOnHost"]} for d in host.get("Devices") or []],
    }
    if "StopSignal" in config:
        out["stop_signal"] = _signal_number(config["StopSignal"])
    if "StopTimeout" in config:
        out["stop_timeout"] = config["StopTimeout"]
    if "Entrypoint" in config:
        out["entrypoint"] = config["Entrypoint"]
    if "Cmd" in config:
        out["command"] = config["Cmd"]
    if "Healthcheck" in config:
        out["healthconfig"] = config["Healthcheck"]  # libpod takes Docker's HealthConfig as is
    for mode, key in (("NetworkMode", "netns"), ("IpcMode", "ipcns"), ("PidMode", "pidns")):
        if mode in host:
            out[key] = _namespace(host[mode])
    limits: dict[str, Any] = {}
    if "NanoCpus" in host:
        quota = host["NanoCpus"] * CPU_PERIOD_US // 1_000_000_000
        limits["cpu"] = {"quota": quota, "period": CPU_PERIOD_US}
    if "Memory" in host:
        limits["memory"] = {"limit": host["Memory"]}
    if limits:
        out["resource_limits"] = limits
    mounts, volumes = _mounts(host.get("Mounts") or [])
    out["mounts"], out["volumes"] = mounts, volumes
    return out


def _namespace(mode: str) -> dict[str, str]:
    kind, _, value = mode.partition(":")
    if kind != "container":
        raise ValueError(f"no libpod translation for namespace mode {mode!r}")
    return {"nsmode": "container", "value": value}


def _signal_number(name: str) -> int:
    if name.isdigit():
        return int(name)
    upper = name.upper()
    try:
        return int(signal.Signals[upper if upper.startswith("SIG") else f"SIG{upper}"])
    except KeyError:
        raise ValueError(f"no libpod translation for stop signal {name!r}") from None


def _mounts(specs: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    mounts, volumes = [], []
    for spec in specs:
        read_only = ["ro"] if spec.get("ReadOnly") else []
        if spec["Type"] == "volume":
            volumes.append({"Name": spec["Source"], "Dest": spec["Target"], "Options": read_only})
        elif spec["Type"] == "tmpfs":
            mounts.append(
                {"destination": spec["Target"], "type": "tmpfs", "source": "tmpfs", "options": []}
            )
        else:
            mounts.append(
                {
                    "destination": spec["Target"],
                    "type": "bind",
                    "source": spec["Source"],
                    "options": ["rbind", *read_only],
                }
            )
    return mounts, volumes
