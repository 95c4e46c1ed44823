"""Strict Kubernetes resource quantities: parse, compare by value, print canonically.

Accepts exactly what the API server accepts (``<sign?><digits>[.<digits>][suffix]`` with a binary
suffix ``Ki Mi Gi Ti Pi Ei``, a decimal suffix ``n u m k M G T P E``, or an exponent ``e3``/``E3``)
and refuses spellings that Python's ``Decimal`` would take but Kubernetes would not: underscores,
non-ASCII digits, surrounding spaces.

Values are also bounded by what the engines hold: the Engine API takes CPU as ``NanoCpus`` and
memory in bytes, both int64, so a CPU above ``MAX_CPU`` or memory above ``MAX_BYTES`` is refused
here (as is a spelling too long or an exponent too large to be a real quantity), instead of
reaching the engine as a 500 or ``Decimal`` as an ``InvalidOperation``.
"""

from __future__ import annotations

import re
from decimal import Decimal, localcontext

__all__ = [
    "MAX_BYTES",
    "MAX_CPU",
    "canonical_quantity",
    "format_cpu",
    "format_memory",
    "parse_quantity",
]

MAX_BYTES = 2**63 - 1
"""The most memory an engine holds (int64 bytes)."""
MAX_CPU = (2**63 - 1) // 10**9
"""The most CPU an engine holds, in whole cores (int64 ``NanoCpus``)."""
_MAX_LENGTH = 64  # far more than any real quantity spells
_MAX_EXPONENT = 64

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
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError(f"a quantity is a string or a number, not {type(value).__name__}")
    if isinstance(value, int) and value.bit_length() > 128:
        raise ValueError("a quantity this large is out of range")
    if not isinstance(value, str):
        value = str(value)  # 0.5 -> "0.5", 1e-07 -> "1e-07": both valid spellings
    match = _QUANTITY.fullmatch(value) if len(value) <= _MAX_LENGTH else None
    if match is None:
        raise ValueError(f"not a Kubernetes quantity: {value[:_MAX_LENGTH]!r}")
    number = Decimal(match["number"])
    suffix = match["suffix"] or ""
    with localcontext() as exact:
        exact.prec = 2 * _MAX_LENGTH + _MAX_EXPONENT  # every product below is exact
        if suffix in _BINARY:
            result = number * _BINARY[suffix]
        elif suffix[:1] in ("e", "E"):
            exponent = int(suffix[1:])
            if abs(exponent) > _MAX_EXPONENT:
                raise ValueError(f"the exponent of {value!r} is out of range")
            result = number.scaleb(exponent)
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
    """Canonical spelling for ``kind`` ``"cpu"`` or ``"memory"``, within what engines hold."""
    number = parse_quantity(value)
    if kind == "cpu":
        if number > MAX_CPU:
            raise ValueError(f"{value!r} is more CPU than an engine can hold (at most {MAX_CPU})")
        return format_cpu(number)
    if number > MAX_BYTES:
        raise ValueError(f"{value!r} is more memory than an engine can hold (at most 8Ei - 1)")
    return format_memory(number)
