"""Plan files read the way kubectl reads ``-f``: files, ``-`` for stdin, folders (their
``.yaml``, ``.yml`` and ``.json`` files, sorted, not recursive), several documents per file
(``---``), the options repeated. Every problem of every plan is found before one is raised, each
located at its file and line (a ``PlanError`` holding them all in ``problems``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, BinaryIO

import yaml

from asyncdeploy._errors import PlanError
from asyncdeploy.plan._documents import load_documents, read_bytes
from asyncdeploy.plan._model import WorkloadPlan

__all__ = ["PLAN_SUFFIXES", "line_of", "read_plans"]

PLAN_SUFFIXES = (".yaml", ".yml", ".json")
STDIN = "-"
_STEP = re.compile(r"\.?([^.\[\]]+)|\[(\d+)\]|\[(\"(?:[^\"\\]|\\.)*\"|'[^']*')\]")


def _steps(path: str) -> list[str | int]:
    """A field path (``containers[0].resources["nvidia.com/gpu"]``) as keys and indexes."""
    steps: list[str | int] = []
    for match in _STEP.finditer(path):
        key, index, quoted = match.groups()
        if index is not None:
            steps.append(int(index))
        elif quoted is not None:
            steps.append(quoted[1:-1])
        else:
            steps.append(key)
    return steps


def line_of(node: yaml.Node | None, path: str) -> int | None:
    """The line of the field ``path`` names in a document's node tree; where the path leaves the
    tree (a required field not written), the line of the last mapping or list it reached."""
    if node is None:
        return None
    line = node.start_mark.line + 1
    for step in _steps(path):
        if isinstance(node, yaml.MappingNode) and isinstance(step, str):
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode) and key.value == step:
                    line, node = key.start_mark.line + 1, value
                    break
            else:
                return line
        elif isinstance(node, yaml.SequenceNode) and isinstance(step, int):
            if step >= len(node.value):
                return line
            node = node.value[step]
            line = node.start_mark.line + 1
        else:
            return line
    return line


def _files(source: str) -> list[str]:
    """The files a ``-f`` value names: itself, or a folder's plan files."""
    if source == STDIN:
        return [source]
    path = Path(source)
    if path.is_dir():
        found = sorted(str(p) for p in path.iterdir() if p.suffix in PLAN_SUFFIXES and p.is_file())
        if not found:
            raise PlanError(
                "", "the folder holds no .yaml, .yml or .json file", source=source.rstrip("/")
            )
        return found
    return [source]


def _what(data: Any) -> str:
    if isinstance(data, list):
        return "a list"
    if isinstance(data, str):
        return "a string"
    if isinstance(data, bool):
        return "a boolean"
    if isinstance(data, int | float):
        return "a number"
    return type(data).__name__


def read_plans(
    sources: Sequence[str | Path], *, stdin: BinaryIO | None = None
) -> list[WorkloadPlan]:
    """Every plan in ``sources`` (files, folders, ``-`` for ``stdin``), in order.

    ``PlanError`` lists every problem found, each at its file and line: a file that cannot be
    read, YAML that does not parse, an empty file, a document that is not a mapping, each
    invalid or unknown field (with the field it was probably meant to be), two plans of one
    name."""
    problems: list[PlanError] = []
    plans: list[tuple[WorkloadPlan, str, int | None]] = []
    for source in map(str, sources):
        try:
            files = _files(source)
        except PlanError as exc:
            problems.append(exc)
            continue
        for name in files:
            shown = "<stdin>" if name == STDIN else name
            try:
                text = read_bytes(shown, stdin if name == STDIN else None)
                documents = load_documents(text, shown)
            except PlanError as exc:
                problems.append(exc if exc.source else exc.at(shown, exc.line))
                continue
            written = [(data, node) for data, node in documents if data is not None]
            if not written:
                problems.append(
                    PlanError(
                        "",
                        "the file is empty: a plan is a mapping with a name and containers",
                        source=shown,
                    )
                )
            for data, node in written:
                if not isinstance(data, dict):
                    problems.append(
                        PlanError(
                            "",
                            f"a plan is a mapping (name:, containers:, ...), but this document "
                            f"is {_what(data)}",
                            source=shown,
                            line=line_of(node, ""),
                        )
                    )
                    continue
                try:
                    plan = WorkloadPlan.from_mapping(data)
                except PlanError as exc:
                    problems.extend(p.at(shown, line_of(node, p.path)) for p in exc.problems)
                    continue
                plans.append((plan, shown, line_of(node, "name")))
    seen: dict[str, str] = {}
    for plan, shown, line in plans:
        where = f"{shown}:{line}" if line is not None else shown
        if plan.name in seen:
            problems.append(
                PlanError(
                    "name",
                    f"{plan.name!r} is the name of another plan too ({seen[plan.name]})",
                    source=shown,
                    line=line,
                )
            )
        seen.setdefault(plan.name, where)
    if problems:
        raise PlanError.of(problems)
    return [plan for plan, _, _ in plans]
