"""Validators and converters for the plan's fields, and the hashable mapping it uses.

attrs runs converters first, then validators; both raise ``PlanError`` named after the
attribute, and ``plan.py`` prefixes the path when it builds a child from a mapping. Messages show
a refused value through :func:`asyncdeploy.masking.masked_repr`: bounded, and masked.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Generic, TypeVar, cast

import attrs

from asyncdeploy._image_reference import image_reference_problem
from asyncdeploy.errors import PlanError
from asyncdeploy.labels import RESERVED_DOMAIN, is_reserved
from asyncdeploy.masking import masked_repr
from asyncdeploy.quantity import canonical_quantity, parse_quantity

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", re.ASCII)
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*", re.ASCII)
_LABEL_KEY = re.compile(
    r"([a-z0-9.-]{1,253}/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?", re.ASCII
)
LABEL_VALUE_MAX = 63  # Kubernetes' limit, kept on every engine so one plan fits them all
_LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?", re.ASCII)
_SIGNAL = re.compile(r"(SIG)?[A-Z0-9+-]+|[0-9]+", re.ASCII)
# An extended resource: ``<domain>/<name>`` outside kubernetes.io, as the API server takes them.
EXTENDED_NAME_PATTERN = (
    r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
)
_EXTENDED_NAME = re.compile(EXTENDED_NAME_PATTERN, re.ASCII)
# A fully qualified CDI device name ``vendor/class=name`` (the CDI parser's grammar), the vendor
# a domain such as ``nvidia.com``.
_CDI_NAME = re.compile(
    r"(?P<vendor>[A-Za-z][A-Za-z0-9_-]*(\.[A-Za-z0-9_-]+)+)"
    r"/(?P<cls>[A-Za-z]([A-Za-z0-9_-]*[A-Za-z0-9])?)"
    r"=(?P<name>[A-Za-z0-9]([A-Za-z0-9_.:-]*[A-Za-z0-9])?)",
    re.ASCII,
)

# Docker's and Podman's rule for volume names; it also keeps "../info" out of the URL path.
_VOLUME_NAME = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]{1,254}", re.ASCII)

MAX_SECONDS = 2**31 - 1
"""The longest duration a plan may hold (Kubernetes keeps probe fields as int32)."""

T = TypeVar("T")
V = TypeVar("V")


class _FrozenMapping(Mapping[str, V], Generic[V]):
    """A read-only, hashable mapping with sorted keys, so frozen plans stay hashable."""

    __slots__ = ("_data",)

    def __init__(self, data: Mapping[str, V] | None = None) -> None:
        self._data = dict(sorted((data or {}).items()))

    def __getitem__(self, key: str) -> V:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __hash__(self) -> int:
        return hash(tuple(self._data.items()))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._data!r})"


class FrozenMap(_FrozenMapping[str]):
    """A read-only, hashable ``str → str`` mapping (labels, environment)."""

    __slots__ = ()


class FrozenCounts(_FrozenMapping[int]):
    """A read-only, hashable ``str → int`` mapping (extended resources such as GPUs)."""

    __slots__ = ()


def _fail(attribute: attrs.Attribute[Any], message: str) -> PlanError:
    return PlanError(attribute.name, message)


def _dns_label(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, str) or len(value) > 63 or not _DNS_LABEL.fullmatch(value):
        raise _fail(
            attribute,
            f"{masked_repr(value)} is not a DNS-1123 label (lower-case letters, digits and '-', "
            "starting and ending with a letter or digit, at most 63 characters)",
        )


def _non_empty_str(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, str) or not value.strip() or value != value.strip():
        raise _fail(
            attribute,
            f"must be a non-empty string without surrounding spaces, got {masked_repr(value)}",
        )


def image_reference(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    """An image reference as the engines and the kubelet parse it (``_image_reference.py``)."""
    _non_empty_str(_, attribute, value)
    if (problem := image_reference_problem(value)) is not None:
        raise _fail(attribute, f"{value!r} is not a valid image reference: it {problem}")


def _optional_str(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is not None and not isinstance(value, str):
        raise _fail(attribute, f"must be a string, got {masked_repr(value)}")


def _string(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, str):
        raise _fail(attribute, f"must be a string, got {masked_repr(value)}")


def check_volume_name(value: Any, path: str = "source") -> None:
    """A named volume: the engines' name rule, which also keeps it one Engine API path segment
    (no ``/``, no leading ``.``: nothing a URL could resolve as ``..``)."""
    if not isinstance(value, str) or not _VOLUME_NAME.fullmatch(value):
        raise PlanError(
            path,
            f"{masked_repr(value)} is not a volume name (2-255 letters, digits, '_', '.' or '-', "
            "starting with a letter or digit)",
        )


def _grace(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_SECONDS:
        raise _fail(
            attribute,
            f"must be a whole number of seconds 0-{MAX_SECONDS}, got {masked_repr(value)}",
        )


def _positive_int(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_SECONDS:
        raise _fail(attribute, f"must be a whole number 1-{MAX_SECONDS}, got {masked_repr(value)}")


def _port_number(_: Any, attribute: attrs.Attribute[Any], value: int | None) -> None:
    if value is None and attribute.name != "container_port":
        return
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
        raise _fail(attribute, f"must be a port number 1-65535, got {masked_repr(value)}")


def _one_of(*choices: str) -> Callable[[Any, attrs.Attribute[Any], Any], None]:
    def check(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        if not isinstance(value, str) or value not in choices:
            raise _fail(attribute, f"must be one of {', '.join(choices)}; got {masked_repr(value)}")

    return check


def _strings(field: str, value: Sequence[str] | str | None) -> tuple[str, ...] | None:
    """A command or argument list; a bare string is one argument, never split on spaces."""
    if value is None:
        return None
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, list | tuple):
        raise PlanError(field, f"must be a list of strings, got {masked_repr(value)}")
    return tuple(value)


# Named converters, one per field, so that errors name the field (and mypy can read them).
def _exec(value: Sequence[str] | str | None) -> tuple[str, ...] | None:
    return _strings("exec", value)


def _command(value: Sequence[str] | str | None) -> tuple[str, ...] | None:
    return _strings("command", value)


def _args(value: Sequence[str] | str | None) -> tuple[str, ...] | None:
    return _strings("args", value)


def _pre_stop(value: Sequence[str] | str | None) -> tuple[str, ...] | None:
    return _strings("pre_stop", value)


def _check_str_tuple(
    _: Any, attribute: attrs.Attribute[Any], value: tuple[Any, ...] | None
) -> None:
    if value is None:
        return
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise PlanError(f"{attribute.name}[{i}]", f"must be a string, got {masked_repr(item)}")
    if attribute.name in ("command", "pre_stop", "exec") and not value:
        raise _fail(attribute, "must not be empty")


def _frozen_map(value: Mapping[str, Any] | None, field: str = "") -> FrozenMap:
    if isinstance(value, FrozenMap):
        return value
    if value is None:
        return FrozenMap()
    if not isinstance(value, Mapping):
        raise PlanError(field, f"must be a mapping, got {type(value).__name__}")
    return FrozenMap({str(k): v for k, v in value.items()})


def _env(value: Mapping[str, Any] | None) -> FrozenMap:
    return _frozen_map(value, "env")


def _labels(value: Mapping[str, Any] | None) -> FrozenMap:
    return _frozen_map(value, "labels")


def _env_map(_: Any, attribute: attrs.Attribute[Any], value: FrozenMap) -> None:
    for key, item in value.items():
        item = cast(Any, item)
        if not _ENV_NAME.fullmatch(key):
            raise PlanError(f"{attribute.name}.{key}", "is not a valid environment variable name")
        if not isinstance(item, str):
            # masked_repr() names only the type when the variable's name looks secret.
            raise PlanError(
                f"{attribute.name}.{key}", f"must be a string, got {masked_repr(item, name=key)}"
            )


def _label_map(_: Any, attribute: attrs.Attribute[Any], value: FrozenMap) -> None:
    for key, item in value.items():
        item = cast(Any, item)  # plan files may carry any value
        if not _LABEL_KEY.fullmatch(key):
            raise PlanError(f"{attribute.name}.{key}", "is not a valid label key")
        if is_reserved(key):
            raise PlanError(
                f"{attribute.name}.{key}",
                f"is reserved: asyncdeploy writes the {RESERVED_DOMAIN} keys itself",
            )
        if not isinstance(item, str) or not _LABEL_VALUE.fullmatch(item):
            too_long = isinstance(item, str) and len(item) > LABEL_VALUE_MAX
            raise PlanError(
                f"{attribute.name}.{key}",
                f"is not a valid label value: {masked_repr(item, name=key)}"
                + (f" is {len(item)} characters" if too_long else "")
                + f" (a label value: at most {LABEL_VALUE_MAX} characters of letters, digits, "
                "'-', '_' and '.', starting and ending with a letter or digit, or empty)",
            )


def _tuple_of(kind: type[T]) -> Callable[[Any, attrs.Attribute[Any], tuple[Any, ...]], None]:
    def check(_: Any, attribute: attrs.Attribute[Any], value: tuple[Any, ...]) -> None:
        for i, item in enumerate(value):
            if not isinstance(item, kind):
                raise PlanError(
                    f"{attribute.name}[{i}]", f"must be a {kind.__name__}, got {masked_repr(item)}"
                )

    return check


def _quantity(field: str, kind: str, value: str | float | None) -> str | None:
    if value is None:
        return None
    try:
        return canonical_quantity(value, kind=kind)
    except ValueError as exc:
        raise PlanError(field, str(exc)) from None


def _cpu(value: str | float | None) -> str | None:
    return _quantity("cpu", "cpu", value)


def _memory(value: str | float | None) -> str | None:
    return _quantity("memory", "memory", value)


def _shm_size(value: str | float | None) -> str | None:
    return _quantity("shm_size", "memory", value)


def _signal(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is not None and (not isinstance(value, str) or not _SIGNAL.fullmatch(value)):
        raise _fail(
            attribute, f"is not a signal name like SIGTERM or a number: {masked_repr(value)}"
        )


def _extended(value: Mapping[str, Any] | None) -> FrozenCounts:
    """Extended resources (``nvidia.com/gpu: 1``): whole counts >= 0, like Kubernetes takes them."""
    if isinstance(value, FrozenCounts):
        return value
    if value is None:
        return FrozenCounts()
    if not isinstance(value, Mapping):
        raise PlanError("extended", f"must be a mapping, got {type(value).__name__}")
    counts = {}
    for key, item in value.items():
        here = f"[{json.dumps(str(key))}]"
        domain = str(key).partition("/")[0]
        if (
            not _EXTENDED_NAME.fullmatch(str(key))
            or domain == "kubernetes.io"
            or domain.endswith(".kubernetes.io")
        ):
            raise PlanError(
                here,
                "is not an extended resource name: use <vendor-domain>/<resource>, e.g. "
                "nvidia.com/gpu (kubernetes.io names are reserved)",
            )
        counts[str(key)] = _count(here, item)
    return FrozenCounts(counts)


def _count(field: str, value: Any) -> int:
    problem = f"must be a whole number >= 0 (an extended resource is counted), got {value!r}"
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise PlanError(field, problem)
    try:
        number = parse_quantity(value)
    except ValueError:
        raise PlanError(field, problem) from None
    if number != number.to_integral_value():
        raise PlanError(field, problem)
    return int(number)


def _devices(value: Sequence[str] | str | None) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str) or not isinstance(value, list | tuple):
        raise PlanError("devices", f"must be a list of CDI device names, got {value!r}")
    return tuple(value)


def _cdi_names(_: Any, attribute: attrs.Attribute[Any], value: tuple[Any, ...]) -> None:
    for i, item in enumerate(value):
        if not isinstance(item, str) or not _CDI_NAME.fullmatch(item):
            raise PlanError(
                f"{attribute.name}[{i}]",
                f"{item!r} is not a CDI device name vendor/class=name with the vendor a domain, "
                "e.g. nvidia.com/gpu=0 or nvidia.com/gpu=all",
            )
    if len(set(value)) != len(value):
        raise _fail(attribute, "names a device twice")


def cdi_kind(name: str) -> str:
    """The kind (``vendor/class``) of a CDI device name: ``nvidia.com/gpu=0`` → ``nvidia.com/gpu``."""
    return name.partition("=")[0]
