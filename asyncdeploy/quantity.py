"""Strict Kubernetes resource quantities: parse, compare by value, print canonically.

Accepts exactly what the API server accepts (``<sign?><digits>[.<digits>][suffix]`` with a binary
suffix ``Ki Mi Gi Ti Pi Ei``, a decimal suffix ``n u m k M G T P E``, or an exponent ``e3``/``E3``)
and refuses spellings that Python's ``Decimal`` would take but Kubernetes would not: underscores,
non-ASCII digits, surrounding spaces.
"""

from __future__ import annotations

import re
from decimal import Decimal

__all__ = ["canonical_quantity", "format_cpu", "format_memory", "parse_quantity"]

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}
# re.ASCII keeps \d from matching full-width or other Unicode digits.
_QUANTITY = re.compile(
    r"(?P<number>[+-]?(?:\d+(?:\.\d*)?|\.\d+))"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?\d+)?",
    re.ASCII,
)


def parse_quantity(value: str | float) -> Decimal:
    """The number a quantity denotes: ``"1.5Gi"`` → 1610612736, ``"500m"`` → 0.5.

    Raises ``ValueError`` for a spelling the Kubernetes API server would refuse.
    """
    if isinstance(value, bool):
        raise ValueError(f"not a quantity: {value!r}")
    if not isinstance(value, str):
        value = str(value)  # 0.5 -> "0.5", 1e-07 -> "1e-07": both valid spellings
    match = _QUANTITY.fullmatch(value)
    if match is None:
        raise ValueError(f"not a Kubernetes quantity: {value!r}")
    number = Decimal(match["number"])
    suffix = match["suffix"] or ""
    if suffix in _BINARY:
        result = number * _BINARY[suffix]
    elif suffix[:1] in ("e", "E"):
        result = number.scaleb(int(suffix[1:]))
    else:
        result = number * _DECIMAL[suffix]
    if result < 0:
        raise ValueError(f"a resource quantity cannot be negative: {value!r}")
    return result


def format_cpu(value: Decimal) -> str:
    """CPU in the API server's canonical form: ``0.5`` → ``500m``, ``2`` → ``2``."""
    millis = (value * 1000).quantize(Decimal(1), rounding="ROUND_CEILING")
    if millis % 1000 == 0:
        return str(int(millis // 1000))
    return f"{int(millis)}m"


def format_memory(value: Decimal) -> str:
    """Bytes in the API server's canonical form, keeping a binary suffix when one fits."""
    amount = int(value.to_integral_value(rounding="ROUND_CEILING"))
    if amount == 0:
        return "0"
    for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
        if amount % _BINARY[suffix] == 0:
            return f"{amount // _BINARY[suffix]}{suffix}"
    for suffix in ("E", "P", "T", "G", "M", "k"):
        scale = int(_DECIMAL[suffix])
        if amount % scale == 0:
            return f"{amount // scale}{suffix}"
    return str(amount)


def canonical_quantity(value: str | float, *, kind: str) -> str:
    """Canonical spelling for ``kind`` ``"cpu"`` or ``"memory"``."""
    number = parse_quantity(value)
    return format_cpu(number) if kind == "cpu" else format_memory(number)
