"""parse_duration, used by `asyncdeploy drain --propagation-wait 10s`."""

from __future__ import annotations

import pytest

from asyncdeploy.workload import parse_duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("10", 10.0),
        ("10s", 10.0),
        ("500ms", 0.5),
        ("2m", 120.0),
        ("1m30s", 90.0),
        ("0.25s", 0.25),
        (" 1h ", 3600.0),
    ],
)
def test_valid(text: str, seconds: float) -> None:
    """Bare numbers are seconds; units ms, s, m, h may be combined."""
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "s", "10x", "-1", "1s2", "nan", "inf", "10 s"])
def test_invalid(text: str) -> None:
    """Anything else is a ValueError naming the input."""
    with pytest.raises(ValueError, match="invalid duration"):
        parse_duration(text)
