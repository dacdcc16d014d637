"""Metadata as plain values (no Dagster here): `Markdown` marks text to render, `Table` a
DataFrame's rows and column schema, `Records` a small table's cells; the Dagster layer turns
them into its own types."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd

from eval_pipeline.common.checks import finite_number


class Markdown(str):
    """Metadata text to be shown as rendered markdown."""


class RunLink(str):
    """A run id in metadata, shown as a link to the run."""


@dataclass(frozen=True)
class Table:
    """Metadata describing a DataFrame: its rows and its columns' names and dtypes."""

    row_count: int
    columns: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Records:
    """A small table of text cells to show in place on an asset's page (a long markdown entry
    opens in a dialog instead): its column names and its rows, each a tuple in column order."""

    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


def frame_metadata(frame: pd.DataFrame) -> Table:
    return Table(len(frame), tuple((str(c), str(t)) for c, t in frame.dtypes.items()))


def number(value: Any) -> float | None:
    value = float(value)
    return None if value != value else value  # NaN (no answerable question): no point to plot


SHOWN_DECIMALS = 4


def shown_floats(values: Mapping[str, Any]) -> dict[str, Any]:
    """`values` with each finite float rounded as the UI shows a number (`SHOWN_DECIMALS`); any
    other value as it is, NaN included: an undefined number stays a gap in its plotted series,
    where `shown_number` would give None."""
    return {k: round(v, SHOWN_DECIMALS) if isinstance(v, float) and math.isfinite(v) else v
            for k, v in values.items()}


def shown_number(value: Any) -> float | None:
    """A number as the UI shows and plots it: 4 decimals (0.9778, not 0.9777777777777777); None
    when missing, NaN or not finite (no point to plot)."""
    value = finite_number(value)
    return None if value is None else round(value, SHOWN_DECIMALS)


def shown_number_or_nan(value: Any) -> float:
    """`shown_number` for an entry that is always there: NaN where it has no number."""
    shown = shown_number(value)
    return float("nan") if shown is None else shown
