"""What the CLI knows of the terminal it writes to: its width, and notices folded to fit it."""

from __future__ import annotations

import os
import textwrap
from typing import TextIO

__all__ = ["fold", "terminal_width"]


def terminal_width(stream: TextIO) -> int | None:
    """The width of the terminal ``stream`` writes to, or None when it is no capable terminal."""
    if os.environ.get("TERM", "") in ("dumb", "unknown"):
        return None
    try:
        if not stream.isatty():
            return None
        return os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, OSError, ValueError):
        return None


def fold(message: str, width: int | None) -> str:
    """A notice folded at words into lines shorter than ``width`` (a terminal's; None: as it
    is): never cut, for it says what the next Ctrl-C does, and never left for the terminal to
    wrap, which would break a view redrawn in place."""
    if width is None or len(message) < width:
        return message  # it fits as it is (a table row keeps its spaces)
    return "\n".join(textwrap.wrap(message, width - 1, subsequent_indent="  ") or [""])
