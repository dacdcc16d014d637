"""Which database the command-line tools (`python -m eval_pipeline.history`, `python -m
eval_pipeline.store.vectors`) open: one rule for both, the jobs' own. A URL is read from the
environment only (a password on the command line is in `ps` and the shell's history):
`--url-env NAME`, else EVAL_PIPELINE_DATABASE_URL when EVAL_PIPELINE_DB=external (as the jobs
take it, definitions.py), else the state dir's embedded server."""

from __future__ import annotations

import pytest

from eval_pipeline.store.database import (
    DATABASE_KIND_ENV,
    DATABASE_URL_ENV,
    MissingDatabase,
    command_line_database_url,
)

SECRET_URL = "postgresql://app:s3cret-pw@db.internal:5432/eval"


def _embedded(state_dir, database):
    return f"embedded:{state_dir}:{database}"


def test_a_named_variable_is_read_and_its_absence_is_named_without_any_url(monkeypatch, tmp_path):
    monkeypatch.setenv("MY_DB", SECRET_URL)
    assert command_line_database_url("MY_DB", tmp_path, "eval", embedded=_embedded) == SECRET_URL
    monkeypatch.delenv("MY_DB")
    with pytest.raises(MissingDatabase, match="MY_DB is not set"):
        command_line_database_url("MY_DB", tmp_path, "eval", embedded=_embedded)


def test_an_external_database_is_the_jobs_one(monkeypatch, tmp_path):
    monkeypatch.setenv(DATABASE_KIND_ENV, "external")
    monkeypatch.setenv(DATABASE_URL_ENV, SECRET_URL)
    assert command_line_database_url(None, tmp_path, "eval", embedded=_embedded) == SECRET_URL
    monkeypatch.delenv(DATABASE_URL_ENV)
    with pytest.raises(MissingDatabase, match=f"{DATABASE_URL_ENV} is not set"):
        command_line_database_url(None, tmp_path, "eval", embedded=_embedded)


def test_otherwise_the_state_dirs_embedded_server(monkeypatch, tmp_path):
    monkeypatch.delenv(DATABASE_KIND_ENV, raising=False)
    monkeypatch.setenv(DATABASE_URL_ENV, SECRET_URL)  # set, but the jobs would not use it either
    assert command_line_database_url(None, tmp_path, "eval", embedded=_embedded) == f"embedded:{tmp_path}:eval"


def test_a_database_the_tools_cannot_reach_is_named(monkeypatch, tmp_path):
    """testcontainers: the jobs' container lives only during a run."""
    monkeypatch.setenv(DATABASE_KIND_ENV, "testcontainers")
    with pytest.raises(MissingDatabase, match="--url-env"):
        command_line_database_url(None, tmp_path, "eval", embedded=_embedded)


@pytest.mark.parametrize("module", ["eval_pipeline.history.__main__", "eval_pipeline.store.vectors"])
def test_neither_tool_takes_a_url_on_its_command_line(module, capsys):
    """Refused, and the refusal, which echoes the arguments it does not know, shows no password."""
    import importlib

    main = importlib.import_module(module).main
    with pytest.raises(SystemExit):
        main(["--database-url", SECRET_URL, "list"])
    assert "s3cret" not in capsys.readouterr().err


def test_the_vectors_tool_reads_a_named_variable(monkeypatch, capsys):
    from eval_pipeline.store.vectors import main

    monkeypatch.setenv("MY_DB", "postgresql://nowhere.invalid/x")
    assert main(["--url-env", "MY_DB", "prune", "--older-than", "soon"]) == 2  # refused before connecting
    assert "--older-than 'soon'" in capsys.readouterr().err


def test_a_state_dir_no_job_has_used_is_refused_and_left_as_it_was(tmp_path, monkeypatch):
    """A mistyped --state-dir must not read as an empty history (every later question answered
    "no runs"), nor start a server and create a database there: the folder is named, and nothing
    is made in it."""
    monkeypatch.delenv(DATABASE_KIND_ENV, raising=False)
    missing = tmp_path / "typo_state"
    with pytest.raises(MissingDatabase, match=rf"{missing}: no embedded database here") as raised:
        command_line_database_url(None, missing, "eval")
    assert "--state-dir" in str(raised.value)
    assert not missing.exists()
    (tmp_path / "empty").mkdir()
    with pytest.raises(MissingDatabase, match="no embedded database here"):
        command_line_database_url(None, tmp_path / "empty", "eval")
    assert list((tmp_path / "empty").iterdir()) == []
