"""The rules of the plan's fields: validators, converters, the words each field carries, and
the hashable mappings a plan holds.

Every rule is keyed by the field it is attached to, never by a field's name: attrs hands each
validator its attribute, so a refusal names the field it belongs to (``PlanError``, prefixed with
the path when ``plan.py`` builds a child from a mapping). Converters only give a value its shape
(a bare string becomes a one-item tuple, a mapping a frozen one) and never refuse: what does not
take that shape is left as it came for the field's validator to refuse by name. Messages show a
refused value through :func:`asyncdeploy.masking.masked_repr`: bounded, and masked.

Each field's words for the reference page and its schema, where a plan file may write more than
the stored type says, are the field's metadata (:func:`about`); :mod:`asyncdeploy.plan.schema` reads
them from there, so a new field cannot miss its words.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Generic, TypeVar, cast

import attrs

from asyncdeploy._errors import PlanError
from asyncdeploy._image_reference import image_reference_problem
from asyncdeploy.labels import RESERVED_DOMAIN, is_reserved
from asyncdeploy.masking import masked_repr
from asyncdeploy.plan.quantity import canonical_quantity, parse_quantity

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


# --- the words of a field ---------------------------------------------------------------------

ALL_ENGINES = "all"

STRINGS_OR_LIST: Mapping[str, Any] = {
    "anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}, "minItems": 1}]
}
"""What a plan file may write where :func:`strings` converts: one string, or a list of them."""
QUANTITY: Mapping[str, Any] = {"type": ["string", "number"]}
"""What a plan file may write where a quantity converter converts: ``16Gi``, ``0.5``."""
DNS_LABEL: Mapping[str, Any] = {
    "type": "string",
    "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
    "maxLength": 63,
}


@attrs.frozen
class FieldDoc:
    """What a plan field means, where it is honoured, and what a plan file may write there."""

    text: str
    engines: str = ALL_ENGINES  # where it is honoured, in words: "all", "Docker, Podman", ...
    schema: Mapping[str, Any] | None = None  # None: the schema follows the stored type


def about(
    text: str,
    engines: str = ALL_ENGINES,
    *,
    schema: Mapping[str, Any] | None = None,
    nested: type[Any] | None = None,
    many: bool = False,
    inline_keys: str | None = None,
) -> dict[str, Any]:
    """A plan field's metadata: its words (``doc``, read by :mod:`asyncdeploy.plan.schema`), and how a
    plan file writes it: ``nested``, a plan type (``many``: a list of them); ``inline_keys``, a
    mapping whose ``<domain>/<name>`` entries a plan file writes beside the other fields."""
    metadata: dict[str, Any] = {"doc": FieldDoc(text, engines, schema)}
    if nested is not None:
        metadata.update(nested=nested, many=many)
    if inline_keys is not None:
        metadata["inline_keys"] = inline_keys
    return metadata


# --- validators: each refuses by the attribute it is attached to --------------------------------


def _fail(attribute: attrs.Attribute[Any], message: str) -> PlanError:
    return PlanError(attribute.name, message)


def dns_label(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, str) or len(value) > 63 or not _DNS_LABEL.fullmatch(value):
        raise _fail(
            attribute,
            f"{masked_repr(value)} is not a DNS-1123 label (lower-case letters, digits and '-', "
            "starting and ending with a letter or digit, at most 63 characters)",
        )


def non_empty_str(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, str) or not value.strip() or value != value.strip():
        raise _fail(
            attribute,
            f"must be a non-empty string without surrounding spaces, got {masked_repr(value)}",
        )


def image_reference(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    """An image reference as the engines and the kubelet parse it (``_image_reference.py``)."""
    non_empty_str(_, attribute, value)
    if (problem := image_reference_problem(value)) is not None:
        raise _fail(attribute, f"{value!r} is not a valid image reference: it {problem}")


def optional_str(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is not None and not isinstance(value, str):
        raise _fail(attribute, f"must be a string, got {masked_repr(value)}")


def string(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
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


def seconds(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    """A duration of whole seconds, 0 allowed (a grace period, an initial delay)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_SECONDS:
        raise _fail(
            attribute,
            f"must be a whole number of seconds 0-{MAX_SECONDS}, got {masked_repr(value)}",
        )


def positive_int(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_SECONDS:
        raise _fail(attribute, f"must be a whole number 1-{MAX_SECONDS}, got {masked_repr(value)}")


def port_number(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
        raise _fail(attribute, f"must be a port number 1-65535, got {masked_repr(value)}")


optional_port_number = attrs.validators.optional(port_number)


def one_of(*choices: str) -> Callable[[Any, attrs.Attribute[Any], Any], None]:
    def check(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        if not isinstance(value, str) or value not in choices:
            raise _fail(attribute, f"must be one of {', '.join(choices)}; got {masked_repr(value)}")

    return check


def string_list(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    """What :func:`strings` could not give the shape of a list: refused by this field's name."""
    if value is not None and not isinstance(value, tuple):
        raise _fail(attribute, f"must be a list of strings, got {masked_repr(value)}")


def string_items(_: Any, attribute: attrs.Attribute[Any], value: tuple[Any, ...] | None) -> None:
    """A command or argument list: a list (see :func:`strings`) of strings only."""
    string_list(_, attribute, value)
    for i, item in enumerate(value or ()):
        if not isinstance(item, str):
            raise PlanError(f"{attribute.name}[{i}]", f"must be a string, got {masked_repr(item)}")


def non_empty(_: Any, attribute: attrs.Attribute[Any], value: tuple[Any, ...] | None) -> None:
    """A command that is given must run something (``args`` may be empty, a command not)."""
    if value is not None and not value:
        raise _fail(attribute, "must not be empty")


def env_map(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    mapping(_, attribute, value)
    for key, item in value.items():
        item = cast(Any, item)
        if not _ENV_NAME.fullmatch(key):
            raise PlanError(f"{attribute.name}.{key}", "is not a valid environment variable name")
        if not isinstance(item, str):
            # masked_repr() names only the type when the variable's name looks secret.
            raise PlanError(
                f"{attribute.name}.{key}", f"must be a string, got {masked_repr(item, name=key)}"
            )


def label_map(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    _label_entries(attribute, value, reserved_refused=True)


def node_labels(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    """Labels of nodes to match: any domain's keys (``kubernetes.io/hostname``), since the
    nodes' labels are not asyncdeploy's to write."""
    _label_entries(attribute, value, reserved_refused=False)


def _label_entries(attribute: attrs.Attribute[Any], value: Any, *, reserved_refused: bool) -> None:
    mapping(None, attribute, value)
    for key, item in value.items():
        item = cast(Any, item)  # plan files may carry any value
        if not _LABEL_KEY.fullmatch(key):
            raise PlanError(f"{attribute.name}.{key}", "is not a valid label key")
        if reserved_refused and is_reserved(key):
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


def mapping(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    """What :func:`frozen_map` or :func:`extended_counts` could not take as a mapping."""
    if not isinstance(value, FrozenMap | FrozenCounts):
        raise _fail(attribute, f"must be a mapping, got {type(value).__name__}")


def tuple_of(kind: type[T]) -> Callable[[Any, attrs.Attribute[Any], tuple[Any, ...]], None]:
    def check(_: Any, attribute: attrs.Attribute[Any], value: tuple[Any, ...]) -> None:
        for i, item in enumerate(value):
            if not isinstance(item, kind):
                raise PlanError(
                    f"{attribute.name}[{i}]",
                    f"must be a {kind.__name__}, got {masked_repr(item)}",
                )

    return check


def quantity_of(kind: str) -> Callable[[Any, attrs.Attribute[Any], Any], None]:
    """A ``cpu`` or ``memory`` quantity, which :func:`cpu_quantity` / :func:`memory_quantity`
    have put in canonical form, or left as given for this to refuse."""

    def check(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        if value is None:
            return
        try:
            canonical_quantity(value, kind=kind)
        except ValueError as exc:
            raise _fail(attribute, str(exc)) from None

    return check


def signal_name(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is not None and (not isinstance(value, str) or not _SIGNAL.fullmatch(value)):
        raise _fail(
            attribute, f"is not a signal name like SIGTERM or a number: {masked_repr(value)}"
        )


def extended_names(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    """Extended resources (``nvidia.com/gpu: 1``): whole counts >= 0, like Kubernetes takes
    them. Refused entries are named as a plan file writes them, beside ``cpu``."""
    mapping(_, attribute, value)
    for key, item in value.items():
        here = f"[{json.dumps(key)}]"
        domain = key.partition("/")[0]
        if (
            not _EXTENDED_NAME.fullmatch(key)
            or domain == "kubernetes.io"
            or domain.endswith(".kubernetes.io")
        ):
            raise PlanError(
                here,
                "is not an extended resource name: use <vendor-domain>/<resource>, e.g. "
                "nvidia.com/gpu (kubernetes.io names are reserved)",
            )
        if whole_count(item) is None:
            raise PlanError(
                here,
                "must be a whole number >= 0 (an extended resource is counted), "
                f"got {cast(Any, item)!r}",
            )


def cdi_names(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, tuple):
        raise _fail(attribute, f"must be a list of CDI device names, got {value!r}")
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


# --- converters: the shape of a value, never a refusal ------------------------------------------


def strings(value: Iterable[str] | str | None) -> tuple[str, ...] | None:
    """A command or argument list; a bare string is one argument, never split on spaces."""
    if value is None:
        return None
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list | tuple):
        return tuple(value)
    return cast("tuple[str, ...]", value)  # not a list: refused by string_list, by its field


def names(value: Iterable[str] | str | None) -> tuple[str, ...]:
    """A list of names, one bare string being one name; none when unset."""
    return () if value is None else strings(value) or ()


def as_tuple(value: Iterable[Any]) -> tuple[Any, ...]:
    """A list of plan values (ports, mounts, containers), kept as a tuple so plans stay hashable."""
    return tuple(value)


def frozen_map(value: Mapping[str, Any] | None) -> FrozenMap:
    if isinstance(value, FrozenMap):
        return value
    if value is None:
        return FrozenMap()
    if isinstance(value, Mapping):
        return FrozenMap({str(k): v for k, v in value.items()})
    # A plan file may carry anything where a mapping belongs: the field's validator refuses it.
    return cast(Any, value)  # type: ignore[unreachable]


def _canonical_or_as_given(value: Any, kind: str) -> Any:
    try:
        return canonical_quantity(value, kind=kind)
    except ValueError:
        return value  # refused by quantity_of, by the field's name


def cpu_quantity(value: str | float | None) -> str | None:
    return None if value is None else cast(str, _canonical_or_as_given(value, "cpu"))


def memory_quantity(value: str | float | None) -> str | None:
    return None if value is None else cast(str, _canonical_or_as_given(value, "memory"))


def extended_counts(value: Mapping[str, Any] | None) -> FrozenCounts:
    if isinstance(value, FrozenCounts):
        return value
    if value is None:
        return FrozenCounts()
    if not isinstance(value, Mapping):
        return cast(Any, value)  # type: ignore[unreachable]  # refused by extended_names
    counts = {str(k): v if (n := whole_count(v)) is None else n for k, v in value.items()}
    return FrozenCounts(counts)  # what is no count stays as given, for extended_names


def whole_count(value: Any) -> int | None:
    """A whole count >= 0 (``1``, ``"2"``) as an int; None when ``value`` is none."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        return None
    try:
        number = parse_quantity(value)
    except ValueError:
        return None
    return int(number) if number == number.to_integral_value() else None


def device_names(value: Iterable[str] | str | None) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, list | tuple):
        return tuple(value)
    return cast("tuple[str, ...]", value)  # a bare string or anything else: refused by cdi_names
