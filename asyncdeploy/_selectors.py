"""Kubernetes label selectors: parsed and validated once, matched the same way on every driver.

The grammar and the meaning are Kubernetes' own (``k8s.io/apimachinery/pkg/labels``)::

    team=ml  team==ml   the label is present and equals ml
    team!=ml            the label is absent, or present with another value
    team in (a,b)       present, with one of the values
    team notin (a,b)    absent, or present with none of the values
    team  /  !team      present / absent
    gpus>1  gpus<8      present, an integer greater / less than the number (which, being a
                        label value, cannot be negative)

Requirements are joined by ``,`` and must all hold. As in Kubernetes, ``team=`` is valid and
means "present with the empty value" (it never matches ``team=ml``), and ``team in (a,)`` lets
the empty value in. Unlike ``labels.Parse``, the empty string is refused instead of meaning
"everything": callers that want every workload say so without a selector.

Engines filter containers client-side with :meth:`Selector.matches`; Kubernetes receives
``str(selector)``, the canonical spelling, which parses back to an equal value.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any, Literal, TypeAlias

import attrs

from asyncdeploy._errors import SelectorError

__all__ = ["Requirement", "Selector", "SelectorLike", "as_selector", "parse_selector"]

Operator = Literal["=", "!=", "in", "notin", "exists", "!", ">", "<"]
_OPERATOR_NAMES = frozenset(("=", "!=", "in", "notin", "exists", "!", ">", "<"))

# What Kubernetes accepts as a label key (an optional DNS-subdomain prefix, then a name) and value.
_NAME = r"[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_PREFIX = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*"
_KEY = re.compile(rf"(?:(?P<prefix>{_PREFIX})/)?{_NAME}", re.ASCII)
_VALUE = re.compile(rf"(?:{_NAME})?", re.ASCII)
_INTEGER = re.compile(r"[+-]?[0-9]+", re.ASCII)
_INT64 = (-(2**63), 2**63 - 1)

# The lexer of labels.Parse: these spell operators; anything else up to them is an identifier.
_TOKEN = re.compile(r"[ \t\r\n]*(?:(?P<op>!=|==|=|!|\(|\)|,|>|<)|(?P<word>[^ \t\r\n!=(),><]+))")


def _int64(text: str) -> int | None:
    """``text`` as Go's ``strconv.ParseInt(text, 10, 64)`` reads it, else None."""
    if not _INTEGER.fullmatch(text):
        return None
    number = int(text)
    return number if _INT64[0] <= number <= _INT64[1] else None


def _check_key(key: object) -> None:
    match = _KEY.fullmatch(key) if isinstance(key, str) else None
    if match is None or (match["prefix"] is not None and len(match["prefix"]) > 253):
        raise SelectorError(
            f"{key!r} is not a valid label key (an optional DNS prefix and '/', then at most "
            "63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit)"
        )


def _check_value(value: object) -> None:
    if not isinstance(value, str) or not _VALUE.fullmatch(value):
        raise SelectorError(
            f"{value!r} is not a valid label value (at most 63 letters, digits, '-', '_' or "
            "'.', starting and ending with a letter or digit, or empty)"
        )


def _values(values: Any) -> tuple[str, ...]:
    if isinstance(values, str) or not all(isinstance(v, str) for v in values):
        raise SelectorError(f"selector values are a sequence of strings, not {values!r}")
    return tuple(sorted(set(values)))


@attrs.frozen
class Requirement:
    """One condition on one label key; ``values`` sorted and without repeats."""

    key: str
    operator: Operator
    values: tuple[str, ...] = attrs.field(default=(), converter=_values)

    def __attrs_post_init__(self) -> None:
        if self.operator not in _OPERATOR_NAMES:
            raise SelectorError(f"unknown selector operator {self.operator!r}")
        _check_key(self.key)
        for value in self.values:
            _check_value(value)
        if self.operator in ("exists", "!"):
            if self.values:
                raise SelectorError(f"{self.key!r} {self.operator} takes no value")
        elif self.operator in ("in", "notin"):
            if not self.values:
                raise SelectorError(f"{self.key!r} {self.operator} takes at least one value")
        elif len(self.values) != 1:
            raise SelectorError(f"{self.key!r} {self.operator} takes exactly one value")
        if self.operator in (">", "<"):
            (value,) = self.values
            if _int64(value) is None:
                raise SelectorError(
                    f"{self.key}{self.operator}{value}: the value must be a whole number"
                )

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Kubernetes' ``Requirement.Matches``."""
        present = self.key in labels
        if self.operator in ("=", "in"):
            return present and labels[self.key] in self.values
        if self.operator in ("!=", "notin"):
            return not present or labels[self.key] not in self.values
        if self.operator == "exists":
            return present
        if self.operator == "!":
            return not present
        have = _int64(labels[self.key]) if present else None
        if have is None:
            return False
        bound = int(self.values[0])
        return have > bound if self.operator == ">" else have < bound

    def __str__(self) -> str:
        if self.operator == "exists":
            return self.key
        if self.operator == "!":
            return f"!{self.key}"
        if self.operator in ("in", "notin"):
            return f"{self.key} {self.operator} ({','.join(self.values)})"
        return f"{self.key}{self.operator}{self.values[0]}"


def _requirements(value: tuple[Requirement, ...] | list[Requirement]) -> tuple[Requirement, ...]:
    return tuple(sorted(set(value), key=lambda r: (r.key, r.operator, r.values)))


@attrs.frozen
class Selector:
    """Every requirement must hold. Build one with :func:`parse_selector` or :meth:`from_labels`."""

    requirements: tuple[Requirement, ...] = attrs.field(converter=_requirements)

    def __attrs_post_init__(self) -> None:
        if not self.requirements:
            raise SelectorError("a selector needs at least one requirement")

    @classmethod
    def from_labels(cls, labels: Mapping[str, str]) -> Selector:
        """``{"team": "ml"}`` → ``team=ml``: every label present with exactly that value."""
        return cls(tuple(Requirement(k, "=", (v,)) for k, v in labels.items()))

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether ``labels`` meet every requirement (Kubernetes' ``Selector.Matches``)."""
        return all(r.matches(labels) for r in self.requirements)

    def __iter__(self) -> Iterator[Requirement]:
        return iter(self.requirements)

    def __str__(self) -> str:
        """The canonical spelling Kubernetes takes as ``labelSelector``."""
        return ",".join(map(str, self.requirements))


SelectorLike: TypeAlias = Selector | str | Mapping[str, str]
"""What the API takes for a selector: a parsed value, a string, or ``{label: value}``."""


def as_selector(value: SelectorLike | None) -> Selector | None:
    """The :class:`Selector` for a selector-like value (``None`` stays ``None``: no filter)."""
    if value is None or isinstance(value, Selector):
        return value
    if isinstance(value, str):
        return parse_selector(value)
    if isinstance(value, Mapping):
        return Selector.from_labels(value)
    raise SelectorError(f"a selector is a string or a mapping, not {type(value).__name__}")


def _tokens(text: str) -> Iterator[str]:
    position = 0
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None:  # only trailing whitespace is left
            if text[position:].strip(" \t\r\n"):
                raise SelectorError(f"cannot read {text[position:]!r}")
            return
        yield match["op"] or match["word"]
        position = match.end()


_OPERATORS = {"=", "==", "!=", "!", "(", ")", ",", ">", "<"}


class _Parser:
    """A recursive-descent parser over the tokens, shaped like Kubernetes' ``labels.Parser``."""

    def __init__(self, text: str) -> None:
        self.tokens = list(_tokens(text))
        self.position = 0

    def peek(self) -> str | None:
        return self.tokens[self.position] if self.position < len(self.tokens) else None

    def take(self) -> str | None:
        token = self.peek()
        self.position += 1
        return token

    def identifier(self, what: str) -> str:
        token = self.take()
        if token is None or token in _OPERATORS or token in ("in", "notin"):
            found = "the end" if token is None else repr(token)
            raise SelectorError(f"expected {what}, found {found}")
        return token

    def requirement(self) -> Requirement:
        if self.peek() == "!":
            self.take()
            return Requirement(self.identifier("a label key after '!'"), "!")
        key = self.identifier("a label key")
        token = self.peek()
        if token is None or token == ",":
            return Requirement(key, "exists")
        self.take()
        if token in ("=", "==", "!=", ">", "<"):
            operator: Operator = "=" if token == "==" else token  # type: ignore[assignment]
            return Requirement(key, operator, (self.exact_value(),))
        if token in ("in", "notin"):
            return Requirement(key, token, self.value_set())  # type: ignore[arg-type]
        raise SelectorError(
            f"expected an operator after {key!r} (=, ==, !=, in, notin, >, <), found {token!r}"
        )

    def exact_value(self) -> str:
        token = self.peek()
        if token is None or token == ",":
            return ""  # "team=" is the empty value, as in Kubernetes
        self.take()
        if token in _OPERATORS:
            raise SelectorError(f"expected a value, found {token!r}")
        return token

    def value_set(self) -> tuple[str, ...]:
        if self.take() != "(":
            raise SelectorError("expected '(' after in/notin")
        values: list[str] = []
        expect_value = True
        while True:
            token = self.take()
            if token is None:
                raise SelectorError("expected ')' to close the value list")
            if token == ")":
                if expect_value:
                    values.append("")  # "(a,)" and "()" hold the empty value, as in Kubernetes
                return tuple(values)
            if token == ",":
                if expect_value:
                    values.append("")
                expect_value = True
            elif expect_value and token not in _OPERATORS:
                values.append(token)
                expect_value = False
            else:
                raise SelectorError(f"expected a value, ',' or ')' in the list, found {token!r}")

    def selector(self) -> Selector:
        requirements = [self.requirement()]
        while (token := self.take()) is not None:
            if token != ",":
                raise SelectorError(f"expected ',' between requirements, found {token!r}")
            requirements.append(self.requirement())
        return Selector(tuple(requirements))


def parse_selector(text: str) -> Selector:
    """Parse a Kubernetes label selector; raise :class:`SelectorError` saying what is wrong."""
    if not isinstance(text, str):
        raise SelectorError(f"a selector is a string, not {type(text).__name__}")
    if not text.strip(" \t\r\n"):
        raise SelectorError("an empty selector selects nothing: name at least one label")
    try:
        return _Parser(text).selector()
    except SelectorError as exc:
        raise SelectorError(f"invalid selector {text!r}: {exc}") from None
