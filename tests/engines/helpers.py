"""Plans and markers for the real-engine tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from asyncdeploy import Container, Mount, WorkloadPlan
from tests.engines.conftest import BUSYBOX, PAUSE, RUN_ID, RUN_LABEL
from tests.polling import until


def graceful(
    name: str, drain: float, markers: Path, *, ignore: bool = False, **kw: Any
) -> Container:
    """A run container that appends start / got-TERM / drained-ok markers and drains ``drain`` s."""
    command = ["graceful", name, str(drain)] + (["ignore"] if ignore else [])
    return Container(
        name=name,
        image=BUSYBOX,
        command=command,
        env={"MARKER_FILE": "/out/markers"},
        mounts=[Mount(source=str(markers), target="/out")],
        **kw,
    )


def plan(
    name: str,
    containers: list[Container],
    extra_labels: dict[str, str] | None = None,
    **kw: Any,
) -> WorkloadPlan:
    return WorkloadPlan(
        name=name,
        labels={RUN_LABEL: RUN_ID, **(extra_labels or {})},
        pause_image=PAUSE,
        containers=containers,
        **kw,
    )


def plan_file(directory: Path, name: str, containers: list[dict[str, Any]], **fields: Any) -> Path:
    """A plan file as a user writes it (YAML), labelled with the run's id like :func:`plan`."""
    document = {
        "name": name,
        "labels": {RUN_LABEL: RUN_ID},
        "pause_image": PAUSE,
        "containers": containers,
        **fields,
    }
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def read_markers(markers: Path) -> list[tuple[str, str]]:
    path = markers / "markers"
    if not path.exists():
        return []
    return [tuple(line.split()[:2]) for line in path.read_text().splitlines() if line.strip()]  # type: ignore[misc]


async def started(markers: Path, *names: str, times: int = 1, timeout: float = 20) -> None:
    """Wait until each named graceful container has written its start marker (``times`` times:
    runs that share a marker file): "running" (or a returned create) does not mean the script
    inside has got that far. It marks start once its TERM trap is set, so a drain from here on
    meets the trap."""

    def all_started() -> bool:
        marks = read_markers(markers)
        return all(marks.count((name, "start")) >= times for name in names)

    await until(all_started, timeout=timeout, interval=0.05)
