"""Reading a plan document: YAML (and so JSON) into plain data, refusing what YAML lets slip.

``yaml.safe_load`` keeps the last of two equal keys without a word; a plan that says
``image:`` twice is a mistake, so this loader refuses it, naming the key and its line. A file is
read up to :data:`MAX_DOCUMENT_BYTES`, so ``-f /dev/zero`` is an error, not a machine out of memory.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from asyncdeploy.errors import PlanError
from asyncdeploy.masking import masked_repr

__all__ = ["MAX_DOCUMENT_BYTES", "load_document", "read_document"]

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
                    "", f"line {line}: the key {masked_repr(key)} appears twice in one mapping"
                )
        return super().construct_mapping(node, deep=deep)


def load_document(text: str, source: str) -> Any:
    """The plain data in ``text`` (YAML or JSON); ``PlanError`` naming ``source`` if unreadable."""
    try:
        return yaml.load(text, Loader=_StrictLoader)
    except yaml.YAMLError as exc:
        raise PlanError("", f"plan file {source!r} is not valid YAML or JSON: {exc}") from None
    except RecursionError:
        raise PlanError("", f"plan file {source!r} is nested too deeply") from None


def read_document(path: str | Path) -> Any:
    """The plain data in the plan file at ``path``; ``PlanError`` if it cannot be read."""
    try:
        with Path(path).open("rb") as file:
            raw = file.read(MAX_DOCUMENT_BYTES + 1)
    except OSError as exc:
        raise PlanError("", f"cannot read plan file {str(path)!r}: {exc.strerror}") from None
    if len(raw) > MAX_DOCUMENT_BYTES:
        raise PlanError("", f"plan file {str(path)!r} is larger than {MAX_DOCUMENT_BYTES} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PlanError("", f"plan file {str(path)!r} is not UTF-8 text: {exc}") from None
    return load_document(text, str(path))
