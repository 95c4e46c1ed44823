"""Kubernetes quantities: what the API server accepts, by value, in canonical spelling."""

from __future__ import annotations

from decimal import Decimal

import pytest

from asyncdeploy.plan.quantity import canonical_quantity, parse_quantity


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1", Decimal(1)),
        ("0.5", Decimal("0.5")),
        ("500m", Decimal("0.5")),
        ("1.5Gi", Decimal(1536 * 2**20)),
        ("1536Mi", Decimal(1536 * 2**20)),
        ("1e3", Decimal(1000)),
        ("1E3", Decimal(1000)),
        ("2k", Decimal(2000)),
        (".5", Decimal("0.5")),
        ("100n", Decimal("1e-7")),
    ],
)
def test_accepted_spellings(text: str, value: Decimal) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize(
    "text", ["1_000", " 1", "1 ", "\uff11", "1K", "1kb", "", "Gi", "1.2.3", "-1"]
)
def test_spellings_kubernetes_refuses(text: str) -> None:
    """Decimal would take some of these; the API server takes none."""
    with pytest.raises(ValueError, match="quantity"):
        parse_quantity(text)


@pytest.mark.parametrize(
    ("value", "kind", "canonical"),
    [
        (0.5, "cpu", "500m"),
        ("1.5", "cpu", "1500m"),
        (2, "cpu", "2"),
        ("1.5Gi", "memory", "1536Mi"),
        ("1Gi", "memory", "1Gi"),
        ("1e9", "memory", "1G"),
        ("1000", "memory", "1k"),
        ("1001", "memory", "1001"),
    ],
)
def test_canonical_form(value: str | float, kind: str, canonical: str) -> None:
    assert canonical_quantity(value, kind=kind) == canonical
