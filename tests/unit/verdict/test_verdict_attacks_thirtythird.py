"""The thirty-third review of the verdict: 364fdcb (the trigger ``_PLACEMENT_BODY`` skips only a flag-only
stamp moved 1 microsecond with its position set in the same UPDATE; ``_give_the_f19148d_mark`` writes
f19148d's comment on the owner's contact when this version's constraint is there and the comment is not;
the mark is ``CHECK (position IS NULL OR position IS NOT NULL)``, ``CLOCK_CHECKED_SQL`` any check
constraint named ``<log>_clock_checked``). Older versions run as their own code (the thirty-first's and
thirty-second's helpers: ``git archive`` into tmp, a subprocess).

Attacked: (a) the trigger condition against every older writer of ``accepted_at`` (read, not run: e89ab96,
aa3ae5c, f19148d's distrust all move a flag-only row, ``FLAG_ONLY = m.accepted_at = m.created_at`` in each,
by 1 microsecond and set ``accepted_position = COALESCE(logged, seq) + 0.25`` in the same UPDATE; that
value never equals the position this version's placement gave a flag-only row (logged positions are
``after + 0.5k/(n+1)``, unlogged ``after + 0.75``), so the skip always applies: no clear without an
acceptance found; 5f6eaca..87cb394^'s accept moves no position: it clears; 87cb394..'s accept stamps
``clock_timestamp()``: 1 microsecond past ``created_at`` only by chance: no STUCK found; ``write``'s
ON CONFLICT sets neither ``accepted_at`` nor ``distrusted``: a run recorded again stays distrusted); (b) the cost and
failure of ``_give_the_f19148d_mark`` for a non-owner, a read-only owner, and inside accept_reference's
non-autocommit transaction (committed with it, rolled back with a refused accept); (c) a history whose
``position`` column is dropped and re-added by hand, and one whose ``position`` is RENAMED by hand.

Holes (strict xfail, each with a passing control; hole 1 fixed since: the mark counts only while it names
the current ``position`` column, and a stale one of the same name is dropped before marking again):

1. FAILS OPEN (low reach: a hand-renamed column; hole 3 of the thirty-second, by RENAME instead of DROP),
   measurements.py ``CLOCK_CHECKED_SQL`` (any check constraint named ``*_clock_checked`` counts, whichever
   column it names) with ``_give_the_f19148d_mark``: on a history this version marked, ``ALTER TABLE
   eval_references RENAME COLUMN position TO ...`` keeps the constraint (it follows the renamed column), so
   aa3ae5c (e89ab96..f19148d^: re-places whenever ``position`` is missing, no mark read) re-places, wipes
   eligibility by its own means and re-adds ``position``; this version then finds the constraint, gives
   the comment and checks nothing: X (0.70, accepted, no log entry) is the yardstick and T (-0.25 from S)
   PASSES. The same with f19148d (it re-places, writes its comment, wipes eligibility; this version then
   finds both marks). Control: this version's contact first (it re-places: the stamps show the step: distrusted,
   not compared). Fix: count the mark only when its constraint names the current ``position`` column
   (``conkey`` holds that attnum; ``CHECK (true)``'s empty ``conkey`` stays the thirty-second's left hole).

Held (plain tests): a history whose ``position`` is dropped and re-added by hand is distrusted once and
marked (both marks) on this version's contact, T not compared; accepting S ends it, T fails against S.
A non-owner reads a history carrying the constraint but not the comment (no error, no write); a read-only
owner too (the ReadOnlySqlTransaction is swallowed in its savepoint); the owner's next contact gives the
comment. accept_reference (non-autocommit) gives the comment in its own transaction, committed with the
acceptance; a refused accept (an unknown variant) rolls it back and raises only its own error.

Not tried: hot standby; a NOINHERIT member of the owner (``pg_has_role(.., 'MEMBER')`` true, COMMENT
refused: swallowed, read not run); the lock ``COMMENT ON`` takes (ShareUpdateExclusive, held to the end
of accept_reference's transaction, with the advisory lock): a second contact waits, none fails (read).
"""

from __future__ import annotations

import psycopg
import pytest

from eval_pipeline.history import measurements
from eval_pipeline.history.answers import accept_answer_run, answer_history_exists
from eval_pipeline.history.runs import accept_reference, ensure_tables, table_names
from tests.unit.verdict import test_clock_checked_once as once
from tests.unit.verdict import test_verdict_attacks_thirtysecond as thirtysecond

pytestmark = pytest.mark.integration
row_role = once.row_role  # a fixture: a role with every row privilege on a history, not its owner
answers = thirtysecond.answers
judge = thirtysecond.judge

_gate = thirtysecond._gate
_shown_against_recorded = thirtysecond._shown_against_recorded  # a drop from a recorded row, no yardstick
_previous = thirtysecond._previous
_checked = thirtysecond._checked
_comment = thirtysecond._comment
_rows = thirtysecond._rows
_code = thirtysecond._code
_contacted_by = thirtysecond._contacted_by
_AA3 = thirtysecond._AA3


def _both_marks(uri: str, prefix: str = "eval") -> bool:
    with psycopg.connect(uri, autocommit=True) as conn:
        return conn.execute("SELECT " + measurements.BOTH_MARKS_SQL, dict(table_names(prefix))).fetchone()[0]


# --------------------------------------------------------------------------------------------
# hole 1: the position column renamed by hand keeps the mark
# --------------------------------------------------------------------------------------------


def _marked_history_with_position_renamed(answers) -> None:
    thirtysecond._x_accepted_then_s_after_a_step(answers, None)
    answers.sql("ALTER TABLE eval_references RENAME COLUMN position TO position_by_hand")
    # the constraint followed the column, and no longer counts as the mark: it names no `position`
    with psycopg.connect(answers.uri) as conn:
        assert conn.execute("SELECT count(*) FROM pg_constraint WHERE conname = 'eval_references_clock_checked'"
                            ).fetchone()[0] == 1
    assert not _checked(answers.uri)


@pytest.mark.parametrize("older", [_AA3, thirtysecond._F19])
def test_an_older_placement_after_position_renamed_does_not_make_x_the_yardstick(answers, tmp_path, older):
    code = _code(older, tmp_path / older)
    _marked_history_with_position_renamed(answers)
    _contacted_by(code, answers.uri)  # no `position`: the older version re-places by its own means
    verdict = answers("T", {"bm25": 0.70})  # -0.25 from S
    gate = _gate(verdict)
    assert not gate.passed, (gate.state, gate.message, _previous(verdict), _rows(answers.uri))


def test_hole_1s_control_this_versions_contact_first_is_not_fooled(answers, tmp_path):
    code = _code(_AA3, tmp_path / "aa3")
    _marked_history_with_position_renamed(answers)
    ensure_tables(answers.uri)  # this version re-places (position missing): the step shows: distrusted
    _contacted_by(code, answers.uri)  # position there: aa3ae5c does nothing
    gate = _gate(answers("T", {"bm25": 0.70}))
    assert not gate.passed, (gate.state, gate.message, _rows(answers.uri))


# --------------------------------------------------------------------------------------------
# held: position dropped and re-added by hand
# --------------------------------------------------------------------------------------------


def test_held_position_dropped_and_readded_by_hand_is_distrusted_once_then_accepting_ends_it(answers):
    """Distrusted once (T no yardstick), then accepting S ends it. Since the answer gate compares a
    not-compared row with every row of its key recorded before, T's -0.25 from the distrusted S is
    shown: a measured failure against the recorded S, where U and V are measured against S accepted."""
    thirtysecond._x_accepted_then_s_after_a_step(answers, None)
    answers.sql("ALTER TABLE eval_references DROP COLUMN position")
    answers.sql("ALTER TABLE eval_references ADD COLUMN position double precision")  # by hand: no default
    assert not _checked(answers.uri)
    gate = _gate(answers("T", {"bm25": 0.70}))
    _shown_against_recorded(gate)
    assert _both_marks(answers.uri)
    assert accept_answer_run(answers.uri, "S", variants=["bm25"])[0] == [("bm25", "deterministic")]
    for run_id in ("U", "V"):
        verdict = answers(run_id, {"bm25": 0.70})
        gate = _gate(verdict)
        assert not gate.passed and gate.state != "not_compared" and _previous(verdict) == "S", (
            run_id, gate.state, gate.message)


# --------------------------------------------------------------------------------------------
# held: _give_the_f19148d_mark for a non-owner, a read-only owner, inside accept_reference
# --------------------------------------------------------------------------------------------


def _marked_without_comment(answers) -> None:
    answers("a0", {"bm25": 0.90})
    answers.sql("COMMENT ON COLUMN eval_references.position IS NULL")  # a dump --no-comments
    assert _checked(answers.uri) and _comment(answers.uri) is None


def test_held_a_non_owner_reads_a_history_without_the_comment_and_writes_nothing(answers, row_role):
    _marked_without_comment(answers)
    as_role = row_role("eval")
    for _ in range(2):
        assert answer_history_exists(as_role) is True
    assert _comment(answers.uri) is None
    assert answer_history_exists(answers.uri) is True  # the owner's contact gives it
    assert _comment(answers.uri) == measurements._F19148D_MARK


def test_held_a_read_only_owner_reads_a_history_without_the_comment(answers):
    _marked_without_comment(answers)
    read_only = answers.uri + ("&" if "?" in answers.uri else "?") + "options=-cdefault_transaction_read_only%3Don"
    with psycopg.connect(read_only, autocommit=True) as conn:
        assert conn.execute("SHOW default_transaction_read_only").fetchone()[0] == "on"
    for _ in range(2):
        assert answer_history_exists(read_only) is True
    assert _comment(answers.uri) is None
    verdict = answers("T", {"bm25": 0.90})
    assert _gate(verdict).state != "not_compared" and _comment(answers.uri) == measurements._F19148D_MARK


def test_held_accept_reference_gives_the_comment_in_its_transaction(judge):
    judge("X", "A", {"v": "good"}, hits={"v": 70})
    judge.sql("COMMENT ON COLUMN {references}.position IS NULL")
    with pytest.raises(Exception) as refused:
        accept_reference(judge.uri, "X", variants=["nope"], prefix=judge.prefix, accepted_by="new")
    assert not isinstance(refused.value, psycopg.Error), refused.value  # its own refusal, nothing of the mark's
    assert _comment(judge.uri, judge.prefix) is None  # rolled back with the refused accept
    assert accept_reference(judge.uri, "X", variants=["v"], prefix=judge.prefix, accepted_by="new") == ["v"]
    assert _comment(judge.uri, judge.prefix) == measurements._F19148D_MARK
    assert _both_marks(judge.uri, judge.prefix)
