"""Library metadata (plain values from eval_pipeline.run_assembly) as Dagster metadata values."""

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dagster import MetadataValue, TableColumn, TableRecord, TableSchema

from assets.columns import describe
from eval_pipeline.common.metadata import Markdown, Records, RunLink, Table


def to_metadata(values: Mapping[str, Any]) -> dict[str, Any]:
    """Markdown -> rendered markdown, Records -> a table the UI shows in place, RunLink -> a link to
    the run ("none" when empty), Table ->
    `dagster/row_count` and `dagster/column_schema` (each column's type and description from
    assets/columns.py, its pandas dtype when nothing there says),
    Path -> a path, dict or list -> JSON; numbers and text stay as they are (numbers are
    plotted over time on the asset page)."""
    out: dict[str, Any] = {}
    for name, value in values.items():
        if isinstance(value, Table):
            out["dagster/row_count"] = value.row_count
            out["dagster/column_schema"] = column_schema(value)
        elif isinstance(value, Records):
            out[name] = MetadataValue.table(
                [TableRecord(dict(zip(value.columns, row))) for row in value.rows],
                schema=TableSchema(columns=[TableColumn(c, "string") for c in value.columns]))
        elif isinstance(value, Markdown):
            out[name] = MetadataValue.md(str(value))
        elif isinstance(value, RunLink):
            out[name] = MetadataValue.dagster_run(str(value)) if value else "none"
        elif isinstance(value, Path):
            out[name] = MetadataValue.path(str(value))
        elif isinstance(value, (dict, list)):
            out[name] = MetadataValue.json(value)
        else:
            out[name] = value
    return out


def column_schema(table: Table) -> TableSchema:
    """The table's columns as the UI lists them: a reader's type and a description per column."""
    columns = []
    for name, dtype in table.columns:
        known = describe(name)
        columns.append(TableColumn(name, known.type, known.description) if known else TableColumn(name, dtype))
    return TableSchema(columns=columns)


def add_partition_metadata(context: Any, key: str, values: Mapping[str, Any]) -> None:
    """`values` as the metadata of partition `key`'s materialization, led by `partition` (its key):
    the asset's Overview shows the metadata of the partition written last, and its numbers must
    not read as the asset's, nor as another variant's."""
    context.add_asset_metadata(to_metadata({"partition": key, **values}), partition_key=key)
