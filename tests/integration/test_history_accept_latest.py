"""`python -m eval_pipeline.history accept latest` takes the newest recorded run, as the
accept_reference job's `run_id: latest` does (one resolution: history.runs.resolve_run_id)."""

from __future__ import annotations

import uuid

import pytest

from eval_pipeline.history.__main__ import main

pytestmark = pytest.mark.integration


def test_accept_latest_on_an_empty_history_says_so(pg_uri, monkeypatch, capsys):
    prefix = f"latest{uuid.uuid4().hex[:8]}"  # a history of its own in the session's database
    monkeypatch.setenv("TEST_HISTORY_URL", pg_uri)
    assert main(["--url-env", "TEST_HISTORY_URL", "--prefix", prefix, "accept", "latest"]) == 2
    assert "no recorded run to accept as 'latest': the history is empty" in capsys.readouterr().err
