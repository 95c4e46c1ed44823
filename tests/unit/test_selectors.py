"""Label selectors: Kubernetes' grammar and meaning, parsed once, printed canonically."""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from hypothesis import given
from hypothesis import strategies as st

from asyncdeploy._errors import SelectorError
from asyncdeploy._selectors import Requirement, Selector, as_selector, parse_selector


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("team=ml", "team=ml"),
        ("team==ml", "team=ml"),
        ("team!=x", "team!=x"),
        ("team=", "team="),
        ("team in (b,a)", "team in (a,b)"),
        ("team notin (a)", "team notin (a)"),
        ("team in (a,)", "team in (,a)"),
        ("gpu", "gpu"),
        ("!gpu", "!gpu"),
        ("gpus>1,gpus<8", "gpus<8,gpus>1"),
        (" b = 1 ,  a  ", "a,b=1"),
        ("example.com/team=ml", "example.com/team=ml"),
        ("team=in", "team=in"),
    ],
)
def test_valid_selectors_and_their_canonical_spelling(text: str, canonical: str) -> None:
    assert str(parse_selector(text)) == canonical


def test_not_equal_is_read_as_the_operator_not_part_of_the_key() -> None:
    assert parse_selector("team!=x").requirements == (Requirement("team", "!=", ("x",)),)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   ",
        ",",
        "a,",
        ",a",
        "a,,b",
        "team!",
        "=ml",
        "team in ml",
        "team in (a",
        "team in (a b)",
        "a=b=c",
        "a b",
        "in=x",
        "gpus>x",
        "gpus>",
        "Team_/x=1",
        "team=-x",
        "team=" + "v" * 64,
        "k" * 64,
        "team=(x)",
        "!",
        "!a=b",
    ],
)
def test_invalid_selectors_are_refused_with_one_error(text: str) -> None:
    with pytest.raises(SelectorError):
        parse_selector(text)


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        ({"team": "ml"}, False),
        ({"team": ""}, True),
        ({}, False),
    ],
)
def test_empty_value_means_the_empty_value_not_any_value(
    labels: dict[str, str], expected: bool
) -> None:
    """``team=`` matches only a present, empty ``team`` label, as in Kubernetes."""
    assert parse_selector("team=").matches(labels) is expected


def test_api_takes_a_selector_a_string_or_a_mapping() -> None:
    selector = parse_selector("team=ml")
    assert as_selector(selector) is selector
    assert as_selector("team=ml") == selector
    assert as_selector({"team": "ml"}) == selector
    assert as_selector(None) is None
    with pytest.raises(SelectorError):
        as_selector({})
    with pytest.raises(SelectorError):
        as_selector({"bad key!": "x"})


# --- properties ------------------------------------------------------------------------------

_NAME_CHARS = "abcxyzABC019-_."
names = st.text(_NAME_CHARS, min_size=1, max_size=8).filter(
    lambda s: s[0].isalnum() and s[-1].isalnum()
)
keys = names | st.builds(lambda p, n: f"{p}/{n}", st.sampled_from(["a.io", "x-y.com"]), names)
values = st.just("") | names
integers = st.integers(0, 2**63 - 1).map(str)  # a label value cannot start with "-"


@st.composite
def requirements(draw: st.DrawFn) -> Requirement:
    key = draw(keys)
    operator = draw(st.sampled_from(["=", "!=", "in", "notin", "exists", "!", ">", "<"]))
    if operator in ("exists", "!"):
        return Requirement(key, operator)
    if operator in ("in", "notin"):
        return Requirement(key, operator, tuple(draw(st.lists(values, min_size=1, max_size=4))))
    return Requirement(key, operator, (draw(integers if operator in "<>" else values),))


selectors = st.lists(requirements(), min_size=1, max_size=5).map(lambda r: Selector(tuple(r)))


@given(selectors)
def test_parse_of_render_is_the_same_selector(selector: Selector) -> None:
    assert parse_selector(str(selector)) == selector


_SELECTOR_CHARS = "ab=!(),<> \t\nin" + "notin" + "-_./0é"


@given(st.text(_SELECTOR_CHARS, max_size=30) | st.text(max_size=30))
def test_any_string_parses_or_raises_selector_error(text: str) -> None:
    try:
        selector = parse_selector(text)
    except SelectorError:
        return
    assert parse_selector(str(selector)) == selector


def reference_matches(requirement: Requirement, labels: Mapping[str, str]) -> bool:
    """Kubernetes' ``Requirement.Matches``, transcribed from apimachinery's labels/selector.go."""
    key, op, vals = requirement.key, requirement.operator, set(requirement.values)
    if op in ("=", "in"):
        return key in labels and labels[key] in vals
    if op in ("!=", "notin"):
        return key not in labels or labels[key] not in vals
    if op == "exists":
        return key in labels
    if op == "!":
        return key not in labels
    try:
        have = int(labels[key])  # Go's ParseInt: an optional sign, then digits
    except (KeyError, ValueError):
        return False
    if "_" in labels[key] or labels[key].strip() != labels[key]:
        return False  # Python's int() takes these, Go's ParseInt does not
    if not -(2**63) <= have < 2**63:
        return False  # ParseInt(..., 64) fails out of range
    (bound,) = (int(v) for v in vals)
    return have > bound if op == ">" else have < bound


small_keys = st.sampled_from(["a", "b", "x.io/c"])
small_values = st.sampled_from(["", "1", "2", "ml", "03"])
label_values = st.sampled_from(["", "1", "2", "ml", "-3", "+4", "99999999999999999999"])


@st.composite
def small_requirements(draw: st.DrawFn) -> Requirement:
    key = draw(small_keys)
    operator = draw(st.sampled_from(["=", "!=", "in", "notin", "exists", "!", ">", "<"]))
    if operator in ("exists", "!"):
        return Requirement(key, operator)
    if operator in ("in", "notin"):
        return Requirement(key, operator, tuple(draw(st.lists(small_values, min_size=1))))
    if operator in ("<", ">"):
        return Requirement(key, operator, (str(draw(st.integers(0, 4))),))
    return Requirement(key, operator, (draw(small_values),))


@given(
    st.lists(small_requirements(), min_size=1, max_size=4),
    st.dictionaries(small_keys, label_values, max_size=3),
)
def test_matching_agrees_with_kubernetes(
    requirements: list[Requirement], labels: dict[str, str]
) -> None:
    selector = parse_selector(str(Selector(tuple(requirements))))
    expected = all(reference_matches(r, labels) for r in requirements)
    assert selector.matches(labels) is expected


def test_values_built_by_hand_are_checked_too() -> None:
    with pytest.raises(SelectorError):
        Requirement("team", "~", ("x",))  # type: ignore[arg-type]
    with pytest.raises(SelectorError):
        Requirement(5, "=", ("x",))  # type: ignore[arg-type]
    with pytest.raises(SelectorError):
        Selector.from_labels({"team": None})  # type: ignore[dict-item]
    with pytest.raises(SelectorError):
        Requirement("team", "in", "ab")  # type: ignore[arg-type]
