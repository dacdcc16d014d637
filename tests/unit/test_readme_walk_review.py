"""A review of 01fea4f (the headline), 7745e49 (the console's accept command) and fc265f6 (the
history and vectors command lines), themselves made after a hostile walk through the README. Each
test was a strict xfail naming its hole; each hole is closed (the commit after this file's first),
and the tests hold it:

- the headline said "No metric moved since the previous run" beside a gate that failed on hit@5 (it
  measures nDCG@10 only) or a failed answer gate: it now says "nDCG@10 unchanged";
- a limited run was offered an accept command that `accept` refuses;
- the command was not quoted for a shell: an index x variant key's `|` piped it into another;
- a URL pasted as `--database` had its password echoed by two refusals;
- a state dir whose pgdata another user owns was a PermissionError traceback."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from eval_pipeline.gates.retrieval import GateResult
from tests.unit.reporting.test_headline import _verdict

SECRET = "s3cr3t-pw-rev15"
PASTED = f"postgresql://alice:{SECRET}@db.example.invalid:5432/eval"


def test_headline_says_nothing_moved_next_to_a_gate_that_failed_on_a_moved_metric():
    """Every variant compared and nDCG@10 unchanged, `dense`'s gate failed on hit@5 (the headline
    reads the gates' states and nDCG@10, not the gates' rows)."""
    from eval_pipeline.reporting.report import headline

    verdict = _verdict({"dense": ("comparable", False), "bm25": ("comparable", True)},
                       {"dense": 0.70, "bm25": 0.73}, {"dense": 0.70, "bm25": 0.73})
    text = headline(verdict, "dense")
    assert "Gate FAILED for `dense`" in text
    assert "No metric moved" not in text, text


def test_headline_says_nothing_moved_next_to_a_failed_answer_gate():
    from eval_pipeline.reporting.report import headline
    from eval_pipeline.verdict.answers import AnswerVerdict

    dropped = GateResult(False, "comparable", [], "pass rate -0.3")
    answers = AnswerVerdict(True, "", gates={"dense": {"static": dropped}})
    verdict = _verdict({"dense": ("comparable", True), "bm25": ("comparable", True)}, {"dense": 0.70, "bm25": 0.73},
                       {"dense": 0.70, "bm25": 0.73}, answers=answers)
    text = headline(verdict, "dense")
    assert "answer gate FAILED for `dense`" in text
    assert "No metric moved" not in text, text


def test_a_limited_run_is_not_offered_an_accept_command():
    from eval_pipeline.reporting.console import console_summary
    from eval_pipeline.verdict.retrieval import RunVerdict

    summary = pd.DataFrame([{"variant": "hybrid", "ndcg@10": 0.7, "hit@5": 0.8, "mrr": 0.6}])
    gate = GateResult(False, "comparable", [{"metric": "hit@5", "actual": 0.8, "yardstick": 0.9, "delta": -0.1,
                                             "tolerance": 0.05, "passed": False}], "failed")
    verdict = RunVerdict(summary, pd.DataFrame(), pd.DataFrame(), gates={"hybrid": gate}, limited=True,
                         run_id="0123456789abcdef0123456789abcdef")
    text = console_summary(verdict)
    assert "(limited: not a baseline)" in text
    assert "history accept" not in text, text


def test_runs_on_an_empty_history_does_not_echo_a_pasted_url(monkeypatch, capsys):
    from eval_pipeline.history import __main__ as cli

    monkeypatch.setenv("REV15_URL", "postgresql://nowhere.invalid/x")
    monkeypatch.setattr(cli, "recent_runs", lambda *a, **k: [])
    assert cli.main(["--url-env", "REV15_URL", "--database", PASTED, "runs"]) == 0
    err = capsys.readouterr().err
    assert "no run recorded in eval_runs" in err
    assert SECRET not in err, err


def test_the_missing_database_refusal_does_not_echo_a_pasted_url(monkeypatch, tmp_path):
    from eval_pipeline.store import database

    (tmp_path / "pgdata").mkdir()
    (tmp_path / "pgdata" / "PG_VERSION").write_text("16\n")

    class Server:
        def __init__(self, state_dir):
            self.state_dir = Path(state_dir)
            self.pgdata = self.state_dir / "pgdata"

        def uri(self, database="postgres"):
            return "postgresql://localhost/postgres"

    class Conn:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def execute(self, *a, **k):
            return SimpleNamespace(fetchone=lambda: None)

    monkeypatch.setattr(database, "EmbeddedPostgres", Server)
    monkeypatch.setattr(database, "connect", lambda *a, **k: Conn())
    with pytest.raises(database.MissingDatabase) as raised:
        database._existing_embedded_database(tmp_path, PASTED)
    assert "--database" in str(raised.value) and "is not a database name" in str(raised.value)
    assert SECRET not in str(raised.value), str(raised.value)


def test_an_unreadable_state_dir_is_a_refusal_not_a_traceback(tmp_path, monkeypatch):
    from eval_pipeline.store import database

    (tmp_path / "pgdata").mkdir()
    (tmp_path / "pgdata" / "PG_VERSION").write_text("16\n")
    real_stat = Path.stat

    def stat(self, *a, **k):  # what a non-owner sees under a 0700 pgdata (root bypasses it, so emulated)
        if self.name == "PG_VERSION":
            raise PermissionError(13, "Permission denied", str(self))
        return real_stat(self, *a, **k)

    monkeypatch.setattr(Path, "stat", stat)
    with pytest.raises(database.MissingDatabase, match="cannot be read by this user"):
        database._existing_embedded_database(tmp_path, "eval")


def test_the_printed_accept_command_survives_the_shell_for_an_index_variant_pair(tmp_path):
    import subprocess

    from eval_pipeline.config.models import pair_key
    from eval_pipeline.verdict.retrieval import RunVerdict

    key = pair_key("minilm-w150-o20", "hybrid+mmr")
    verdict = RunVerdict(pd.DataFrame(), pd.DataFrame(), pd.DataFrame(),
                         gates={key: GateResult(False, "comparable", [], "failed")}, run_id="r1")
    command = verdict.accept_command
    echo = command.replace("python -m eval_pipeline.history accept", "printf '%s\\n'")
    out = subprocess.run(["bash", "-c", echo], capture_output=True, text=True, cwd=tmp_path, timeout=30)
    assert out.stdout.splitlines() == ["r1", "--variant", key], (command, out.stdout, out.stderr)
