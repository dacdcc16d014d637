"""A history placed without a check of its clock is distrusted once, whichever version placed it.

Acceptances recorded before positions existed are placed by their stamps once
(``measurements._place_acceptances``); from e89ab96 on, that placement also checks the old stamps
for a clock that stepped (``_clock_stepped``) and, if it did, trusts no measurement and no
acceptance recorded so far (every variant not compared until a run is accepted). The versions
87cb394..e89ab96^ placed without that check, and the placement runs only once (when the log has
no ``position``): a history they placed was never checked (the twenty-seventh review's hole 4).

So this version marks a history when its placement checked the clock (a ``CHECK (true)``
constraint named ``<log>_clock_checked``: ``measurements.CLOCK_CHECKED_SQL``). A history placed
without the mark cannot be checked afterwards (what showed a step may be gone: the twenty-eighth
review's hole 3), so on first contact everything it recorded is distrusted, once, and it is
marked: distrusted again, every acceptance made since would be taken back. A role that cannot
leave the mark (not the tables' owner, a read-only connection) cannot read such a history until
the owner has contacted it (the lookup fails closed); one with nothing recorded it reads, warned.

Legacy histories are written with the frozen DDL of tests/integration/test_history_upgrade.py and
the twenty-sixth and twenty-seventh reviews' builders; an older version's placement is simulated by
placing with ``_clock_stepped`` forced False and no mark, exactly what 87cb394..e89ab96^ left.
Against the session Postgres (marked ``integration``).
"""

from __future__ import annotations

import uuid

import psycopg
import pytest

from eval_pipeline.history import measurements
from eval_pipeline.history.answers import accept_answer_run
from eval_pipeline.history.runs import ensure_tables, previous_run, table_names
from eval_pipeline.store.database import DatabaseError
from tests.integration import test_history_upgrade as upgrade
from tests.unit.verdict import test_verdict_attacks_eighth as eighth
from tests.unit.verdict import test_verdict_attacks_twentyseventh as twentyseventh
from tests.unit.verdict import test_verdict_attacks_twentysixth as twentysixth
from tests.unit.verdict.test_verdict_attacks_seventeenth import _as_role

pytestmark = pytest.mark.integration
answers = eighth.answers  # the eighth review's fixture: answer runs judged on a fresh default history
legacy_prefix = twentyseventh.legacy_prefix  # a fresh prefix, its tables dropped after


def placed_by_an_older_version(uri: str, prefix: str = "eval") -> None:
    """What 87cb394..e89ab96^ did on first contact with a history from before positions: placed
    its acceptances by time, with no clock check and no mark."""
    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(measurements, "_clock_stepped", lambda conn, names: False)
        ensure_tables(uri, prefix=prefix)
    log = table_names(prefix)["references"]
    with psycopg.connect(uri, autocommit=True) as conn:
        conn.execute(f'ALTER TABLE "{log}" DROP CONSTRAINT IF EXISTS "{log}_clock_checked"')
        conn.execute(f'COMMENT ON COLUMN "{log}".position IS NULL')


def _checked(uri: str, prefix: str = "eval") -> bool:
    with psycopg.connect(uri, autocommit=True) as conn:
        return measurements.clock_checked(conn, table_names(prefix))


@pytest.fixture
def row_role(pg_uri):
    """grant(prefix): a role with every row privilege on that history's tables, not their owner."""
    role = f"clk_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        conn.execute(f'CREATE ROLE "{role}" NOLOGIN NOSUPERUSER')
        conn.execute(f'GRANT USAGE ON SCHEMA public TO "{role}"')

    def grant(prefix: str) -> str:
        with psycopg.connect(pg_uri, autocommit=True) as conn:
            for table in table_names(prefix).values():
                if conn.execute("SELECT to_regclass(%s) IS NOT NULL", (table,)).fetchone()[0]:
                    conn.execute(f'GRANT SELECT, INSERT, UPDATE, DELETE ON "{table}" TO "{role}"')
            conn.execute(f'GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA public TO "{role}"')
        return _as_role(pg_uri, role)

    yield grant
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        conn.execute(f'DROP OWNED BY "{role}" CASCADE')
        conn.execute(f'DROP ROLE "{role}"')


def test_a_new_history_is_marked_checked_when_it_is_made(answers):
    answers("a0", {"bm25": 0.90})
    assert _checked(answers.uri)


def test_a_history_placed_by_an_older_version_is_distrusted_once_even_without_a_step(answers):
    """No step in its stamps, but nothing can show that now: T is not compared (the message says
    to accept), the history is marked; accepting S ends it, and T's -0.25 from S then fails
    measured, on every later contact. Since the answer gate compares a not-compared row with every
    row of its key recorded before, T's -0.25 from the distrusted S is shown at once: a measured
    failure against the recorded S, the message still saying to accept."""
    twentysixth._set_back(answers, back=False)
    placed_by_an_older_version(answers.uri)
    assert not _checked(answers.uri)
    gate = eighth._answer_gate(answers("T", {"bm25": 0.70}))
    twentyseventh._shown_against_recorded(gate)
    assert "accept" in gate.message, gate.message
    assert _checked(answers.uri)
    assert accept_answer_run(answers.uri, "S", variants=["bm25"])[0] == [("bm25", "deterministic")]
    for run_id in ("U", "V"):
        verdict = answers(run_id, {"bm25": 0.70})
        gate = eighth._answer_gate(verdict)
        assert not gate.passed and gate.state != "not_compared", (run_id, gate.message)
        twentyseventh._compared_with_a_yardstick(gate, previous="S")  # S's acceptance stands: not merely recorded


def test_a_history_placed_with_the_check_is_not_distrusted_again(answers):
    """The control: the same history placed by this version (checked, no step: marked): T's -0.25
    from S fails measured, never stopped."""
    twentysixth._set_back(answers, back=False)
    ensure_tables(answers.uri)
    assert _checked(answers.uri)
    verdict = answers("T", {"bm25": 0.70})
    gate = eighth._answer_gate(verdict)
    assert not gate.passed and gate.state != "not_compared", gate.message
    assert verdict.rows[0]["previous"]["run_id"] == "S"


def test_after_the_check_accepting_a_run_ends_the_conflict_for_good(answers):
    """The check runs once: after it stopped T, accepting X (as the message says) lets V be
    compared, and a later contact does not take that acceptance back (W compared too). Since the
    answer gate compares a not-compared row with every row of its key recorded before, T's -0.25
    from the distrusted S is shown: a measured failure, no yardstick of it trusted."""
    twentysixth._set_back(answers, back=True)
    placed_by_an_older_version(answers.uri)
    gate = eighth._answer_gate(answers("T", {"bm25": 0.70}))
    twentyseventh._shown_against_recorded(gate)
    assert accept_answer_run(answers.uri, "X", variants=["bm25"])[0] == [("bm25", "deterministic")]
    for run_id in ("V", "W"):
        gate = eighth._answer_gate(answers(run_id, {"bm25": 0.70}))
        assert gate.state != "not_compared", (run_id, gate.message)
        twentyseventh._compared_with_a_yardstick(gate)  # X's acceptance stands: not merely shown against S


def test_a_stepped_history_placed_by_an_older_version_has_no_eligible_previous_run(pg_uri, legacy_prefix):
    """The twenty-seventh's hole 3 (a step, nothing accepted), placed by an older version: on
    contact, dense has no previous run (none eligible), never X recorded before S."""
    twentyseventh._set_back_no_acceptance(pg_uri, legacy_prefix, back=True)
    placed_by_an_older_version(pg_uri, legacy_prefix)
    found = previous_run(pg_uri, variant="dense", identity=upgrade.IDENTITY, prefix=legacy_prefix)
    assert found is None, (found["run_id"], found["metrics"])
    assert _checked(pg_uri, legacy_prefix)


@pytest.mark.parametrize("back", [True, False], ids=["stepped", "not stepped"])
def test_a_role_that_cannot_mark_such_a_history_cannot_read_it(pg_uri, legacy_prefix, row_role, back):
    """Not the owner: it cannot leave the mark, so it leaves nothing (the distrust and the mark
    are one), and the lookup fails closed naming what the owner must do; the owner's contact
    then marks it, and the role reads what the owner reads."""
    twentyseventh._set_back_no_acceptance(pg_uri, legacy_prefix, back=back)
    placed_by_an_older_version(pg_uri, legacy_prefix)
    as_role = row_role(legacy_prefix)
    with pytest.raises(DatabaseError, match="left no mark of checking the clock") as raised:
        previous_run(as_role, variant="dense", identity=upgrade.IDENTITY, prefix=legacy_prefix)
    assert "python -m eval_pipeline.history --url-env VAR runs" in str(raised.value), raised.value
    assert not _checked(pg_uri, legacy_prefix)
    assert previous_run(pg_uri, variant="dense", identity=upgrade.IDENTITY, prefix=legacy_prefix) is None
    assert previous_run(as_role, variant="dense", identity=upgrade.IDENTITY, prefix=legacy_prefix) is None


def test_only_a_new_acceptance_stamp_ends_a_rows_distrust(answers):
    """The placement trigger clears ``distrusted`` when a row's acceptance stamp changes, whoever
    writes it (an older install's accept, 5f6eaca..87cb394^'s included, which stamps a
    re-acceptance 1 microsecond past the latest stamp after a clock stepped back), except for
    e89ab96..dea2bc0^'s own distrust: a flag-only stamp moved 1 microsecond with its position set
    in the same statement. That is no acceptance."""
    twentysixth._set_back(answers, back=True)  # X accepted, the clock set back: distrusted when placed
    ensure_tables(answers.uri)
    where = " WHERE run_id = 'X' AND accepted_at IS NOT NULL"

    def x_distrusted() -> bool:
        with psycopg.connect(answers.uri, autocommit=True) as conn:
            return conn.execute("SELECT bool_and(distrusted) FROM eval_measurements" + where).fetchone()[0]

    assert x_distrusted()
    answers.sql("UPDATE eval_measurements SET accepted_at = created_at" + where)  # made flag-only: an acceptance
    assert not x_distrusted()
    answers.sql("UPDATE eval_measurements SET distrusted = true" + where)
    answers.sql("UPDATE eval_measurements SET accepted_at = accepted_at + interval '1 microsecond',"
                " accepted_position = accepted_position + 0.25" + where)  # the older distrust's move
    assert x_distrusted()
    answers.sql("UPDATE eval_measurements SET accepted_at = accepted_at + interval '1 microsecond'" + where)
    assert not x_distrusted()  # a re-acceptance stamped 1 microsecond on: it ends the distrust


def test_dropping_the_position_column_drops_the_mark(answers):
    """This version's mark names the log's ``position`` column: dropped by hand, the column takes the
    mark with it, so the history is placed (or distrusted) again, never read as checked."""
    answers("a0", {"bm25": 0.90})
    assert _checked(answers.uri)
    answers.sql("ALTER TABLE eval_references DROP COLUMN position")
    assert not _checked(answers.uri)
