"""What the run asks for, read in its first step: another asset's settings and the assets it
materializes (so a preflight checks only what this run will do)."""

from dagster import AssetExecutionContext, Config


def op_config(context: AssetExecutionContext, op: str, cls: type[Config]) -> Config:
    """The run config's settings of another asset (as the run will see them)."""
    return cls(**(((context.run.run_config.get("ops") or {}).get(op) or {}).get("config") or {}))


def selected_assets(context: AssetExecutionContext) -> frozenset:
    """The assets this run materializes: the run's selection, else (a whole job, or
    `materialize()`, whose runs record an empty selection) every asset of the run's job."""
    return frozenset(context.run.asset_selection or context.job_def.asset_layer.selected_asset_keys)
