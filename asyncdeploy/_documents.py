"""Reading a plan document: YAML (and so JSON) into plain data, refusing what YAML lets slip.

``yaml.safe_load`` keeps the last of two equal keys without a word; a plan that says
``image:`` twice is a mistake, so this loader refuses it, naming the key and its line.
"""

from __future__ import annotations

from typing import Any

import yaml

from asyncdeploy.errors import PlanError
from asyncdeploy.secrets import describe

__all__ = ["load_document"]

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
                    "", f"line {line}: the key {describe(key)} appears twice in one mapping"
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
