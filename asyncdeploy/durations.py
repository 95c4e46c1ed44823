"""Parse human durations such as ``10s``, ``500ms``, ``2m`` or ``1m30s``."""

from __future__ import annotations

import math
import re

__all__ = ["parse_duration"]

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ms|s|m|h)")


def parse_duration(text: str) -> float:
    """Seconds in ``text``: a bare number (seconds) or number+unit parts (ms, s, m, h).

    >>> parse_duration("10"), parse_duration("500ms"), parse_duration("1m30s")
    (10.0, 0.5, 90.0)
    """
    value = text.strip().lower()
    try:
        seconds = float(value)
    except ValueError:
        pos, seconds = 0, 0.0
        for match in _PART.finditer(value):
            if match.start() != pos:
                break
            seconds += float(match.group(1)) * _UNITS[match.group(2)]
            pos = match.end()
        if pos == 0 or pos != len(value):
            raise ValueError(
                f"invalid duration {text!r}: use e.g. 10, 10s, 500ms, 2m, 1m30s"
            ) from None
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"invalid duration {text!r}: must be a finite number >= 0")
    return seconds
