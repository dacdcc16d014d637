"""The jobs' console logger (issue #28, item 8): INFO unless EVAL_PIPELINE_LOG_LEVEL says
otherwise, a bad level refused naming the variable. (The line count of a real run at each level
is tests/orchestration/test_console.py.)"""

import pytest
from dagster import LoggerDefinition

from resources.console import LOG_LEVEL_VARIABLE, console_level, console_logger


def test_default_is_info_and_debug_is_a_flag(monkeypatch):
    monkeypatch.delenv(LOG_LEVEL_VARIABLE, raising=False)
    assert console_level() == "INFO"
    monkeypatch.setenv(LOG_LEVEL_VARIABLE, " debug ")
    assert console_level() == "DEBUG"
    assert isinstance(console_logger(), LoggerDefinition)


def test_a_bad_level_names_the_variable(monkeypatch):
    monkeypatch.setenv(LOG_LEVEL_VARIABLE, "LOUD")
    with pytest.raises(ValueError, match=r"EVAL_PIPELINE_LOG_LEVEL='LOUD' is not a log level"):
        console_level()
