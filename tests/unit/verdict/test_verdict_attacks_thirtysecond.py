"""The thirty-second review of the verdict: a7f1507 on c2a64d9 (``_mark_clock_checked`` now writes f19148d's
mark, a COMMENT on ``<prefix>_references.position``, beside this version's ``CHECK (true)`` constraint
``<prefix>_references_clock_checked``; the placement trigger ``_PLACEMENT_BODY`` clears ``distrusted`` on a new
acceptance stamp except a move of exactly 1 microsecond, e89ab96..dea2bc0^'s bump of a flag-only stamp).
Older versions run as their own code (``git archive`` into tmp, a subprocess: the thirty-first's helpers).

Attacked: (a) every writer of ``accepted_at`` in any version (``git log -S accepted_at -- eval_pipeline``):
``accept`` of 3eb5cd5..5f6eaca^ and 87cb394.. (``clock_timestamp()``), of 5f6eaca..87cb394^
(``GREATEST(clock_timestamp(), latest stamp of the variant/aspect + 1 microsecond, latest logged + 1
microsecond)``), e89ab96..dea2bc0^'s distrust (flag-only + 1 microsecond, others unchanged), the upgrades
(INSERT: no trigger); nothing else in any version UPDATEs the column (pre-3eb5cd5 installs write their own
legacy tables); (b) which histories carry f19148d's comment under a7f1507; (c) installs that read the
constraint (4fafd48, dea2bc0, c2a64d9) on a history this version marked; (d) e89ab96..f19148d^'s placement
on a marked history whose ``position`` was dropped; (e) the cost of the COMMENT.

Closed since by the lead: hole 2 (the trigger skips only the older distrust's own move: a flag-only
stamp moved 1 microsecond with its position set in the same statement), hole 1 where this version's
contact comes first (it gives a history with its constraint f19148d's comment too), and hole 3 for
histories this version marks from now on (the constraint names ``position``, so dropping that column
drops the mark). Left as strict xfails: hole 1 when an f19148d install contacts a history marked by
4fafd48..a7f1507^ before this version does, and hole 3 on a history marked by those versions
(``CHECK (true)``); each needs one of those hours-old versions still running.

Holes (strict xfails, each confirmed failing on an AssertionError about the verdict, also with --runxfail;
each has a passing control):

1. FAILS OPEN (mixed rollout with an f19148d install; the thirty-first's hole 2 still open for old
   histories), measurements.py:364-372 ``_mark_clock_checked`` (line numbers at 6090389) is only reached
   when a history is marked (``_place_acceptances``, ``check_placement_once`` past its
   ``clock_checked`` early return, :400). A history marked by 4fafd48..a7f1507^ (the constraint only:
   every history any of those versions touched) is
   ``clock_checked`` for a7f1507, which never adds the comment to it; likewise one marked by a7f1507 and
   restored from ``pg_dump --no-comments`` (the constraint survives; the very case the mark's own comment
   cites). f19148d's contact then sees no comment, a step in the stamps, and wipes eligibility: X (0.70,
   accepted through the library, no log entry) becomes this version's previous row and T (0.70, -0.25 from S)
   PASSES ``comparable`` against X. Control: the same history marked by a7f1507 (comment present): T fails
   measured against S; marked by c2a64d9 without the f19148d contact: T fails against S. Reach: any history
   marked before a7f1507 (all of them) plus one f19148d install contacting it with any clock step ever
   recorded. Fix: write the comment whenever the constraint is there and the comment is not (the owner's
   contact, in a savepoint; a non-owner skips), e.g. in ``check_placement_once``'s early-return path.

2. STUCK (fails closed, an older install's acceptance not taken), ``_PLACEMENT_BODY`` measurements.py:455-456
   with 5f6eaca..87cb394^'s ``accept``: when the row being re-accepted holds the latest stamp of its
   variant/aspect and that stamp is ahead of the clock (a clock that ran ahead and was set right: the case
   that made 5f6eaca add the +1 microsecond, and the case that gets a history distrusted), the new stamp is
   exactly OLD + 1 microsecond (asserted): the trigger takes it for e89ab96's bump and the row stays
   distrusted; T is "not compared" though the old install reported ``['v']`` accepted. Control: the same
   accept with the clock right (stamp = ``clock_timestamp()``) ends the distrust: T comparable, fails. Reach:
   a 5f6eaca..87cb394^ install (exactly the "older install that knows no positions" the trigger exists for)
   re-accepting the latest-accepted run after a clock step; this version's accept (named by the message)
   ends it. Fix: tell e89ab96's bump apart by more than the delta (it only touches flag-only rows:
   ``OLD.accepted_at = OLD.created_at``, and sets ``accepted_position`` itself); e.g. exclude the 1
   microsecond move only when ``OLD.accepted_at = OLD.created_at`` and the position is written by the same
   UPDATE.

3. FAILS OPEN (low reach: a hand-dropped column), aa3ae5c (e89ab96..f19148d^) on a history this version
   marked whose ``<prefix>_references.position`` was dropped by hand: it re-places (it reads no mark), its
   own step check wipes eligibility and re-adds ``position`` (no comment); this version then finds the
   constraint and the column and checks nothing (``check_placement_once`` returns on the constraint):
   T (-0.25 from S) passes against X. Control: this version's contact first (it re-places: a step: every row
   distrusted, the comment written): T not compared, aa3ae5c then does nothing. Fix: tie the mark to the
   column (a CHECK naming ``position``, dropped with it), so a re-added column is unmarked: distrusted once.

What held (plain tests): 4fafd48, dea2bc0 and c2a64d9 (which read the constraint) leave a history a7f1507
marked alone (nothing distrusted, T fails against S); f19148d leaves a history a7f1507 marked (comment
present) alone; no version's code moves a stamp by more than 1 microsecond except an acceptance (the only
non-acceptance move in any version is e89ab96..dea2bc0^'s +1 microsecond, flag-only; ``write``'s ON CONFLICT
never names ``accepted_at``); an acceptance of 87cb394.. or 3eb5cd5..5f6eaca^ stamps ``clock_timestamp()``,
1 microsecond after the old stamp only by chance (two transactions, each with round trips: not observed).
The COMMENT's cost: it is written only where the owner already runs ``ALTER TABLE`` (``_place_acceptances``;
``check_placement_once`` inside its savepoint, whose non-owner path is the same DatabaseError as before), once
per marking; ``COMMENT ON`` takes a lock weaker than the ``ADD CONSTRAINT`` beside it: no new cost, no new
non-owner failure.

Not tried: a hand ``UPDATE ... SET accepted_at = accepted_at + interval '1 second'`` (not any version's code:
it clears a distrust, by design of a stamp-only rule); f19148d's own accept (``clock_timestamp()``, read);
pg_dump itself (the comment's loss simulated by ``COMMENT ... IS NULL``).
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from eval_pipeline.history import measurements
from eval_pipeline.history.runs import accept_reference, ensure_tables, table_names
from tests.unit.verdict import test_verdict_attacks_thirtyfirst as thirtyfirst
from tests.unit.verdict import test_verdict_attacks_twentyninth as twentyninth

pytestmark = pytest.mark.integration
answers = thirtyfirst.answers
judge = thirtyfirst.judge

_gate = twentyninth._gate
_shown_against_recorded = twentyninth._shown_against_recorded  # a drop from a recorded row, no yardstick
_previous = twentyninth._previous
_checked = twentyninth._checked
_code_of = thirtyfirst._code_of
_contacted_by = thirtyfirst._contacted_by
_rows = thirtyfirst._rows

_F19 = "f19148d"  # its mark is a COMMENT on <prefix>_references.position
_C2A = "c2a64d9"  # the version before a7f1507: marks with the constraint only
_OLD_ACCEPT = "87cb394^"  # 5f6eaca..87cb394^: accept stamps GREATEST(clock, latest stamp + 1 microsecond)


def _code(commit: str, tmp: Path) -> Path:
    code = _code_of(commit, tmp)
    if code is None:
        pytest.skip(f"no git history with {commit}")
    return code


def _comment(uri: str, prefix: str = "eval") -> str | None:
    with psycopg.connect(uri, autocommit=True) as conn:
        return conn.execute("SELECT col_description(to_regclass(%s), (SELECT attnum::integer FROM pg_attribute"
                            " WHERE attrelid = to_regclass(%s) AND attname = 'position'))",
                            (table_names(prefix)["references"],) * 2).fetchone()[0]


# --------------------------------------------------------------------------------------------
# hole 1: a history marked by 4fafd48..a7f1507^ (the constraint only) never gets f19148d's comment
# --------------------------------------------------------------------------------------------


def _marked_by(answers, code: Path | None) -> None:
    """The fresh history created (and marked) by ``code``'s own ensure_tables, or by this version's."""
    if code is None:
        ensure_tables(answers.uri)
    else:
        _contacted_by(code, answers.uri)
    assert _checked(answers.uri)


def _x_accepted_then_s_after_a_step(answers, marker: Path | None) -> None:
    """The thirty-first's hole 2 history, marked first by ``marker`` (an install of 4fafd48..a7f1507^) and
    used by this version from then on: X (bm25 0.70) recorded and accepted through the library (no run
    row: no log entry), S (0.95, eligible) recorded after a clock step (stamped a day before X)."""
    _marked_by(answers, marker)
    thirtyfirst._accepted_x_then_s_after_a_step(answers)


@pytest.mark.xfail(strict=True, raises=AssertionError, reason="hole 1 (FAILS OPEN): a history marked by "
                   "4fafd48..a7f1507^ (constraint only) never gets f19148d's comment until this version's "
                   "contact, so an f19148d contact before it wipes eligibility under this version: T (-0.25 "
                   "from S) passes against X")
def test_an_older_versions_wipe_of_a_history_marked_without_the_comment_does_not_make_x_the_yardstick(
        answers, tmp_path):
    f19 = _code(_F19, tmp_path / "f19")
    _x_accepted_then_s_after_a_step(answers, _code(_C2A, tmp_path / "c2a"))
    assert _checked(answers.uri) and _comment(answers.uri) is None
    _contacted_by(f19, answers.uri)  # f19148d: no comment mark, a step: eligibility wiped
    verdict = answers("T", {"bm25": 0.70})  # -0.25 from S
    gate = _gate(verdict)
    assert not gate.passed, (gate.state, gate.message, _previous(verdict), _rows(answers.uri))


def test_this_versions_contact_gives_a_marked_history_f19148ds_mark_too(answers, tmp_path):
    """Hole 1 closed where this version's contact comes first (the lead's fix): a history restored
    without comments (the constraint kept) gets f19148d's comment back on its owner's contact, so
    a later f19148d contact leaves it alone, and T fails against S."""
    f19 = _code(_F19, tmp_path / "f19")
    _x_accepted_then_s_after_a_step(answers, None)
    answers.sql("COMMENT ON COLUMN eval_references.position IS NULL")  # the constraint survives, the comment not
    ensure_tables(answers.uri)  # this version's contact
    assert _checked(answers.uri) and _comment(answers.uri) is not None
    _contacted_by(f19, answers.uri)  # f19148d: no comment mark, a step: eligibility wiped
    verdict = answers("T", {"bm25": 0.70})  # -0.25 from S
    gate = _gate(verdict)
    assert not gate.passed, (gate.state, gate.message, _previous(verdict), _rows(answers.uri))


def test_hole_1s_control_marked_by_this_version_the_same_contact_changes_nothing(answers, tmp_path):
    f19 = _code(_F19, tmp_path / "f19")
    _x_accepted_then_s_after_a_step(answers, None)
    assert _comment(answers.uri) == measurements._F19148D_MARK
    _contacted_by(f19, answers.uri)
    verdict = answers("T", {"bm25": 0.70})
    gate = _gate(verdict)
    assert not gate.passed and gate.state != "not_compared" and _previous(verdict) == "S", (gate.state, gate.message)


def test_hole_1s_control_marked_by_c2a64d9_without_the_older_contact_t_fails_against_s(answers, tmp_path):
    _x_accepted_then_s_after_a_step(answers, _code(_C2A, tmp_path / "c2a"))
    verdict = answers("T", {"bm25": 0.70})
    gate = _gate(verdict)
    assert not gate.passed and gate.state != "not_compared" and _previous(verdict) == "S", (gate.state, gate.message)


# --------------------------------------------------------------------------------------------
# hole 2: 5f6eaca..87cb394^'s accept stamps "the latest stamp + 1 microsecond" when the clock is behind it
# --------------------------------------------------------------------------------------------


def _accepted_by(code: Path, uri: str, run_id: str, variant: str, prefix: str) -> None:
    """That version's own ``accept_reference`` (by variant), in a process of its own (the thirty-first's
    ``_run_old_install``)."""
    out = thirtyfirst._run_old_install(
        code, "import sys, eval_pipeline.history.runs as r\n"
              "print(r.accept_reference(sys.argv[1], sys.argv[2], variants=[sys.argv[3]], accepted_by='old',"
              " prefix=sys.argv[4]))\n"
              "print(r.__file__)\n", uri, run_id, variant, prefix, ignore_warnings=True)
    assert out.returncode == 0 and str(code) in out.stdout, out.stderr[-2000:]
    assert out.stdout.splitlines()[-1] == str(code / "eval_pipeline" / "history" / "runs.py"), out.stdout


def _stamp(judge, run_id: str):
    with psycopg.connect(judge.uri, autocommit=True) as conn:
        return conn.execute(sql.SQL("SELECT accepted_at FROM {measurements} WHERE run_id = %s").format(
            **measurements._ident(table_names(judge.prefix))), (run_id,)).fetchone()[0]


def _s_accepted_then_distrusted(judge, *, ahead: bool) -> None:
    """X (v hit 0.70), S (0.95) recorded and S accepted by this version; ``ahead``: S's stamp (row and
    log) from a clock that ran a day ahead (then set right: the stamp is later than the clock now);
    then the history distrusted by this version (its mark dropped, as an older placement left it)."""
    judge("X", "A", {"v": "good"}, hits={"v": 70})
    judge("S", "A", {"v": "good"}, hits={"v": 95})
    assert accept_reference(judge.uri, "S", variants=["v"], prefix=judge.prefix, accepted_by="new") == ["v"]
    if ahead:
        with psycopg.connect(judge.uri, autocommit=True) as conn:
            t = measurements._ident(table_names(judge.prefix))
            conn.execute("SET session_replication_role = replica")
            conn.execute(sql.SQL("UPDATE {measurements} SET accepted_at = accepted_at + interval '1 day'"
                                 " WHERE run_id = 'S'").format(**t))
            conn.execute(sql.SQL("UPDATE {references} SET accepted_at = accepted_at + interval '1 day'"
                                 " WHERE run_id = 'S'").format(**t))
    names = table_names(judge.prefix)
    judge.sql(f'ALTER TABLE {{references}} DROP CONSTRAINT IF EXISTS "{names["references"]}_clock_checked"')
    ensure_tables(judge.uri, prefix=judge.prefix)
    assert all(row[0] for row in _rows(judge.uri, judge.prefix).values())


def test_an_older_installs_acceptance_after_a_clock_step_ends_the_distrust(judge, tmp_path):
    old = _code(_OLD_ACCEPT, tmp_path / "old")
    _s_accepted_then_distrusted(judge, ahead=True)
    before = _stamp(judge, "S")
    _accepted_by(old, judge.uri, "S", "v", judge.prefix)
    rows = _rows(judge.uri, judge.prefix)
    assert _stamp(judge, "S") - before == timedelta(microseconds=1)  # a real acceptance, moved by exactly that
    gate = judge("T", "A", {"v": "good"}, hits={"v": 70}).gates["v"]
    assert gate.state == "comparable" and not gate.passed, (gate.state, gate.message, rows)


def test_hole_2s_control_the_older_installs_acceptance_with_the_clock_right_ends_the_distrust(judge, tmp_path):
    old = _code(_OLD_ACCEPT, tmp_path / "old")
    _s_accepted_then_distrusted(judge, ahead=False)
    _accepted_by(old, judge.uri, "S", "v", judge.prefix)
    gate = judge("T", "A", {"v": "good"}, hits={"v": 70}).gates["v"]
    assert gate.state == "comparable" and not gate.passed, (gate.state, gate.message, _rows(judge.uri, judge.prefix))


# --------------------------------------------------------------------------------------------
# held: the installs that read the constraint (4fafd48, dea2bc0, c2a64d9) never distrust a history this
# version marked; a history marked by this version carries f19148d's comment too
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("older", ["4fafd48", "dea2bc0", "c2a64d9"])
def test_held_an_install_reading_the_constraint_leaves_a_marked_history_alone(answers, tmp_path, older):
    code = _code(older, tmp_path / older)
    _x_accepted_then_s_after_a_step(answers, None)
    _contacted_by(code, answers.uri)
    assert not any(row[0] for row in _rows(answers.uri).values()), _rows(answers.uri)
    verdict = answers("T", {"bm25": 0.70})
    gate = _gate(verdict)
    assert not gate.passed and gate.state != "not_compared" and _previous(verdict) == "S", (gate.state, gate.message)



# --------------------------------------------------------------------------------------------
# hole 3: e89ab96..f19148d^'s placement on a history this version marked whose ``position`` was dropped by hand
# --------------------------------------------------------------------------------------------

_AA3 = "aa3ae5c"  # f19148d^: places (and distrusts by its own means) whenever ``position`` is missing; no mark read


def _marked_history_with_position_dropped(answers) -> None:
    _x_accepted_then_s_after_a_step(answers, None)
    answers.sql("ALTER TABLE eval_references DROP COLUMN position")  # the mark (a constraint) stays


@pytest.mark.xfail(strict=True, raises=AssertionError, reason="hole 3 (FAILS OPEN, hand-dropped column): "
                   "aa3ae5c re-places a marked history whose position was dropped, wipes eligibility; this "
                   "version then sees the constraint and the column and checks nothing: T passes against X")
def test_an_older_placement_after_position_dropped_does_not_make_x_the_yardstick(answers, tmp_path):
    code = _code(_AA3, tmp_path / "aa3")
    _marked_history_with_position_dropped(answers)
    _contacted_by(code, answers.uri)
    assert _checked(answers.uri)
    verdict = answers("T", {"bm25": 0.70})
    gate = _gate(verdict)
    assert not gate.passed, (gate.state, gate.message, _previous(verdict), _rows(answers.uri))


def test_hole_3s_control_this_versions_contact_first_distrusts_and_t_is_not_compared(answers, tmp_path):
    """Since the answer gate compares a not-compared row with every row of its key recorded before,
    T's -0.25 from the distrusted S is shown: a measured failure against the recorded S, never a pass
    against X."""
    code = _code(_AA3, tmp_path / "aa3")
    _marked_history_with_position_dropped(answers)
    ensure_tables(answers.uri)  # this version re-places: a step: every row distrusted
    assert _comment(answers.uri) == measurements._F19148D_MARK
    _contacted_by(code, answers.uri)  # position there: aa3ae5c does nothing
    gate = _gate(answers("T", {"bm25": 0.70}))
    _shown_against_recorded(gate)

