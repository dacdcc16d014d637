"""What the run asks for, read in its first step: another asset's settings and the assets it
materializes (so a preflight checks only what this run will do)."""

from pathlib import Path

from dagster import AssetExecutionContext, Config
from dagster._config import process_config

from eval_pipeline.common.state import PROJECT_ROOT, StateDir
from eval_pipeline.reporting.publish import check_results_dir


def op_config(context: AssetExecutionContext, op: str, cls: type[Config]) -> Config:
    """The run config's settings of another asset, as that asset's step will see them: processed
    by Dagster's own rules for the class's schema (defaults filled in, `{env: VAR}` read from the
    environment), not built from the raw mapping, which a setting Dagster takes (`record_history:
    {env: VAR}`) would fail."""
    raw = ((context.run.run_config.get("ops") or {}).get(op) or {}).get("config") or {}
    processed = process_config(cls.to_config_schema().config_type, raw)
    if not processed.success:  # Dagster refused such a run before its first step: not expected here
        raise ValueError(f"ops.{op}.config: {'; '.join(e.message for e in processed.errors or [])}")
    return cls(**processed.value)


def selected_assets(context: AssetExecutionContext) -> frozenset:
    """The assets this run materializes: the run's selection, else (a whole job, or
    `materialize()`, whose runs record an empty selection) every asset of the run's job."""
    return frozenset(context.run.asset_selection or context.job_def.asset_layer.selected_asset_keys)


def safe_results_dir(context: AssetExecutionContext, results_dir: str, state: StateDir) -> Path:
    """`report.results_dir`, refused when publishing into it (a swap of the whole folder) could
    destroy the state dir, Dagster's storage, the checkout or the home folder: checked by the
    run's first step, before anything is embedded, and by the report before it publishes."""
    return check_results_dir(results_dir, {
        "the state dir (the embedded Postgres's data, the caches, the run history)": (state.root, "inside"),
        "Dagster's storage (step outputs)": (Path(context.instance.storage_directory()), "inside"),
        "the checkout (the code)": (PROJECT_ROOT, "holds"),
        "the home folder": (Path.home(), "holds"),
    }, setting="ops.report.config.results_dir")
