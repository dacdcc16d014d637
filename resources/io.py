"""An IO manager that keeps one Parquet file per (asset, partition), so a single-run backfill
of the whole sweep and a single-variant re-run read and write the same files."""

from pathlib import Path

import pandas as pd
from dagster import ConfigurableIOManager, InputContext, OutputContext


class VariantParquetIOManager(ConfigurableIOManager):
    base_dir: str

    def _path(self, asset_key, partition: str) -> Path:
        return Path(self.base_dir) / "/".join(asset_key.path) / f"{partition}.parquet"

    def handle_output(self, context: OutputContext, obj: dict[str, pd.DataFrame]) -> None:
        keys = context.asset_partition_keys if context.has_asset_partitions else []
        if set(obj) != set(keys):
            raise ValueError(f"output has partitions {sorted(obj)}, the run asked for {sorted(keys)}")
        for key, frame in obj.items():
            path = self._path(context.asset_key, key)
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".parquet.tmp")
            frame.to_parquet(tmp, index=False)
            tmp.replace(path)  # a reader never sees half a file
        context.add_output_metadata({"partitions_written": len(obj)})

    def load_input(self, context: InputContext) -> dict[str, pd.DataFrame]:
        """The partitions the downstream step asked for that exist; a missing one is left out
        here and named by the consumer (the report lists variants with no results)."""
        asset_key = context.upstream_output.asset_key if context.upstream_output else context.asset_key
        keys = context.asset_partition_keys if context.has_asset_partitions else []
        out = {}
        for key in keys:
            path = self._path(asset_key, key)
            if path.exists():
                out[key] = pd.read_parquet(path)
        return out
