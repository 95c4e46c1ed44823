"""kubectl-style tables: the one layout of every table the CLI prints."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["render_table"]


def render_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """Left-aligned columns as wide as their longest cell (the last one unpadded), like kubectl."""
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header) - 1)]
    lines = []
    for row in [header, *rows]:
        cells = [f"{cell:<{width}}" for cell, width in zip(row, widths, strict=False)]
        lines.append("   ".join([*cells, row[-1]]).rstrip())
    return lines
