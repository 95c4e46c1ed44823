"""Reading a plan document: YAML (and so JSON) into plain data, refusing what YAML lets slip.

``yaml.safe_load`` keeps the last of two equal keys without a word; a plan that says
``image:`` twice is a mistake, so this loader refuses it, naming the key and its line. A file is
read up to :data:`MAX_DOCUMENT_BYTES`, so ``-f /dev/zero`` is an error, not a machine out of memory.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, BinaryIO

import yaml

from asyncdeploy._errors import PlanError
from asyncdeploy.masking import masked_repr

__all__ = [
    "MAX_DOCUMENT_BYTES",
    "load_document",
    "load_documents",
    "read_bytes",
    "read_document",
]

MAX_DOCUMENT_BYTES = 1 << 20  # a plan is a few kilobytes; a megabyte is not a plan

_MERGE = "tag:yaml.org,2002:merge"


class _StrictLoader(yaml.SafeLoader):
    """``SafeLoader`` that refuses a key repeated in one mapping (``<<`` merges may override)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == _MERGE:
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                repeated = key in seen
                seen.add(key)
            except TypeError:
                continue  # an unhashable key: SafeLoader refuses it with its own message
            if repeated:
                line = key_node.start_mark.line + 1
                raise PlanError(
                    "", f"the key {masked_repr(key)} appears twice in one mapping", line=line
                )
        return super().construct_mapping(node, deep=deep)


def _yaml_problem(exc: yaml.YAMLError, source: str) -> PlanError:
    """A YAML syntax error in words, at its line in ``source``."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    context = getattr(exc, "context", None)
    words = f"{context}: {problem}" if context and problem else problem
    line = mark.line + 1 if mark is not None else None
    return PlanError("", f"not valid YAML or JSON: {words}", source=source, line=line)


def load_document(text: str, source: str) -> Any:
    """The plain data in ``text`` (YAML or JSON); ``PlanError`` naming ``source`` if unreadable."""
    try:
        return yaml.load(text, Loader=_StrictLoader)
    except PlanError as exc:  # a repeated key
        raise exc.at(source, exc.line) from None
    except yaml.YAMLError as exc:
        raise _yaml_problem(exc, source) from None
    except RecursionError:
        raise PlanError("", f"plan file {source!r} is nested too deeply") from None


def load_documents(text: str, source: str) -> list[tuple[Any, yaml.Node | None]]:
    """Every document in ``text`` (``---`` separates them): its plain data and its node tree
    (where each value stands: lines for errors). ``PlanError`` at the line of a syntax error."""
    documents: list[tuple[Any, yaml.Node | None]] = []
    loader: _StrictLoader | None = None
    try:
        loader = _StrictLoader(text)  # a character YAML refuses is refused here
        while loader.check_node():
            node = loader.get_node()
            documents.append((loader.construct_document(node), node))
    except PlanError as exc:  # a repeated key: its line is in its message
        raise exc.at(source, exc.line) from None
    except yaml.YAMLError as exc:
        raise _yaml_problem(exc, source) from None
    except RecursionError:
        raise PlanError("", "the plan is nested too deeply", source=source) from None
    finally:
        if loader is not None:
            loader.dispose()
    return documents


def read_bytes(path: str | Path, file: BinaryIO | None = None) -> str:
    """The text of a plan file (``file``: an open one, such as stdin, named ``path``), bounded;
    ``PlanError`` if it cannot be read."""
    try:
        if file is not None:
            raw = file.read(MAX_DOCUMENT_BYTES + 1)
        else:
            with Path(path).open("rb") as opened:
                raw = opened.read(MAX_DOCUMENT_BYTES + 1)
    except OSError as exc:
        raise PlanError("", f"cannot read plan file {str(path)!r}: {exc.strerror}") from None
    if len(raw) > MAX_DOCUMENT_BYTES:
        raise PlanError("", f"plan file {str(path)!r} is larger than {MAX_DOCUMENT_BYTES} bytes")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PlanError("", f"plan file {str(path)!r} is not UTF-8 text: {exc}") from None


def read_document(path: str | Path) -> Any:
    """The plain data in the plan file at ``path``; ``PlanError`` if it cannot be read."""
    return load_document(read_bytes(path), str(path))
