"""A verdict's history lookups share one connection (`measurements.session`), and say the same.

A verdict asks the history about 180 questions; on a connection each, that was most of a warm
demo run's verdict step (bench/history_session.py: 1.8 s against 0.2 s shared). Sharing must
change no answer: the same lookups inside and outside a session return the same rows, a write
inside one is committed, and a connection the server dropped while it sat idle is replaced
before a lookup meets it (tests/integration/test_history_session_attacks.py: a review's
findings, and a damaged history refused inside a session as outside).
"""

from __future__ import annotations

import psycopg
import pytest

from eval_pipeline.history import measurements
from eval_pipeline.history.answers import previous_answer_run, record_answer_run
from eval_pipeline.history.runs import previous_run, project_history, recorded_run_of, reference_run
from tests.db_wire import sent_statements
from tests.integration.test_answer_history import key_of, row
from tests.integration.test_history import prefix, provenance, record  # noqa: F401  (prefix: the fixture)
from tests.unit.verdict.test_verdict_attacks_eighth import answers, judge  # noqa: F401  (fixtures)

pytestmark = pytest.mark.integration


def _lookups(uri: str, table_prefix: str) -> list:
    return [previous_run(uri, variant="a", prefix=table_prefix),
            reference_run(uri, variant="a", identity=None, prefix=table_prefix),
            recorded_run_of(uri, variant="b", prefix=table_prefix), project_history(uri, prefix=table_prefix)["known"],
            previous_answer_run(uri, **key_of(row()), prefix=table_prefix)]


def _backends(uri: str) -> int:
    with psycopg.connect(uri) as conn:
        return conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                            "AND pid <> pg_backend_pid()").fetchone()[0]


def test_a_session_answers_as_separate_connections_do_on_one_connection(pg_uri, prefix, monkeypatch):  # noqa: F811
    record(pg_uri, prefix, "run-1", prov=provenance())
    record_answer_run(pg_uri, "run-1", [row()], prefix=prefix)
    alone = _lookups(pg_uri, prefix)
    opened = []
    real = measurements.connect
    monkeypatch.setattr(measurements, "connect", lambda *a, **k: opened.append(a) or real(*a, **k))
    with measurements.session():
        shared = _lookups(pg_uri, prefix)
        with measurements.session():  # nested: the same session
            shared_again = _lookups(pg_uri, prefix)
    assert shared == alone == shared_again
    assert alone[0]["run_id"] == "run-1" and alone[4]["run_id"] == "run-1"
    assert len(opened) == 1  # ten lookups, one connection


def test_a_write_inside_a_session_is_committed_and_seen(pg_uri, prefix):  # noqa: F811
    with measurements.session():
        assert previous_run(pg_uri, variant="a", prefix=prefix) is None  # no history yet
        record(pg_uri, prefix, "run-1", prov=provenance())  # its own connection and transaction
        assert previous_run(pg_uri, variant="a", prefix=prefix)["run_id"] == "run-1"
    with psycopg.connect(pg_uri) as conn:  # committed: another connection sees it
        assert conn.execute(f"SELECT count(*) FROM {prefix}_measurements").fetchone()[0] == 2


def test_a_connection_the_server_dropped_is_replaced(pg_uri, prefix):  # noqa: F811
    record(pg_uri, prefix, "run-1", prov=provenance())
    before = _backends(pg_uri)
    with measurements.session():
        assert previous_run(pg_uri, variant="a", prefix=prefix)["run_id"] == "run-1"
        with psycopg.connect(pg_uri, autocommit=True) as admin:  # the server ends the session's backend
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() "
                          "AND pid <> pg_backend_pid() AND state = 'idle' AND application_name = ''")
        # checked before reuse: the next lookup gets a new connection, never the dropped one
        assert previous_run(pg_uri, variant="a", prefix=prefix)["run_id"] == "run-1"
    assert _backends(pg_uri) <= before  # closed at the session's end


def test_a_verdict_judged_outside_the_job_shares_one_connection_too(judge, answers, monkeypatch):  # noqa: F811
    """judge_run and judge_answer_run open the session themselves: called by the verdict asset
    (inside its session) or directly, as a script or the tests do, their lookups ask on one
    connection (the path the job takes), not on one connection each (~15 a retrieval verdict)."""
    assert judge("r1", "A", {"v": "good"}).gates["v"].passed  # a first run, recorded
    assert answers("a1", {"bm25": 0.90}).passed
    opened = []
    real = measurements.connect
    monkeypatch.setattr(measurements, "connect", lambda *a, **k: opened.append(a) or real(*a, **k))
    verdict = judge("r2", "A", {"v": "bad"}, record=False)
    assert not verdict.gates["v"].passed and verdict.gates["v"].state == "comparable", verdict.gates["v"].message
    assert len(opened) == 1, len(opened)
    opened.clear()
    gate = answers("a2", {"bm25": 0.70}).gates["bm25"]["deterministic"]
    assert not gate.passed, gate.message
    assert len(opened) == 1, len(opened)


def test_a_lookup_on_the_session_s_connection_asks_no_more_than_it_needs(pg_uri, prefix):  # noqa: F811
    """Against a hosted database every statement is a network round trip, and a verdict asks the
    history about 180 questions: a lookup on the session's connection sends its transaction's BEGIN
    (which meets a connection the server ended, as a ping would), the integrity check, its own
    statements and COMMIT. No separate liveness ping, and where the run being judged starts in the
    history is read inside the statement that needs it, not asked first."""
    record(pg_uri, prefix, "run-1", prov=provenance())
    record(pg_uri, prefix, "run-2", prov=provenance())
    with measurements.session():
        previous_run(pg_uri, variant="a", prefix=prefix)  # the session's connection opened
        with sent_statements() as sent:
            found = previous_run(pg_uri, variant="a", before_run_id="run-2", prefix=prefix)
    assert found["run_id"] == "run-1"  # run-2 itself and what came after it do not count
    assert not [s for s in sent if s.strip() == "SELECT 1"], sent
    assert not [s for s in sent if s.startswith(("SELECT min(seq) FROM", "SELECT seq FROM"))], sent


def test_recording_into_a_history_in_this_shape_checks_it_in_one_statement(pg_uri, prefix):  # noqa: F811
    """Every record asks whether the history is complete, checked for the clock, marked and has its
    placement trigger before it writes: one statement for the four (one round trip, one snapshot),
    and nothing more when the answer is yes. A history lacking one still gets it (the tests of
    measurements' marks and trigger)."""
    record(pg_uri, prefix, "run-1", prov=provenance())
    with sent_statements() as sent:
        record(pg_uri, prefix, "run-2", prov=provenance())
    catalog = [s for s in sent if "pg_constraint" in s or "pg_trigger" in s]
    assert len(catalog) == 1, catalog
    assert previous_run(pg_uri, variant="a", prefix=prefix)["run_id"] == "run-2"
