"""IO managers that keep every run's outputs apart and write atomically.

Two runs of the job at once (a nightly run and a manual one) must not read each other's
half-written files, nor each other's results when their configurations differ.  So every
output is written under its run id (temp file, then rename), and an input is read from the
current run when this run produced it, otherwise from the run of the asset's (partition's)
latest materialization, looked up in the instance.
"""

import io
import pickle
from pathlib import Path
from typing import Any

import pandas as pd
from dagster import AssetKey, AssetRecordsFilter, ConfigurableIOManager, InputContext, OutputContext

from eval_pipeline.common.atomic import atomic_write_bytes

KEEP_RUNS = 5  # older run files of an asset (partition) are pruned


def _asset_dir(base_dir: str, asset_key: AssetKey, partition: str | None) -> Path:
    folder = Path(base_dir).joinpath(*asset_key.path)
    return folder / partition if partition is not None else folder


def _prune(folder: Path, suffix: str) -> None:
    files = sorted(folder.glob(f"*{suffix}"), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in files[KEEP_RUNS:]:
        old.unlink(missing_ok=True)


def _latest_run_id(context: InputContext, asset_key: AssetKey, partition: str | None) -> str | None:
    records = context.instance.fetch_materializations(
        AssetRecordsFilter(asset_key=asset_key, asset_partitions=[partition] if partition is not None else None),
        limit=1,
    ).records
    return records[0].run_id if records else None


def _producing_run_id(context: InputContext) -> str | None:
    """The run that produced the upstream output in this run's plan: this run, or the parent
    run when this one re-executes a failed run (its outputs, never another run's)."""
    try:
        return context.upstream_output.run_id if context.upstream_output is not None else None
    except Exception:  # an upstream asset outside this run's plan has no producing step
        return None


def _input_path(context: InputContext, base_dir: str, partition: str | None, suffix: str) -> Path | None:
    """This run's output; else the output of the run that produced it in this run's lineage (a
    re-execution from failure reads its parent run's, so a failed verdict is not replaced by
    another run's that passed); else, for an asset this run does not materialize, its latest
    materialization's."""
    asset_key = context.upstream_output.asset_key if context.upstream_output else context.asset_key
    folder = _asset_dir(base_dir, asset_key, partition)
    for run_id in (context.step_context.run_id, _producing_run_id(context)):
        if run_id is not None and (folder / f"{run_id}{suffix}").exists():
            return folder / f"{run_id}{suffix}"
    run_id = _latest_run_id(context, asset_key, partition)
    if run_id is not None and (folder / f"{run_id}{suffix}").exists():
        return folder / f"{run_id}{suffix}"
    return None


def _step_output_path(base_dir: str, context: OutputContext) -> Path:
    """Where an op output inside a graph-backed asset goes (ranked_results' batches): under
    `_steps/`, by step key, output name, dynamic mapping key (each of plan_ranking's batches is
    one output of one step) and run."""
    folder = Path(base_dir) / "_steps" / context.step_key / context.name
    if context.mapping_key:
        folder = folder / context.mapping_key
    return folder / f"{context.run_id}.pkl"


class RunScopedPickleIOManager(ConfigurableIOManager):
    """Unpartitioned assets, pickled, one file per run; also the op outputs between the steps
    of a graph-backed asset, which a multiprocess run passes from one process to another."""

    base_dir: str

    def handle_output(self, context: OutputContext, obj: Any) -> None:
        if context.has_asset_key:
            path = _asset_dir(self.base_dir, context.asset_key, None) / f"{context.run_id}.pkl"
        else:
            path = _step_output_path(self.base_dir, context)
        atomic_write_bytes(path, pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))
        _prune(path.parent, ".pkl")

    def load_input(self, context: InputContext) -> Any:
        upstream = context.upstream_output
        if upstream is not None and not upstream.has_asset_key:
            # the producing run: this one, or the parent run when re-executing from a failure
            path = _step_output_path(self.base_dir, upstream)
            if not path.exists():
                raise FileNotFoundError(f"no stored output {upstream.name!r} ({upstream.mapping_key or 'unmapped'}) "
                                        f"of step {upstream.step_key!r} in run {upstream.run_id}")
            return pickle.loads(path.read_bytes())
        path = _input_path(context, self.base_dir, None, ".pkl")
        if path is None:
            key = context.upstream_output.asset_key if context.upstream_output else context.asset_key
            raise FileNotFoundError(f"no stored output for asset {key.to_user_string()}; materialize it first")
        return pickle.loads(path.read_bytes())


class VariantParquetIOManager(ConfigurableIOManager):
    """Partitioned assets whose output is {partition key: DataFrame}: one Parquet file per
    (partition, run), so a single-run backfill of the whole sweep and a single-variant re-run
    read and write the same layout."""

    base_dir: str

    def handle_output(self, context: OutputContext, obj: dict[str, pd.DataFrame]) -> None:
        keys = context.asset_partition_keys if context.has_asset_partitions else []
        if set(obj) != set(keys):
            raise ValueError(f"output has partitions {sorted(obj)}, the run asked for {sorted(keys)}")
        for key, frame in obj.items():
            path = _asset_dir(self.base_dir, context.asset_key, key) / f"{context.run_id}.parquet"
            buffer = io.BytesIO()
            frame.to_parquet(buffer, index=False)
            atomic_write_bytes(path, buffer.getvalue())
            _prune(path.parent, ".parquet")
        context.add_output_metadata({"partitions_written": len(obj)})

    def load_input(self, context: InputContext) -> dict[str, pd.DataFrame]:
        """The partitions the downstream step asked for that exist; a missing one is left out
        here and named by the consumer (the report lists variants with no results)."""
        keys = context.asset_partition_keys if context.has_asset_partitions else []
        out = {}
        for key in keys:
            path = _input_path(context, self.base_dir, key, ".parquet")
            if path is not None:
                out[key] = pd.read_parquet(path)
        return out
