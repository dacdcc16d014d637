"""The history's command line (`python -m eval_pipeline.history`): what it refuses before it opens
any database."""

from __future__ import annotations

import pytest

from eval_pipeline.history.__main__ import main


@pytest.mark.parametrize("limit", ["-3", "0"])
def test_runs_limit_must_be_a_positive_count(limit, capsys, tmp_path):
    """`runs --limit -3` was a traceback from the database (LIMIT must not be negative), `--limit 0`
    an empty list: both are the parser's error, exit 2, before any database is opened."""
    with pytest.raises(SystemExit) as raised:
        main(["--state-dir", str(tmp_path / "never_made"), "runs", "--limit", limit])
    assert raised.value.code == 2
    assert f"--limit: must be a whole number of runs, 1 or more, got {limit!r}" in capsys.readouterr().err
    assert not (tmp_path / "never_made").exists()


def test_a_state_dir_no_job_used_is_named_and_not_made(tmp_path, capsys):
    """An `error:` line and exit 2, as every refusal of this command; nothing made in the folder."""
    assert main(["--state-dir", str(tmp_path / "typo"), "runs"]) == 2
    assert capsys.readouterr().err.startswith(f"error: {tmp_path / 'typo'}: no embedded database here")
    assert not (tmp_path / "typo").exists()
