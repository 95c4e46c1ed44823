"""The plan's JSON Schema and reference page, both generated from the attrs model.

The types, defaults, enumerations and nesting come from :mod:`asyncdeploy.plan`; the words, and
the schema of a field whose converter takes more than its stored type says, from each field's
metadata (``_fields.about``) and each plan type's ``summary``. ``asyncdeploy schema`` prints either; ``docs/plan.schema.json`` and
``docs/plan-reference.md`` are their committed copies, checked against these functions by a test.
The schema is for editors and quick feedback: the plan's own validation stays the authority (it
also checks what a schema cannot say, such as quantity grammar or one probe kind per check).
"""

from __future__ import annotations

import json
import types
import typing
from typing import Any, Literal

import attrs

from asyncdeploy.plan import FrozenMap, WorkloadPlan, plan_to_mapping
from asyncdeploy.plan._fields import ALL_ENGINES, FieldDoc

__all__ = ["plan_reference_markdown", "plan_schema", "plan_schema_json"]


def _plan_types() -> list[type[Any]]:
    """Every attrs class reachable from WorkloadPlan, in first-seen order."""
    seen: list[type[Any]] = []
    pending: list[type[Any]] = [WorkloadPlan]
    while pending:
        kind = pending.pop(0)
        if kind in seen:
            continue
        seen.append(kind)
        for field in attrs.fields(kind):
            nested = field.metadata.get("nested")
            if nested is not None:
                pending.append(nested)
    return seen


def _hints(kind: type[Any]) -> dict[str, Any]:
    return typing.get_type_hints(kind)


def field_doc(field: attrs.Attribute[Any]) -> FieldDoc:
    """A plan field's words (``_fields.about``); a field a plan file writes has them."""
    doc = field.metadata.get("doc")
    if not isinstance(doc, FieldDoc):
        raise LookupError(f"the plan field {field.name!r} has no words: give it about(...)")
    return doc


def _type_schema(hint: Any) -> dict[str, Any]:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in args if a is not type(None)]
        schema = _type_schema(options[0]) if len(options) == 1 else {"anyOf": []}
        return {"anyOf": [schema, {"type": "null"}]} if type(None) in args else schema
    if origin is Literal:
        return {"enum": list(args)}
    if origin is tuple:
        return {"type": "array", "items": _type_schema(args[0])}
    if attrs.has(hint):
        return {"$ref": f"#/$defs/{hint.__name__}"}
    if hint is FrozenMap:
        return {"type": "object", "additionalProperties": {"type": "string"}}
    simple = {str: "string", int: "integer", bool: "boolean", float: "number"}
    return {"type": simple[hint]}


def _default(field: attrs.Attribute[Any]) -> Any:
    default: Any = field.default
    if isinstance(default, attrs.Factory):  # type: ignore[arg-type]
        default = default.factory()
    if default is attrs.NOTHING:
        return attrs.NOTHING
    return plan_to_mapping(default)


def _field_schema(field: attrs.Attribute[Any], hint: Any) -> dict[str, Any]:
    doc = field_doc(field)
    schema = dict(doc.schema if doc.schema is not None else _type_schema(hint))
    schema["description"] = doc.text
    default = _default(field)
    if default is not attrs.NOTHING and default not in ({}, [], None):
        schema["default"] = default
    return schema


def plan_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a plan document."""
    defs: dict[str, Any] = {}
    for kind in _plan_types():
        hints = _hints(kind)
        fields = [f for f in attrs.fields(kind) if not f.metadata.get("internal")]
        inline = [f for f in fields if "inline_keys" in f.metadata]
        defs[kind.__name__] = {
            "type": "object",
            "description": kind.summary,
            "additionalProperties": False,
            "properties": {
                f.name: _field_schema(f, hints[f.name]) for f in fields if f not in inline
            },
            "required": [f.name for f in fields if f.default is attrs.NOTHING],
        }
        if inline:  # a mapping whose entries a plan file writes beside the other fields
            defs[kind.__name__]["patternProperties"] = {
                f"^{f.metadata['inline_keys']}$": {
                    "title": f.name,
                    "type": ["integer", "string"],
                    "description": field_doc(f).text,
                }
                for f in inline
            }
    root = defs.pop("WorkloadPlan")
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "asyncdeploy workload plan",
        **root,
        "$defs": defs,
    }


def plan_schema_json() -> str:
    return json.dumps(plan_schema(), indent=2, ensure_ascii=False) + "\n"


def _type_words(schema: dict[str, Any]) -> str:
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[1]
        return f"[{name}](#{name.lower()})"
    if "anyOf" in schema:
        words = [_type_words(s) for s in schema["anyOf"] if s.get("type") != "null"]
        return " or ".join(words)
    if "enum" in schema:
        return " \\| ".join(f"`{v}`" for v in schema["enum"])
    kind = schema.get("type")
    if kind == "array":
        return f"list of {_type_words(schema['items'])}"
    if kind == "object":
        return "mapping of string to string"
    if isinstance(kind, list):
        return " or ".join(kind)
    return str(kind)


def plan_reference_markdown() -> str:
    """The reference page: one table per plan type, every field with type, default and engines."""
    schema = plan_schema()
    sections = {"WorkloadPlan": schema, **schema["$defs"]}
    kinds = {kind.__name__: attrs.fields_dict(kind) for kind in _plan_types()}
    lines = [
        "# Plan reference",
        "",
        "Generated by `asyncdeploy schema --format markdown` from the plan model; do not edit by",
        "hand. A plan is YAML or JSON whose keys are exactly these field names; the JSON Schema",
        "(`asyncdeploy schema`, committed as `docs/plan.schema.json`) gives editors completion:",
        "put `# yaml-language-server: $schema=<path or URL of plan.schema.json>` on a plan's",
        "first line.",
    ]
    for name, section in sections.items():
        lines += ["", f"## {name}", "", section["description"], ""]
        lines += [
            "| field | type | default | engines | meaning |",
            "| --- | --- | --- | --- | --- |",
        ]
        for field, prop in section["properties"].items():
            required = field in section["required"]
            default = (
                "required"
                if required
                else json.dumps(prop["default"])
                if "default" in prop
                else "—"
            )
            engines = field_doc(kinds[name][field]).engines
            engines = "all" if engines == ALL_ENGINES else engines
            lines.append(
                f"| `{field}` | {_type_words(prop)} | {default} | {engines} | "
                f"{prop['description']} |"
            )
        for prop in (section.get("patternProperties") or {}).values():
            engines = field_doc(kinds[name][prop["title"]]).engines
            lines.append(
                f"| `<vendor-domain>/<resource>` | integer | — | {engines} | "
                f"{prop['description']} |"
            )
    return "\n".join(lines) + "\n"
