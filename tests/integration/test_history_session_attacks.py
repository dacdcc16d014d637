"""Attacks on the verdict's shared history connection (`measurements.session`, 717b2fe).

Sharing must change no answer the verdict gets: whatever a lookup on its own connection would
refuse (a damaged history), a lookup on the session's connection must refuse too, however long
the session has been open (a verdict's paired rankings run for minutes between its lookups).
"""

from __future__ import annotations

import psycopg
import pytest

from eval_pipeline.history import measurements
from eval_pipeline.history.answers import previous_answer_run, record_answer_run
from eval_pipeline.history.runs import table_names
from eval_pipeline.store.database import DatabaseError
from tests.integration.test_answer_history import key_of, row
from tests.integration.test_history import prefix, provenance, record  # noqa: F401  (prefix: the fixture)

pytestmark = pytest.mark.integration


def _drop_runs_table(uri: str, table_prefix: str) -> None:
    """Another process damages the history: its runs table is gone, its measurements remain."""
    with psycopg.connect(uri, autocommit=True) as admin:
        admin.execute(f'DROP TABLE "{table_names(table_prefix)["runs"]}" CASCADE')


def test_a_history_damaged_during_a_session_is_refused_as_on_its_own_connection(pg_uri, prefix):  # noqa: F811
    record(pg_uri, prefix, "run-1", prov=provenance())
    record_answer_run(pg_uri, "run-1", [row()], prefix=prefix)
    key = key_of(row())
    with measurements.session():
        assert previous_answer_run(pg_uri, **key, prefix=prefix)["run_id"] == "run-1"
        _drop_runs_table(pg_uri, prefix)  # e.g. while the verdict ranks a paired reference
        with pytest.raises(DatabaseError, match="damaged"):
            previous_answer_run(pg_uri, **key, prefix=prefix)  # the session still trusts its first look
    with pytest.raises(DatabaseError, match="damaged"):  # control: on its own connection it is refused
        previous_answer_run(pg_uri, **key, prefix=prefix)




def test_a_damaged_history_is_refused_on_its_own_connection(pg_uri, prefix):  # noqa: F811
    """The control of the test above: without a session, the same damage is refused."""
    record(pg_uri, prefix, "run-1", prov=provenance())
    record_answer_run(pg_uri, "run-1", [row()], prefix=prefix)
    _drop_runs_table(pg_uri, prefix)
    with pytest.raises(DatabaseError, match="damaged"):
        previous_answer_run(pg_uri, **key_of(row()), prefix=prefix)


def test_a_replaced_connection_leaves_no_trust_to_a_new_one(pg_uri, prefix, monkeypatch):  # noqa: F811
    """The session's memo of "this history is current" was keyed by ``id(conn)`` and kept the ids
    of connections it had replaced: ids are unique only among live objects, so a new connection
    (to another database, or another schema) could be given a freed one's id and inherit the
    belief (its absence, damage and upgrade never checked). The memo is gone: every lookup asks.
    CPython's id reuse is simulated: every connection is given the same id."""
    import builtins

    record(pg_uri, prefix, "run-1", prov=provenance())
    record_answer_run(pg_uri, "run-1", [row()], prefix=prefix)
    key = key_of(row())
    schema = f"{prefix}_other"
    other_uri = f"{pg_uri}&options=-csearch_path%3D{schema}"
    with psycopg.connect(pg_uri, autocommit=True) as admin:
        admin.execute(f'CREATE SCHEMA "{schema}"')
    monkeypatch.setattr(measurements, "id", lambda o: 1 if isinstance(o, psycopg.Connection) else builtins.id(o),
                        raising=False)
    try:
        with measurements.session():
            assert previous_answer_run(pg_uri, **key, prefix=prefix)["run_id"] == "run-1"
            measurements._SESSION.get()[pg_uri].close()  # the server ended it: replaced, and freed
            assert previous_answer_run(pg_uri, **key, prefix=prefix)["run_id"] == "run-1"
            # the other schema has no history of this prefix: a first look there must say so
            assert previous_answer_run(other_uri, **key, prefix=prefix) is None
    finally:
        with psycopg.connect(pg_uri, autocommit=True) as admin:
            admin.execute(f'DROP SCHEMA "{schema}" CASCADE')


def test_a_session_idle_past_the_servers_idle_timeout_still_answers(pg_uri, prefix):  # noqa: F811
    """A verdict's paired rankings run for minutes between two lookups; a server (or a pooler, or
    a NAT) that ends idle sessions ends the shared connection meanwhile. On a connection each,
    the next lookup would answer; on the shared one it raises, and the verdict takes the
    history for unreadable: every later variant fails (not compared), every answer lookup
    raises. Sharing must not turn a server's idle policy into a failed verdict."""
    import time

    from eval_pipeline.history.runs import previous_run

    record(pg_uri, prefix, "run-1", prov=provenance())
    idle_uri = f"{pg_uri}&options=-cidle_session_timeout%3D300"
    assert previous_run(idle_uri, variant="a", prefix=prefix)["run_id"] == "run-1"
    time.sleep(0.8)
    assert previous_run(idle_uri, variant="a", prefix=prefix)["run_id"] == "run-1"  # control: no session
    with measurements.session():
        assert previous_run(idle_uri, variant="a", prefix=prefix)["run_id"] == "run-1"
        time.sleep(0.8)  # a paired ranking
        assert previous_run(idle_uri, variant="a", prefix=prefix)["run_id"] == "run-1"
