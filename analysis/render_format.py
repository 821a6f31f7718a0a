"""The block a report is made of, and how one value becomes the text of a cell.

A report is a list of simple blocks, shared by the Markdown and HTML writers:
``("h1"|"h2"|"h3", text)``, ``("p", text)``, ``("banner", "red"|"yellow"|"green", text)``,
``("list", [text, ...])``, ``("table", headers, rows)`` and ``("img", name, caption)`` where
``name`` is a key of the images dict (PNG bytes). Text is plain (writers escape it).
"""

from __future__ import annotations

from typing import Any

from tokenswarm.analysis.samples import MEDIAN_NEED, prune_short_columns, short_text, shortfall

Block = tuple[Any, ...]


def fmt(v: Any, digits: int = 4) -> str:
    """Compact number formatting; ``None`` -> an em dash."""
    if v is None:
        return "—"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        if v == 0:
            return "0"
        if abs(v) >= 10 ** digits:
            return f"{v:,.0f}"
        return f"{v:.{digits}g}"
    if isinstance(v, list):
        return ", ".join(fmt(x, 3) for x in v)
    return str(v)


def guarded(row: Any, column: str) -> str:
    """A percentile cell: ``n<N`` when the row's sample count cannot support it (never a number), else fmt.

    The rule is :mod:`analysis.samples` (n >= 10 / (1 - q)), the same for every table.
    """
    short = shortfall(row, column)
    return short_text(short[1]) if short is not None else fmt(row.get(column))


def point_cell(point: dict[str, Any], column: str) -> str:
    """A curve point's value, or ``n<N`` when it was left out for too few samples."""
    need = next((c["samples_needed_count"] for c in point.get("short_columns") or [] if c["column"] == column), None)
    return short_text(need) if need is not None else fmt(point.get(column))


def ratio_cell(row: dict[str, Any], name: str) -> str:
    """A comparison ratio with its interval, or ``n<N`` when either run had too few samples."""
    if name.endswith("_speedup"):
        if row.get("speedup_insufficient"):
            return short_text(MEDIAN_NEED)
    elif row.get(f"{name}_insufficient"):
        return short_text(int(row[f"{name}_needed_count"]))
    return ci(row.get(f"{name}_ratio"), row.get(f"{name}_ci_low_ratio"), row.get(f"{name}_ci_high_ratio"))


def judged_table(headers: list[str], rows: list[list[str]], keep: int = 1) -> list["Block"]:
    """A table block without the columns that are too short in every row, and the note saying so."""
    headers, rows, note = prune_short_columns(headers, rows, keep)
    out: list[Block] = [("table", headers, rows)]
    if note:
        out.append(("p", note))
    return out


def pct(v: float | None, digits: int = 2) -> str:
    """A share as a percentage."""
    return "—" if v is None else f"{100.0 * v:.{digits}f}%"


def ci(point: float | None, lo: float | None, hi: float | None) -> str:
    """``1.23x [1.10, 1.35]``."""
    if point is None:
        return "—"
    if lo is None or hi is None:
        return f"{point:.3f}x"
    return f"{point:.3f}x [{lo:.3f}, {hi:.3f}]"
