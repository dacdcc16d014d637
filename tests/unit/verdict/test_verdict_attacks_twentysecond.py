"""The twenty-second review of the verdict: 2d9c93e. (a) THE READING RULE:
``measurements._latest_acceptance`` (measurements.py:640-657) compares the unlogged candidates with
the latest logged acceptance's LOG position (before: the GREATEST of its row's and its log's), so a
row whose ``accepted_position`` is past its own latest log entry is an ``acceptance_conflict`` even
with itself (runs.py:723-727: "accept the intended one again"). (b) THE TRIGGER CHECK:
``HAS_PLACEMENT_TRIGGER_SQL`` (measurements.py:325-333) requires the trigger enabled, ``tgtype`` 19,
the function's name and body digest, and no other ``*_measurements_place_acceptance`` trigger on
the table. Runs judged with the eighth review's ``judge``/``answers`` fixtures against the session
Postgres (marked ``integration``); the twelfth's ``_retrieval_row``, the fifteenth's
``restore_then_delete_its_entry``, the twentieth's ``_older_install_accepts``/``_positions``, the
twenty-first's ``_re_acceptance_with_its_log_entry_deleted``.

Attacked: every way a row lands past its own log entry without a deleted entry or a foreign
trigger (the legacy placement ``_place_acceptances``; the accept code of 3eb5cd5, 6dbbf0e, 907c196,
87cb394^, c089045, 87cb394..1a35039, and the code before 3eb5cd5, read with ``git show``); this
version's accept of several variants at once, and again; whether "accept again" ends a
self-conflict through the command the message names (the real command line; retrieval and
answers); the fifteenth's unloggable acceptance; the previous-run order (``_ORDERS["latest"]``,
measurements.py:561, still GREATEST(row, log)) and ``moved_reference``'s "accepted since"
(runs.py:764-765) with a row placed far ahead; triggers that pass the check but never fire.

Closed since by the lead (each test below is now plain; each fix removed in turn fails its test):
hole 1, ``_place_acceptances`` reads a row stamped after its latest entry as that same acceptance
unless a measurement was recorded or an acceptance logged between the two stamps; hole 2, the
self-conflict also offers a newer run of the variant (the test accepts one through the command
line); hole 3, with nothing logged, an unlogged acceptance of a run that has a run row (every
version logs those: its entry was deleted) conflicts with itself; hole 4, the check requires no
WHEN condition and ``UPDATE OF accepted_at`` (``tgqual``, ``tgattr``).

Holes (strict xfails, each confirmed failing on 2d9c93e, and with --runxfail on an AssertionError
about the verdict; holes 1-3 also run at 2d9c93e^ in a frozen worktree: hole 1 passes there (a
regression of 2d9c93e), hole 3 fails there too (older), hole 2 needs hole 1's self-conflict):

1. an answer acceptance made by the code before 3eb5cd5 is, after the upgrade, "placed after its
   entry in the acceptance log": a spurious stop, not stuck (accepting again ends it; tested).
   Reachable by normal use on upgrade: every history whose latest answer acceptance of a
   (variant, grader) was made before 3eb5cd5 with a run row. That code's ``accept_answer_run``
   (``git show 3eb5cd5^:eval_pipeline/history/answers.py``, lines 714-722) stamped the row with
   ``clock_timestamp()``, then logged with no ``accepted_at`` (the column's DEFAULT ``now()``, the
   transaction's start: EARLIER than the row's stamp). ``_upgrade`` copies the row's stamp
   (measurements.py:439), and ``_place_acceptances`` (measurements.py:287-295) reads "row stamped
   later than every entry of its own" as "accepted again with that entry deleted" and puts the
   row at ``after + 0.75``, its entry at ``after + 0.5 k/(n+1)``. Before 2d9c93e the GREATEST hid
   it (the row conflicted only with an acceptance logged after it in the same bucket, which is
   older and also spurious); now it conflicts with its own entry (measurements.py:653): a1 (0.90,
   equal to a0) is not compared, "run a0's latest acceptance is placed after its entry in the
   acceptance log (accepted again with that entry deleted, or placed by a trigger this version did
   not make)", neither of which happened. The premise ("every version logs the row's own stamp,
   or logs without stamping: never earlier", measurements.py:287-288) is false for this version.
   Simulated: accepted by this version, the entry's stamp set 1 ms before the row's, the position
   columns dropped (the fifteenth's ``_as_before_positions``). Fix: in ``_place_acceptances``, a
   row stamped after its latest entry is that same acceptance when nothing was recorded or
   logged between the two stamps (the same ``after`` and no other log entry of the variant and
   aspect between them): place it at its entry's position; only then is it "accepted again".

2. hole 1's self-conflict on an answer row whose run's retrieval cannot be accepted: the command
   the conflict names cannot work (misleading; not strictly stuck: the gate's trailing hint
   "accept a run to make it the reference" still works through ANOTHER run whose retrieval and
   answers are acceptable). ``runs.acceptance_conflict`` (runs.py:723-727) names only ``python -m
   eval_pipeline.history accept a0 --variant bm25``; the command line (history/__main__.py:60-66)
   and the Dagster job (assets/reference.py:49-53) call ``accept_reference`` first, which refuses
   the retrieval (here "has errored questions"; also a reranker fallback, a ``maybe_renamed_from``
   gate), exit 2 / fail, and never reach ``accept_answer_run``: a2 (equal to a0) stays not
   compared. Reachable after hole 1 by normal use (a run whose retrieval had an errored question
   while its answers were fine, its answers accepted before 3eb5cd5); the same applies to any
   self-conflict (hand edit, foreign trigger) of a run whose retrieval is refused today. Fix: the
   self-conflict message also offers another run (as the two-run message does); the command line
   accepts the answers when the retrieval is refused for reasons that are the retrieval's own (or
   offers an answers-only accept); fixing hole 1 removes the normal-use path.

3. (weak: a hand-deleted log entry AND a row placed by a foreign sequence) with nothing logged,
   a row's own position is trusted by the previous-run order and by "accepted since" (FAILS OPEN;
   not new: fails at 2d9c93e^ too). 2d9c93e's docstring (measurements.py:322-324: "What a
   connection that cannot restore it reads is safe anyway: a row's position above its log entry's
   is an acceptance missing from the log") holds only while the row HAS an entry. r1 (0.90)
   accepted, r2 (1.00), r3 (0.97) judged; r1's only entry deleted and its row placed at 10001.0
   (as a trigger drawing from another history's sequence does: the twentieth/twenty-first's
   non-owner or pre-restore cases; the placement stays in the data after the owner restores the
   trigger): no logged acceptance, so ``_latest_acceptance`` returns the unlogged r1 with no
   conflict; ``_ORDERS["latest"]`` (GREATEST(seq, ACCEPTED_POSITION)) makes r1 the previous run
   too; ``moved_reference`` sees previous == reference (judged against none): r4 (0.91, -0.06 from
   r3) "passed: 2 metric(s) within tolerance (the previous run is also the pinned reference)".
   The control (the row where this version placed it) keeps r3 the previous run and r4 fails.
   Fix: read one position everywhere: the log's when the row is logged (``_ORDERS["latest"]`` and
   ``ACCEPTED_POSITION`` as ``_latest_acceptance`` now does), and for a row with no entry, its own
   only when not beyond the sequence's ``last_value`` (else a conflict); or treat a retrieval
   acceptance with no entry at all (always a deleted entry: ``accept`` logs whenever a run row
   exists, and ``USABLE`` needs one) as a conflict.

4. (weak: a hand-made trigger, then an older install's re-acceptance whose entry is deleted: the
   twenty-first's hole 4) the check reads neither the trigger's columns (``tgattr``) nor its WHEN
   (``tgqual``): ``BEFORE UPDATE OF eligible ... FOR EACH ROW`` or ``... WHEN (false)`` with this
   version's name and function is tgtype 19, enabled, and passes; it never fires on a stamp, r1's
   re-acceptance keeps its first position, r2 (0.90) is silently the reference and r4 (0.90,
   -0.10 from r1) passes (FAILS OPEN). Fix: also require ``t.tgqual IS NULL`` and ``t.tgattr`` =
   the ``accepted_at`` column's number (``pg_get_triggerdef`` compared with this version's would
   cover every field at once).

What held (plain tests): this version's accept of several variants at once, and again, is no
conflict (each row's position is its latest entry's); an older install's acceptance (stamp: the
trigger draws n; log: the default draws n + 1) is placed before its entry, r3 (equal) passes and r4
(-0.10) fails measured; the fifteenth's restored reference re-accepted by an older install with that
entry deleted is a self-conflict (at 2d9c93e^ r4 passed: the fix closes it) and the message's
command, run through the real command line, ends it (r5 -0.10 then fails measured); a row placed at
10001.0 that is not the latest logged acceptance is still a conflict (it is past the latest entry),
so the previous-run order's GREATEST never judges alone; hole 1's stop ends when a0 is accepted
again; hole 3's control.

By reading (no test): every positioned version's ``accept`` (c089045 through 2d9c93e) logs
``m.accepted_position`` from the row it has just stamped, in one transaction (row == entry); two
concurrent acceptances of one row serialize on the row lock, the second re-evaluates its SET (a new
``nextval``) and its INSERT reads its own UPDATE (row == entry); 3eb5cd5..87cb394^ stamp, then log
``m.accepted_at`` (equal stamps: the placement puts row == entry), and after the upgrade the
trigger draws n, the log's default n + 1 (row < entry); the code before 3eb5cd5 logs retrieval
acceptances without stamping a measurement and ``_upgrade`` copies the log's stamp (equal); its
oldest answer table (no ``accepted_at``) is stamped at ``created_at`` (earlier: row == entry);
``write``'s upsert never names ``accepted_at`` (measurements.py:94-95), so ``UPDATE OF accepted_at``
never fires on a re-record; a row placed behind its entry (a foreign sequence lower than ours) loses
the GREATEST to its entry, and with its entry deleted falls behind the latest logged acceptance,
which ``moved_reference`` catches (the previous run was judged against the deleted one); the
fifteenth's unloggable answer acceptance is no worse (accepting the logged a0 again still ends
it; a1 again still cannot: its known xfail). The self-conflict message names the found row's
variant (an earlier name after a rename: the old run has it, the command works unless the run's
gate carries ``maybe_renamed_from``, which ``accept_reference`` refuses whole: hole 2's kind).

Not reached: a real pre-3eb5cd5 install upgraded (simulated by the stamps); ``history accept
latest`` on a self-conflict (the same ``accept_reference`` path); ``before_run_id`` re-judging.
"""

from __future__ import annotations

import psycopg
import pytest

from tests.unit.verdict import test_verdict_attacks_eighth as eighth
from tests.unit.verdict import test_verdict_attacks_fifteenth as fifteenth
from tests.unit.verdict import test_verdict_attacks_twelfth as twelfth
from tests.unit.verdict import test_verdict_attacks_twentieth as twentieth
from tests.unit.verdict import test_verdict_attacks_twentyfirst as twentyfirst
from tests.unit.verdict.test_verdict_attacks_eighth import _why

pytestmark = pytest.mark.integration
judge, answers = eighth.judge, eighth.answers  # the eighth review's fixtures
_retrieval_row = twelfth._retrieval_row

SELF_CONFLICT = "has no entry of its own in the acceptance log"


def _accept(judge, run_id, **kw):
    from eval_pipeline.history.runs import accept_reference

    return accept_reference(judge.uri, run_id, prefix=judge.prefix, **kw)


def _rows(uri: str, table: str, run_id: str) -> list[tuple]:
    with psycopg.connect(uri, autocommit=True) as conn:
        return conn.execute(f'SELECT variant, aspect, accepted_position FROM "{table}" WHERE run_id = %s'
                            " AND accepted_at IS NOT NULL ORDER BY variant, aspect", (run_id,)).fetchall()


def _entries(uri: str, table: str, run_id: str) -> list[tuple]:
    with psycopg.connect(uri, autocommit=True) as conn:
        return conn.execute(f'SELECT variant, aspect, max(position) FROM "{table}" WHERE run_id = %s'
                            " GROUP BY variant, aspect ORDER BY variant, aspect", (run_id,)).fetchall()


# --------------------------------------------------------------------------------------------
# holes 1 and 2: an answer acceptance made by the code before 3eb5cd5, upgraded
# --------------------------------------------------------------------------------------------


def _legacy_answer_acceptance(answers) -> None:
    """a0 (0.90, with a run row: its acceptance logged) accepted as the code before 3eb5cd5 did it
    (the row stamped ``clock_timestamp()``, then the entry logged with ``now()``, the transaction's
    start: earlier), in a history from before positions; then read once by this version (the
    placement). Simulated: accepted by this version, the entry's stamp set 1 ms before the row's,
    the position columns dropped (the fifteenth's ``_as_before_positions``)."""
    from eval_pipeline.history.answers import accept_answer_run

    _retrieval_row(answers, "a0")
    assert answers("a0", {"bm25": 0.90}).passed
    assert accept_answer_run(answers.uri, "a0")[0] == [("bm25", "deterministic")]
    answers.sql("UPDATE eval_references SET accepted_at = accepted_at - interval '1 millisecond'"
                " WHERE run_id = %s AND aspect <> 'retrieval'", "a0")
    answers.sql("ALTER TABLE eval_measurements DROP COLUMN IF EXISTS accepted_position")
    answers.sql("ALTER TABLE eval_references DROP COLUMN IF EXISTS position")


def test_an_answer_acceptance_made_before_3eb5cd5_is_no_conflict_after_the_upgrade(answers):
    """Hole 1: a0 (0.90) accepted by the code before 3eb5cd5, upgraded; a1 (0.90, equal to the
    reference) must be compared and pass, not be stopped by a conflict no one made."""
    _legacy_answer_acceptance(answers)
    gate = eighth._answer_gate(answers("a1", {"bm25": 0.90}))
    assert gate.passed and gate.state != "not_compared", gate.message


def test_hole_1s_acceptance_is_placed_at_its_entry_and_a_drop_from_it_fails(answers):
    """Hole 1 closed: the legacy row stamped 1 ms after its entry, nothing recorded or logged in
    between, is placed at its entry's position (the same acceptance), and a1 (0.70, -0.20 from
    the reference a0) fails as compared, not stopped."""
    _legacy_answer_acceptance(answers)
    gate = eighth._answer_gate(answers("a1", {"bm25": 0.70}))  # this version's first read places it
    assert not gate.passed and gate.state != "not_compared", gate.message
    rows = dict(((v, a), p) for v, a, p in _rows(answers.uri, "eval_measurements", "a0") if a != "retrieval")
    entries = dict(((v, a), p) for v, a, p in _entries(answers.uri, "eval_references", "a0") if a != "retrieval")
    assert rows and rows == entries, (rows, entries)


def test_a_self_conflict_on_a_run_whose_retrieval_cannot_be_accepted_offers_a_newer_run_that_ends_it(
        answers, monkeypatch, capsys):
    """Hole 2 closed: a0's answer acceptance past its own entry (its entry deleted, a re-acceptance
    kept on the row), and a0's retrieval of bm25 with an errored question, so ``accept a0`` is
    refused on the retrieval. The conflict also offers a newer run of the variant: a1 accepted
    through the real command line ends it, and a2 (equal to a1) is compared and passes."""
    from eval_pipeline.history.__main__ import main
    from eval_pipeline.history.answers import accept_answer_run

    _retrieval_row(answers, "a0")
    assert answers("a0", {"bm25": 0.90}).passed
    assert accept_answer_run(answers.uri, "a0")[0] == [("bm25", "deterministic")]
    answers.sql("UPDATE eval_measurements SET accepted_position = accepted_position + 0.5 WHERE run_id = %s"
                " AND aspect <> 'retrieval'", "a0")  # a re-acceptance whose entry was deleted
    answers.sql("UPDATE eval_measurements SET errored = 1, eligible = false WHERE run_id = %s"
                " AND aspect = 'retrieval'", "a0")
    _retrieval_row(answers, "a1")
    gate = eighth._answer_gate(answers("a1", {"bm25": 0.90}))
    assert not gate.passed and SELF_CONFLICT in gate.message, gate.message
    assert "accept a0 --variant bm25" in gate.message and "or accept a newer run of bm25" in gate.message, gate.message
    monkeypatch.setenv("ATK22_HISTORY_URL", answers.uri)
    assert main(["--url-env", "ATK22_HISTORY_URL", "accept", "a0", "--variant", "bm25"]) == 2  # refused
    assert main(["--url-env", "ATK22_HISTORY_URL", "accept", "a1", "--variant", "bm25"]) == 0, \
        capsys.readouterr().err
    gate = eighth._answer_gate(answers("a2", {"bm25": 0.90}))
    assert gate.passed and gate.state != "not_compared", gate.message


# --------------------------------------------------------------------------------------------
# held: no legitimate flow of this version or an older install puts a row past its entry
# --------------------------------------------------------------------------------------------


def test_this_versions_accept_of_several_variants_at_once_and_again_is_no_conflict(judge):
    """Held: r1 (v, w) accepted whole, then again: each row's position is its latest entry's; r2
    (equal) is compared and passes for both."""
    from eval_pipeline.history.runs import table_names

    names = table_names(judge.prefix)
    judge("r1", "A", {"v": "good", "w": "good"})
    assert _accept(judge, "r1") == ["v", "w"]
    assert _accept(judge, "r1") == ["v", "w"]
    rows, entries = _rows(judge.uri, names["measurements"], "r1"), _entries(judge.uri, names["references"], "r1")
    assert rows == entries, (rows, entries)
    r2 = judge("r2", "A", {"v": "good", "w": "good"})
    assert all(r2.gates[v].passed and r2.gates[v].state != "not_compared" for v in "vw"), (_why(r2), _why(r2, "w"))


def test_an_older_installs_acceptance_is_placed_before_its_entry_and_is_no_conflict(judge):
    """Held: an older install (3eb5cd5..87cb394^: the row stamped, the trigger draws n; then
    logged, the log's default draws n + 1) accepts r2 (1.00); r3 equal is compared and passes, and
    r4 (0.90, -0.10) fails measured."""
    judge("r1", "A", {"v": "good"}, hits={"v": 90})
    _accept(judge, "r1")
    assert judge("r2", "A", {"v": "good"}).gates["v"].passed
    twentieth._older_install_accepts(judge.uri, judge.prefix, "r2")
    placed = twentieth._positions(judge.uri, judge.prefix, "r2")["r2"][1]
    entry = _entries(judge.uri, f"{judge.prefix}_references", "r2")[0][2]
    assert placed < entry, (placed, entry)
    r3 = judge("r3", "A", {"v": "good"})
    assert r3.gates["v"].passed and r3.reference["v"]["run_id"] == "r2", _why(r3)
    r4 = judge("r4", "A", {"v": "good"}, hits={"v": 90})
    assert not r4.gates["v"].passed and r4.gates["v"].state != "not_compared", _why(r4)


def test_a_restored_reference_re_accepted_by_an_older_install_with_its_entry_deleted_ends_by_the_command(
        judge, monkeypatch, capsys):
    """Held: the fifteenth's restored reference (r1 1.00, r2 0.90 by name, r1 again), r1 accepted
    once more by an older install and that entry deleted: r1's row is past its own latest entry, a
    self-conflict (r4 not compared); the message's command, run through the real command line,
    ends it, and r5 (0.90, -0.10 from r1) then fails measured."""
    from eval_pipeline.history.__main__ import main

    fifteenth.restore_then_delete_its_entry(judge)
    _accept(judge, "r1")  # logged again by this version: r1 is the latest logged
    twentieth._older_install_accepts(judge.uri, judge.prefix, "r1")
    judge.sql("DELETE FROM {references} WHERE seq = (SELECT max(seq) FROM {references})")
    r4 = judge("r4", "A", {"v": "good"}, hits={"v": 96})
    assert not r4.gates["v"].passed and SELF_CONFLICT in r4.gates["v"].message, _why(r4)
    monkeypatch.setenv("ATK22_HISTORY_URL", judge.uri)
    assert main(["--url-env", "ATK22_HISTORY_URL", "--prefix", judge.prefix, "accept", "r1", "--variant", "v"]) == 0
    capsys.readouterr()
    r5 = judge("r5", "A", {"v": "good"}, hits={"v": 90})
    assert not r5.gates["v"].passed and r5.gates["v"].state in ("comparable", "paired"), _why(r5)


def _place(judge, run_id: str, position: float) -> None:
    """``run_id``'s row placed at ``position`` as a trigger drawing from another history's sequence
    would (around our trigger: ``session_replication_role = replica``)."""
    with psycopg.connect(judge.uri, autocommit=True) as conn:
        conn.execute("SET session_replication_role = replica")
        conn.execute(f'UPDATE "{judge.prefix}_measurements" SET accepted_position = %s WHERE run_id = %s'
                     " AND variant = 'v' AND aspect = 'retrieval'", (position, run_id))


def test_a_row_far_ahead_that_is_not_the_latest_logged_acceptance_is_still_a_conflict(judge):
    """Held (the previous-run order's GREATEST): r1 (0.90) accepted, its row then placed at 10001.0
    (a foreign sequence), r2 (1.00) accepted after it by this version: r1 is the previous run by its
    row, but its row is past the latest entry (r2's): a conflict, so r3 (0.91, -0.09 from r2, the bar
    in force) is not passed."""
    judge("r1", "A", {"v": "good"}, hits={"v": 90})
    _accept(judge, "r1")
    _place(judge, "r1", 10001.0)
    r2 = judge("r2", "A", {"v": "good"})  # r1's row is past its own entry: a self-conflict, not compared
    assert not r2.gates["v"].passed and SELF_CONFLICT in r2.gates["v"].message, _why(r2)
    _accept(judge, "r2")
    r3 = judge("r3", "A", {"v": "good"}, hits={"v": 91})
    assert not r3.gates["v"].passed, (r3.previous["v"]["run_id"], _why(r3))


def test_an_unlogged_row_far_ahead_with_no_logged_acceptance_does_not_hide_the_previous_run(judge):
    """Hole 3: r1 (0.90) accepted, r2 (1.00) and r3 (0.97) judged (previous r2, then r3); r1's only
    entry deleted and its row placed at 10001.0 (a foreign sequence): nothing is logged, r1 is the
    reference (unlogged) and, by its row, the previous run too, judged against nothing ("the previous
    run is also the pinned reference"). r4 (0.91: -0.06 from r3, -0.09 from r2) must not pass against
    r1 alone. The control (the row left where this version placed it) fails r4."""
    judge("r1", "A", {"v": "good"}, hits={"v": 90})
    _accept(judge, "r1")
    assert judge("r2", "A", {"v": "good"}).gates["v"].passed
    assert judge("r3", "A", {"v": "good"}, hits={"v": 97}).gates["v"].passed
    judge.sql("DELETE FROM {references} WHERE run_id = %s", "r1")
    _place(judge, "r1", 10001.0)
    r4 = judge("r4", "A", {"v": "good"}, hits={"v": 91})
    assert not r4.gates["v"].passed, (r4.previous["v"]["run_id"], _why(r4))


def test_the_control_an_unlogged_row_where_this_version_placed_it_leaves_the_previous_run(judge):
    """Held (hole 3's control): as hole 3, r1's row left at its own position: r3 is the previous run,
    and r4 (0.91, -0.06 from r3) fails."""
    judge("r1", "A", {"v": "good"}, hits={"v": 90})
    _accept(judge, "r1")
    assert judge("r2", "A", {"v": "good"}).gates["v"].passed
    assert judge("r3", "A", {"v": "good"}, hits={"v": 97}).gates["v"].passed
    judge.sql("DELETE FROM {references} WHERE run_id = %s", "r1")
    r4 = judge("r4", "A", {"v": "good"}, hits={"v": 91})
    assert not r4.gates["v"].passed and r4.previous["v"]["run_id"] == "r3", _why(r4)


# --------------------------------------------------------------------------------------------
# hole 4 (weak: a hand-made trigger): the check reads neither the trigger's columns nor its WHEN
# --------------------------------------------------------------------------------------------


def _remake_trigger(judge, how: str) -> None:
    """The history's trigger made again by hand with this version's name, function, timing and
    level (``tgtype`` 19, enabled), but ``how`` (a column list or a WHEN condition) so it never fires
    on a stamp."""
    from eval_pipeline.history.measurements import has_placement_trigger, placement_function
    from eval_pipeline.history.runs import table_names

    names = table_names(judge.prefix)
    table = names["measurements"]
    columns, when = ("OF eligible", "") if how.startswith("OF") else ("OF accepted_at", how)
    with psycopg.connect(judge.uri, autocommit=True) as conn:
        conn.execute(f'DROP TRIGGER "{table}_place_acceptance" ON "{table}"')
        conn.execute(f'CREATE TRIGGER "{table}_place_acceptance" BEFORE UPDATE {columns} ON "{table}"'
                     f' FOR EACH ROW {when} EXECUTE FUNCTION "{placement_function(names)}"()')
        assert not has_placement_trigger(conn, names)  # not taken for this version's: the owner restores it


@pytest.mark.parametrize("how", ["OF eligible", "WHEN (false)"])
def test_a_trigger_that_never_fires_on_a_stamp_is_restored_so_a_deleted_re_acceptance_stays_a_conflict(judge, how):
    """Hole 4: the twenty-first's hole 4 with the trigger enabled, BEFORE UPDATE FOR EACH ROW, this
    version's function, but ``UPDATE OF eligible`` (``tgattr``) or ``WHEN (false)`` (``tgqual``):
    the check passes, an older install's re-acceptance of r1 is not placed on the row, its entry
    deleted: r2 (0.90) is silently the reference and r4 (0.90, -0.10 from r1, the bar in force)
    must not pass."""
    judge("r0", "A", {"v": "good"})
    _remake_trigger(judge, how)
    r4 = twentyfirst._re_acceptance_with_its_log_entry_deleted(judge)
    assert not r4.gates["v"].passed, _why(r4)
