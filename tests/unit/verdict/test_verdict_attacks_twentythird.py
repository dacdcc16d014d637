"""The twenty-third review of the verdict: 62f8753 (and 2d9c93e under it). (1) THE READING RULE:
``measurements._latest_acceptance`` (measurements.py:651-672): a row whose ``accepted_position`` is
past its own latest log entry conflicts with itself, and, with NOTHING logged for the lookup, an
unlogged acceptance of a run that has a run row conflicts with itself (premise, measurements.py:
660-662 and 667-668: "every version logs such an acceptance, so its entry was deleted"). (2) THE
PLACEMENT ``_place_acceptances`` (measurements.py:286-301): a row stamped after its latest entry is
"accepted again with the entry deleted" only with a measurement recorded or an acceptance logged
between the two stamps. (3) ``HAS_PLACEMENT_TRIGGER_SQL`` (tgtype 19, no WHEN, UPDATE OF
accepted_at, the function's name and body digest, no other trigger of the family). Runs judged with
the eighth review's ``answers`` fixture against the session Postgres (marked ``integration``), the
twelfth's ``_retrieval_row``, the fifteenth's ``_as_before_positions`` idea (position columns
dropped, placed again on first contact), the frozen legacy schema of
tests/integration/test_history_upgrade.py (its ``legacy`` fixture).

Attacked: the premise of (1)'s nothing-logged rule against every version's accept code, read with
``git show`` (``git log --oneline -- eval_pipeline/judging/ eval_pipeline/history/``): e6a1fff (the
log's first version: retrieval acceptances are log entries only), 19af7bb (answers made
acceptable), a60854a (answers stamped and logged), 10cbdc0..3eb5cd5^, 3eb5cd5, 5f6eaca, 87cb394,
c089045, abfa520..62f8753; ``_upgrade`` (measurements.py:417-451) of a history from before the
answer log; whether accepting again (the real command line) ends the stop; (2)'s "in between" for
multi-grader accepts and the CLI's retrieval-then-answers transactions of the code before 3eb5cd5;
(1) failing open through an answer row with no run row (a run row deleted: the log's foreign key
cascades), and through heirs (``SAME_VARIANT``).

Closed since by the lead (the tests below are plain): the nothing-logged rule applies only to an
acceptance its version logged (``measurements._LOGGED_WHEN_MADE``: a run row, and a stamp other
than its measurement's own time, which only the upgrade gives the flag-only acceptances of
19af7bb..a60854a^); without that condition the first test fails. The frozen fixture of
test_history_upgrade.py now logs r1's answer acceptance, as every version that stamped one did.

Holes (strict xfails, each confirmed failing on 62f8753, and with --runxfail on an AssertionError
about the verdict; both also run at 62f8753^ (93a3e4c) in a frozen worktree with --runxfail, where
they pass: a regression of 62f8753):

1. SPURIOUS STOP ON UPGRADE (new in 62f8753): an answer acceptance made by the code of 19af7bb..
   a60854a^ was never logged, and after the upgrade it conflicts with itself. That code's
   ``accept_answer_run`` (``git show 19af7bb:eval_pipeline/judging/answer_history.py``, line
   747) only ran ``UPDATE <answer_runs> SET accepted = true``: no ``accepted_at`` (the column
   came with a60854a, NULL for these rows) and no entry in ``{prefix}_references`` (a60854a added
   the INSERT). The job and the command line accepted the retrieval first (``accept_reference``,
   logged), so the run HAS a run row. ``_upgrade`` (measurements.py:447-448) copies it as
   ``accepted_at = created_at`` and creates no log entry; ``_place_acceptances`` puts it at
   ``after + 0.75`` (LOGGED_POSITION NULL). If no later acceptance of that (variant, grader) was
   logged, ``pick("logged")`` finds none and ``pick("unlogged")`` returns it with ``EXISTS run
   row`` true: ``acceptance_conflict`` = itself (measurements.py:664-670). a2 (0.75, equal to the
   accepted a1) is not compared: "run a1's latest acceptance has no entry of its own in the
   acceptance log (accepted again with that entry deleted, or placed by a trigger this version
   did not make)", neither of which happened. Before 62f8753 a1 was silently and rightly the
   reference. The premise "every version logs such an acceptance" is false for 19af7bb..a60854a^.
   The project's own frozen legacy history (tests/integration/test_history_upgrade.py:106-118:
   r1's answers ``accepted`` with a run row and no answer log entry) has exactly this shape: its
   ``reference_answer_run`` now carries ``acceptance_conflict: r1`` (the upgrade test checks
   only run_id and accepted, so it still passes). Not stuck: accepting a1 again through the
   command line ends it (held below), or a newer run. Reachability: upgrade, normal use (every
   project whose only acceptance of some (variant, grader) predates a60854a). Fix: ``_upgrade``
   logs every legacy answer acceptance that has no entry and whose run has a run row (an entry at
   the row's stamp, ``accepted_by`` 'before the acceptance log'), so the placement puts row ==
   entry; or the nothing-logged rule exempts a row whose ``accepted_at = created_at`` (only the
   upgrade writes that).

What held (plain tests): hole 1's stop ends when a1 is accepted again through the real command
line (``accept a1 --variant bm25``), a2 equal passes compared and a3 (-0.15 from a1) fails measured;
and its other way out, ``history accept latest`` (no variant named) on the stopped a2, ends it too;
a legacy (unlogged) acceptance followed by a logged one is no conflict (the logged one is the
reference, a drop from it fails measured); an answer acceptance whose run row was deleted after it
was logged (the foreign key cascades the entry away) is still a conflict when a logged acceptance
precedes it, and the reference when nothing else was accepted (the acceptance did happen: no
other bar can be in force).

By reading (no test): retrieval acceptances were log entries from the log's first version
(e6a1fff) on, and ``_upgrade`` takes a retrieval row's stamp from the log (measurements.py:434-435),
so no retrieval row is unlogged after an upgrade (and ``USABLE`` needs the run row: every unlogged
retrieval acceptance is a deleted entry); there was never an ``accepted_at`` on ``{prefix}_runs``;
a60854a..3eb5cd5^ stamps each (variant, grader) row with ``clock_timestamp()`` and logs all of them
with the one transaction's ``now()``, so (2)'s "in between" sees no other entry strictly after it
(all equal) and no measurement (none recorded in the accept's transaction): row == entry; the
command line's retrieval accept runs in its own earlier transaction (its entries are before);
3eb5cd5..87cb394^ log ``m.accepted_at`` (equal stamps); 87cb394 and abfa520.. set the position
with the stamp and log ``m.accepted_position``; c089045 logs the position its trigger drew (row ==
entry); the code before 3eb5cd5 writing after the upgrade logs retrieval only (no stamp: logged)
and its answer UPDATE hits the moved table's ``CHECK (false) NOT VALID`` (refused, loudly);
``write``'s upsert never names ``accepted_at``. (2) can be fooled only by a concurrent recording
committed between the accept transaction's start and its row stamp (milliseconds; a spurious stop
at worst, ended by accepting again). (1) failing open: with nothing logged, the latest unlogged
acceptance wins by position; an older deleted entry under it is superseded anyway, and a
run-row-less winner ahead of a deleted-entry one needs a NULL position (written around the
trigger: hand edit) or a foreign sequence (the twenty-second's hole 3, hand edits).

Not reached: a real 19af7bb install (the shape is written as its DDL and UPDATE left it); the
Dagster ``accept_reference`` job (the same two calls as the command line); a run
whose retrieval is refused today on hole 1 (the twenty-second's hole 2 path: a newer run ends it).
"""

from __future__ import annotations

import psycopg
import pytest

from tests.integration import test_history_upgrade as upgrade
from tests.unit.verdict import test_verdict_attacks_eighth as eighth
from tests.unit.verdict import test_verdict_attacks_twelfth as twelfth

pytestmark = pytest.mark.integration
answers = eighth.answers  # the eighth review's fixture
legacy = upgrade.legacy  # the frozen legacy history's fixture
_retrieval_row = twelfth._retrieval_row

SELF_CONFLICT = "has no entry of its own in the acceptance log"


def _gate(verdict):
    return eighth._answer_gate(verdict)


def _accepted_as_19af7bb_did(answers, run_id: str) -> None:
    """``run_id``'s answers accepted as the code of 19af7bb..a60854a^ did (``accepted = true``: no
    stamp, no log entry; its retrieval accept, logged, is not this key's), then upgraded: ``_upgrade``
    stamps the row at its ``created_at`` (measurements.py:447-448) and writes no entry, and the
    placement runs once on first contact (the position columns dropped, as the fifteenth's
    ``_as_before_positions``). Written around the trigger (``session_replication_role = replica``),
    as the upgrade's INSERT writes it."""
    with psycopg.connect(answers.uri, autocommit=True) as conn:
        conn.execute("SET session_replication_role = replica")
        conn.execute("UPDATE eval_measurements SET accepted_at = created_at WHERE run_id = %s"
                     " AND aspect <> 'retrieval'", (run_id,))
    answers.sql("ALTER TABLE eval_measurements DROP COLUMN IF EXISTS accepted_position")
    answers.sql("ALTER TABLE eval_references DROP COLUMN IF EXISTS position")


def _legacy_history(answers) -> None:
    """a0 (0.90) eligible, a1 (0.75, -0.15: its gate failed) with a run row, a1's answers accepted
    by the code of 19af7bb..a60854a^ (a deliberate trade-off), then upgraded."""
    _retrieval_row(answers, "a0")
    assert answers("a0", {"bm25": 0.90}).passed
    _retrieval_row(answers, "a1")
    assert not _gate(answers("a1", {"bm25": 0.75})).passed
    _accepted_as_19af7bb_did(answers, "a1")


# --------------------------------------------------------------------------------------------
# hole 1: an answer acceptance from before the answer log is a self-conflict after the upgrade
# --------------------------------------------------------------------------------------------


def test_an_answer_acceptance_made_before_the_answer_log_is_the_reference_after_the_upgrade(answers):
    """Hole 1: a1 (0.75) accepted by the code before a60854a (no log entry), upgraded; a2 (0.75,
    equal to the reference a1) must be compared and pass, not be stopped by a conflict no one
    made."""
    _legacy_history(answers)
    gate = _gate(answers("a2", {"bm25": 0.75}))
    assert gate.passed and gate.state != "not_compared", gate.message


def test_the_frozen_legacy_historys_answer_acceptance_is_no_conflict(pg_uri, legacy):
    """Hole 1, in the project's own frozen legacy history (test_history_upgrade.py): r1's answers
    accepted. The fixture stamped ``accepted_at`` without an answer entry in the log, a shape no
    version made (every version that stamped it, a60854a on, logged the acceptance of a run with
    a run row): the lead made the fixture log it as they did. After the upgrade its reference is
    r1, with no acceptance conflict."""
    from eval_pipeline.history.answers import reference_answer_run

    reference = reference_answer_run(pg_uri, **upgrade.ANSWER_KEY, prefix=legacy)
    assert reference["run_id"] == "r1" and reference["accepted"], reference
    assert reference.get("acceptance_conflict") is None, reference.get("acceptance_conflict")


# --------------------------------------------------------------------------------------------
# held
# --------------------------------------------------------------------------------------------


def test_hole_1s_stop_ends_when_the_run_is_accepted_again_through_the_command_line(answers, monkeypatch, capsys):
    """Held (hole 1 is a stop, not stuck): a1 accepted again through the real command line (the
    command its message names) is logged; a2 (0.75, equal) is compared and passes, a3 (0.60, -0.15
    from a1) fails measured."""
    from eval_pipeline.history.__main__ import main

    _legacy_history(answers)
    monkeypatch.setenv("ATK23_HISTORY_URL", answers.uri)
    assert main(["--url-env", "ATK23_HISTORY_URL", "accept", "a1", "--variant", "bm25"]) == 0, \
        capsys.readouterr().err
    gate = _gate(answers("a2", {"bm25": 0.75}))
    assert gate.passed and gate.state != "not_compared", gate.message
    gate = _gate(answers("a3", {"bm25": 0.60}))
    assert not gate.passed and gate.state != "not_compared", gate.message


def test_a_legacy_answer_acceptance_followed_by_a_logged_one_is_no_conflict(answers):
    """Held: a1 (0.75) accepted before the answer log, then a2 (0.90) accepted by this version
    (logged): a2 is the reference with no conflict; a3 (0.90) passes compared, a4 (0.75, -0.15
    from a2) fails measured."""
    from eval_pipeline.history.answers import accept_answer_run

    _legacy_history(answers)
    _retrieval_row(answers, "a2")
    answers("a2", {"bm25": 0.90})
    assert accept_answer_run(answers.uri, "a2")[0] == [("bm25", "deterministic")]
    gate = _gate(answers("a3", {"bm25": 0.90}))
    assert gate.passed and gate.state != "not_compared", gate.message
    gate = _gate(answers("a4", {"bm25": 0.75}))
    assert not gate.passed and gate.state != "not_compared", gate.message


def test_an_answer_acceptance_whose_run_row_was_deleted_after_a_logged_one_stays_a_conflict(answers):
    """Held: a0 (0.90) accepted and logged, a1 (0.75) accepted and logged, then a1's run row
    deleted (the log's foreign key cascades its entries away; its answer row stays usable, with no
    run row): a1 is an unlogged acceptance after the logged a0, a conflict; a2 (0.75) is not passed
    silently against either."""
    from eval_pipeline.history.answers import accept_answer_run

    _retrieval_row(answers, "a0")
    assert answers("a0", {"bm25": 0.90}).passed
    assert accept_answer_run(answers.uri, "a0")[0]
    _a1_accepted_then_its_run_row_deleted(answers)
    gate = _gate(answers("a2", {"bm25": 0.75}))
    assert not gate.passed, gate.message


def _a1_accepted_then_its_run_row_deleted(answers) -> None:
    """a1 (0.75) recorded with a run row, its answers of bm25 accepted and logged, then its run row
    deleted (with its retrieval measurement; the log's entry cascades away)."""
    from eval_pipeline.history.answers import accept_answer_run

    _retrieval_row(answers, "a1")
    answers("a1", {"bm25": 0.75})
    assert accept_answer_run(answers.uri, "a1", variants=["bm25"])[0]
    answers.sql("DELETE FROM eval_measurements WHERE run_id = %s AND aspect = 'retrieval'", "a1")
    answers.sql("DELETE FROM eval_runs WHERE run_id = %s", "a1")


def test_an_answer_acceptance_whose_run_row_was_deleted_with_nothing_else_accepted_is_the_reference(answers):
    """Held (not failing open): a0 (0.90) eligible, a1 (0.75) accepted and logged, then a1's run
    row deleted (its entry cascades away): nothing is logged and a1 has no run row, so a1 (really
    accepted, no other bar ever in force) is the reference; a2 (0.60, -0.15 from a1) fails
    measured."""

    _retrieval_row(answers, "a0")
    assert answers("a0", {"bm25": 0.90}).passed
    _a1_accepted_then_its_run_row_deleted(answers)
    gate = _gate(answers("a2", {"bm25": 0.60}))
    assert not gate.passed, gate.message


def test_hole_1s_stop_ends_when_the_newest_run_is_accepted_through_accept_latest(answers, monkeypatch, capsys):
    """Held (the message's other way out): after hole 1's stop on a2 (0.75, not compared), ``history
    accept latest`` (no variant named) accepts a2's retrieval and answers, and a3 (0.75) is compared
    and passes, a4 (0.60, -0.15 from a2) fails measured."""
    from eval_pipeline.history.__main__ import main

    _legacy_history(answers)
    _retrieval_row(answers, "a2")
    answers("a2", {"bm25": 0.75})
    monkeypatch.setenv("ATK23_HISTORY_URL", answers.uri)
    assert main(["--url-env", "ATK23_HISTORY_URL", "accept", "latest"]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "answers accepted: bm25 deterministic" in out, out
    gate = _gate(answers("a3", {"bm25": 0.75}))
    assert gate.passed and gate.state != "not_compared", gate.message
    gate = _gate(answers("a4", {"bm25": 0.60}))
    assert not gate.passed and gate.state != "not_compared", gate.message
