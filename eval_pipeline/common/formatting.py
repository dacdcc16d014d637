"""How a number reads in a report, a table cell or a gate message: one rule for missing values
(None, NaN and pandas' NA all print as ``MISSING``) and one for digits, so no section prints
``nan`` where another prints ``n/a``.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from eval_pipeline.common.checks import missing

MISSING = "–"


def float_or_none(value: object) -> float | None:
    """A Python float, or None for a missing value (None, NaN, NA) or one that is not a number:
    None is what JSON and SQL call "no value"; a bool is a number here (True -> 1.0)."""
    if missing(value):
        return None
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return None if math.isnan(number) else number


def fmt_number(value: Any, digits: int = 3, *, signed: bool = False) -> str:
    """A float with ``digits`` decimals (and its sign when ``signed``), ``MISSING`` for a missing
    value; anything else (an int, a name) as ``str``."""
    if missing(value):
        return MISSING
    if isinstance(value, float):
        return f"{value:+.{digits}f}" if signed else f"{value:.{digits}f}"
    return str(value)


def markdown_table(df: pd.DataFrame, columns: list[str]) -> str:
    """A GitHub markdown table of ``columns`` (the first left-aligned, the rest right-aligned);
    floats with 3 decimals, missing values as ``MISSING``."""
    header = "| " + " | ".join(columns) + " |"
    rule = "|" + "|".join("---" if c == columns[0] else "---:" for c in columns) + "|"
    # a "|" in a cell (an (index, variant) pair's key) would end the cell: escaped
    rows = ["| " + " | ".join(fmt_number(r[c]).replace("|", "\\|") for c in columns) + " |" for _, r in df.iterrows()]
    return "\n".join([header, rule, *rows])
