"""The responses recorded from a real kube-apiserver v1.36 (``recordings/``), and ways to compare.

The files are copies of ``../shared/kubernetes/*.json`` (see ``recordings/README.md``), kept with
the tests so that CI needs nothing outside the repository.
"""

from __future__ import annotations

import copy
import json
import re
from functools import cache
from pathlib import Path
from typing import Any

RECORDINGS = Path(__file__).parent / "recordings"
USER_AGENT = "OpenAPI-Generator/33.3.0+snapshot/python"  # what every recorded request carried
_SA_VOLUME = re.compile(r"kube-api-access-[a-z0-9]{5}")


@cache
def recording(stem: str) -> dict[str, Any]:
    """A recording by the start of its file name, e.g. ``"01a"``."""
    [path] = sorted(RECORDINGS.glob(f"{stem}*.json"))
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def exchange(stem: str, label_start: str) -> dict[str, Any]:
    """The exchange of a recording whose label starts with ``label_start``."""
    for item in recording(stem)["exchanges"]:
        if item["label"].startswith(label_start):
            return copy.deepcopy(item)
    raise KeyError(f"{stem}: no exchange labelled {label_start!r}")


def normalised(pod: dict[str, Any]) -> dict[str, Any]:
    """A Pod with what differs between two creates blanked: ids, versions, times, random names."""
    out: dict[str, Any] = json.loads(_SA_VOLUME.sub("kube-api-access-XXXXX", json.dumps(pod)))
    metadata = out["metadata"]
    for key in ("uid", "resourceVersion", "creationTimestamp"):
        if key in metadata:
            metadata[key] = f"<{key}>"
    for entry in metadata.get("managedFields") or []:
        entry["time"] = "<time>"
        entry["fieldsV1"] = "<fields>"
    return out


def condensed(events: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """A watch as its distinct states: type, phase, deleting (grace > 0 / 0), container states.

    Status writes that change nothing the driver reads (conditions only) fold into one.
    """
    out: list[tuple[Any, ...]] = []
    for event in events:
        pod = event["object"]
        metadata, status = pod["metadata"], pod.get("status") or {}
        grace = metadata.get("deletionGracePeriodSeconds")
        deleting = None if grace is None else ("grace" if grace > 0 else 0)
        containers = []
        for entry in status.get("containerStatuses") or []:
            state = entry.get("state") or {}
            [(kind, detail)] = state.items()
            containers.append(
                (entry["name"], kind, detail.get("exitCode"), detail.get("reason"))
                if kind == "terminated"
                else (entry["name"], kind, detail.get("reason"))
            )
        row = (event["type"], status.get("phase"), deleting, tuple(containers))
        if not out or out[-1] != row:
            out.append(row)
    return out
