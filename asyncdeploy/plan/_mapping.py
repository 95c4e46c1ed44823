"""Plan files ↔ plan values: a mapping whose keys are exactly the attribute names becomes the
attrs value (recursing into the fields marked ``nested``, with field paths in errors), and back.

Generic over the plan's attrs types: what a field needs is read from the field itself (its
metadata from ``_fields.about``, its type), never from its name.
"""

from __future__ import annotations

import difflib
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

import attrs

from asyncdeploy._errors import PlanError
from asyncdeploy.masking import masked_repr

__all__ = ["plan_to_mapping", "structure"]

T = TypeVar("T")
_BOOL_FIELDS: dict[type[Any], frozenset[str]] = {}


def _plan_fields(cls: type[Any]) -> dict[str, attrs.Attribute[Any]]:
    """The fields a plan file may write (``internal`` ones are set by the library only)."""
    return {f.name: f for f in attrs.fields(cls) if not f.metadata.get("internal")}


def _fold_inline(cls: type[Any], data: Mapping[Any, Any]) -> Mapping[Any, Any]:
    """Plan-file form → attribute form: the ``<domain>/<name>`` keys a plan file writes beside
    the other fields (``nvidia.com/gpu: 1``) go into the field marked ``inline_keys``."""
    inline = [f for f in attrs.fields(cls) if "inline_keys" in f.metadata]
    if not inline:
        return data
    (field,) = inline
    folded = {k: v for k, v in data.items() if "/" not in str(k)}
    entries = {k: v for k, v in data.items() if "/" in str(k)}
    if entries:
        folded[field.name] = {**(folded.get(field.name) or {}), **entries}
    return folded


def _bool_fields(cls: type[Any]) -> frozenset[str]:
    """The fields whose type is ``bool``: a plan file must write true or false there."""
    if cls not in _BOOL_FIELDS:
        hints = typing.get_type_hints(cls)
        _BOOL_FIELDS[cls] = frozenset(name for name, hint in hints.items() if hint is bool)
    return _BOOL_FIELDS[cls]


def structure(cls: type[T], data: Any, path: str) -> T:
    """Build ``cls`` from ``data``, recursing into nested plan types, with field paths in errors.

    Every problem is found before one is raised: a ``PlanError`` whose ``problems`` holds each
    (its message, the first's; ``str()``, all of them, one a line)."""
    problems: list[PlanError] = []
    built = _structure(cls, data, path, problems)
    if problems:
        raise PlanError.of(problems)
    assert built is not None
    return built


def _kind(data: Any) -> str:
    """What a value is, in words: where a mapping was wanted, what was there instead."""
    if data is None:
        return "nothing (empty)"
    if isinstance(data, bool):
        return f"{str(data).lower()} (a boolean)"
    if isinstance(data, int | float):
        return f"{data!r} (a number)"
    if isinstance(data, str):
        return f"{masked_repr(data)} (a string)"
    if isinstance(data, list | tuple):
        return "a list"
    return type(data).__name__


def _did_you_mean(key: Any, fields: Mapping[str, Any]) -> str:
    close = difflib.get_close_matches(str(key), list(fields), n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""


def _check_field(field: attrs.Attribute[Any], value: Any, path: str) -> PlanError | None:
    """The field's own rule on ``value`` alone (its converter, then its validators), so that
    each field of one mapping is judged, not only the first that fails."""
    try:
        converter: Any = field.converter  # a plain function on every plan field
        if callable(converter):
            value = converter(value)
        if field.validator is not None:
            field.validator(None, field, value)
    except PlanError as exc:
        return exc.within(path)
    except (TypeError, ValueError, KeyError):
        return None  # left to the constructor, which says it in its own words
    return None


def _structure(cls: type[T], data: Any, path: str, problems: list[PlanError]) -> T | None:
    """``cls`` from ``data``, or None with what is wrong added to ``problems``."""
    if not isinstance(data, Mapping):
        problems.append(PlanError(path, f"must be a mapping, got {_kind(data)}"))
        return None
    before = len(problems)
    data = _fold_inline(cls, data)
    fields = _plan_fields(cls)
    for key in sorted(set(data) - set(fields), key=str):
        where = _join(path, key) if isinstance(key, str) and key.isidentifier() else None
        problems.append(
            PlanError(
                where or f"{path}[{masked_repr(key)}]", "unknown field" + _did_you_mean(key, fields)
            )
        )
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        field = fields.get(key)
        if field is None:
            continue
        nested = field.metadata.get("nested")
        here = _join(path, key)
        if value is None and field.default not in (None, attrs.NOTHING):
            continue  # "checks:" left empty in YAML means the default, as if not written
        # Python code may pass any truthy value; a plan file says true or false.
        if key in _bool_fields(cls) and not isinstance(value, bool):
            problems.append(PlanError(here, f"must be true or false, got {masked_repr(value)}"))
            continue
        if nested is not None and field.metadata.get("many"):
            if not isinstance(value, list | tuple):
                problems.append(PlanError(here, f"must be a list, got {_kind(value)}"))
                continue
            value = tuple(
                _structure(nested, item, f"{here}[{i}]", problems) for i, item in enumerate(value)
            )
            if None not in value and (problem := _check_field(field, value, path)) is not None:
                problems.append(problem)  # the list's own rule: one run container, no name twice
                continue
        elif nested is not None and value is not None:
            value = _structure(nested, value, here, problems)
        elif (problem := _check_field(field, value, path)) is not None:
            problems.append(problem)
            continue
        kwargs[key] = value
    for name, f in fields.items():
        if f.default is attrs.NOTHING and name not in data:
            problems.append(PlanError(_join(path, name), "is required"))
    if len(problems) > before:
        return None
    try:
        return cls(**kwargs)
    except PlanError as exc:
        problems.append(exc.within(path))
        return None


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def plan_to_mapping(plan: Any) -> Any:
    """Plain data for a plan (or a part of one): the inverse of ``WorkloadPlan.from_mapping``."""
    if attrs.has(type(plan)):
        out = {}
        for field in attrs.fields(type(plan)):
            value = getattr(plan, field.name)
            default = field.default
            if isinstance(default, attrs.Factory):  # type: ignore[arg-type]
                default = default.factory()
            if default is not attrs.NOTHING and value == default:
                continue
            out[field.name] = plan_to_mapping(value)
        for field in attrs.fields(type(plan)):
            if "inline_keys" in field.metadata:  # written beside the other fields, as in a file
                out.update(out.pop(field.name, {}))
        return out
    if isinstance(plan, Mapping):
        return {k: plan_to_mapping(v) for k, v in plan.items()}
    if isinstance(plan, tuple | list):
        return [plan_to_mapping(v) for v in plan]
    return plan
