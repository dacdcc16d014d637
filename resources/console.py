"""The console logger every job uses: Dagster's own, at the level `EVAL_PIPELINE_LOG_LEVEL`
sets (default INFO). At INFO a CI log holds the run's own lines, warnings, errors and the
verdict's summary table (about 40 lines on the demo); DEBUG adds Dagster's event lines (step
starts, inputs, outputs: over 400 on the demo). The UI's event log keeps every event either way."""

import os

from dagster import LoggerDefinition, colored_console_logger

LOG_LEVEL_VARIABLE = "EVAL_PIPELINE_LOG_LEVEL"
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def console_level() -> str:
    """The environment's level (default INFO), refused with the variable's name when it is not
    one of LEVELS (read when the definitions load, before any run)."""
    level = os.environ.get(LOG_LEVEL_VARIABLE, "INFO").strip().upper() or "INFO"
    if level not in LEVELS:
        raise ValueError(f"{LOG_LEVEL_VARIABLE}={os.environ[LOG_LEVEL_VARIABLE]!r} is not a log level; "
                         f"use one of {', '.join(LEVELS)}")
    return level


def console_logger() -> LoggerDefinition:
    """Dagster's coloured console logger at `console_level()`."""
    return colored_console_logger.configured({"log_level": console_level(), "name": "dagster"})
