"""The thirtieth review of the verdict: dea2bc0 on f19148d / 4fafd48 (the distrust is a flag of its own,
``measurements.distrusted``, read by the one yardstick rule ``USABLE``; ``accept`` clears it).

Attacked: what still reads a distrusted measurement, or what the distrust left behind, as a yardstick or
as evidence: ``measurements.create`` (the column added ``DEFAULT false``), ``check_placement_once`` /
``_distrust_everything_recorded``, ``accept`` (the only writer that clears the flag), ``write`` (a
re-recorded row: ``ON CONFLICT .. DO UPDATE`` of ``COLUMNS``, which do not name ``distrusted``), and the
readers that do not go through ``USABLE``: ``recorded_of``, ``earlier_names``, ``answer_graders_of``,
``answer_tolerance_floor``, ``answer_history_exists``, ``project_history`` / ``_pinned_gate``,
``moved_reference``. Histories: the twenty-ninth review's builders (imported), an older version's
placement as tests/unit/verdict/test_clock_checked_once.py simulates it, and the previous version's
(4fafd48's) own distrust: its ``_distrust_everything_recorded`` verbatim (eligible wiped, every stamped
acceptance placed 0.25 past its log entry) with its mark, on a measurements table without the
``distrusted`` column (4fafd48 never had it), and, where git can give it, 4fafd48's own code run in a
subprocess (``git archive``: nothing in the work tree or the index is touched).

Closed since by the lead (plain tests now; each failed as a strict xfail on dea2bc0): when
``measurements.create`` adds the ``distrusted`` column to a history already marked (by
4fafd48..dea2bc0^, whose distrust left some acceptances trusted), every row is distrusted, once
(hole 1); the placement trigger clears the flag on any new acceptance stamp, whoever writes it,
so an older install's accept ends the distrust as this version's does (hole 2). Left (a strict
xfail): hole 3, an older install's own verdict, which knows no flag, reading a history this
version distrusted (a mixed rollout; that verdict is made by the older code).

Holes (strict xfails, each confirmed failing on an AssertionError about the verdict, also with
--runxfail; each has a passing control):

1. FAILS OPEN, ``measurements.create`` measurements.py:254-260 with ``check_placement_once``
   measurements.py:373: the fix reaches only histories THIS version distrusts. A history the previous
   versions already distrusted (4fafd48 on first contact with any unmarked history; e89ab96..f19148d^
   on a placement whose stamps stepped) carries that version's distrust: ``eligible`` wiped, stamped
   acceptances moved +0.25, and the mark. On upgrade to dea2bc0 the column is added ``DEFAULT false``
   (every row trusted) and the mark says "checked": nothing re-distrusts it. So the twenty-ninth's
   holes 1 and 4, "closed" in dea2bc0, stay open for exactly the histories they were found on: X
   (bm25 answers 0.70, accepted through the library: no run row, no log entry), S (0.95, eligible,
   later); placed by 87cb394..f19148d^, contacted by 4fafd48 (wiped: S no longer eligible, X still
   accepted, no conflict since X's acceptance cannot be logged), then by dea2bc0: T (0.70, -0.25 from
   S) PASSES ``comparable`` against X. The same with 4fafd48's real code (``git archive``). Reach:
   anyone who ran 4fafd48 (or e89ab96..f19148d^ over a stepped clock: the 971fd8c state dir 10cb867
   mentions) against an older history before upgrading; 4fafd48 was the released version before this
   one. Control: the same history never contacted by 4fafd48 (dea2bc0 distrusts it itself): T is not
   compared. Fix: a history that gets the ``distrusted`` column while already marked was marked by a
   version that distrusted by wiping: distrust every row then (``ADD COLUMN`` with the default true for
   existing rows, then ``SET DEFAULT false``), or recognise the wipe's fingerprint (positions ``x.25``).

2. STUCK (the way out the message names does not work from an older install), ``accept`` is the only
   writer that clears the flag (measurements.py:881): 4fafd48's accept (the same UPDATE without
   ``distrusted = false``: it does not know the column) of a run dea2bc0 distrusted stamps, positions
   and logs it, and the run stays distrusted: ``python -m eval_pipeline.history accept S --variant v``
   run with the older install exits 0, and every later run of v is still "not compared", each message
   naming ``accept`` again. Reach: a mixed-version rollout (the job upgraded, the operators' CLI or the
   ``accept_reference`` job of another deployment not yet): the same accept with this version's code
   ends it (control). Severity: STUCK until the accepting install is upgraded; nothing says why.

3. FAILS OPEN (the previous version's own verdict, in a mixed rollout), ``check_placement_once``'s
   mark with the flag (measurements.py:341 ``CLOCK_CHECKED_SQL``, :373): this version's distrust is
   a column the previous version does not know, its mark one it does. After dea2bc0 has contacted
   the twenty-sixth's hole 3 history (X 0.70 accepted and logged, the clock set back a day, S 0.95 eligible; placed by
   87cb394..f19148d^: X's acceptance after S by time), 4fafd48 (a deployment not yet upgraded, the
   library pinned elsewhere) finds the mark, so it does not distrust (its own wipe), and reads every row
   as trusted: U (0.70, -0.25 from S) PASSES against X in 4fafd48's verdict, recorded eligible. 4fafd48
   alone (control) distrusts on its first contact: U fails. Held after it: this version's next run V is
   not compared (U's recorded reference X is not U: ``moved_reference``). Reach: two versions writing one
   history during a rollout; the older one's gate is the one that passes. Fix: a mark the previous
   version does not recognise for a history distrusted by flag (it then distrusts by its own wipe), or
   wipe eligibility as well as setting the flag.

1b. (hole 1, retrieval) the twenty-ninth's hole 4 history (a log-only acceptance of X, S eligible)
   distrusted by 4fafd48, then contacted by dea2bc0: T (hit@1 0.70, -0.25 from S) PASSES against X.

What held (controls and plain tests): a distrusted row re-recorded by a retried step (``write``'s ON
CONFLICT) stays distrusted (``COLUMNS`` does not name it): fails closed, the accept named ends it;
``recorded_of`` / ``answer_recorded_of`` / ``answer_graders_of`` / ``answer_history_exists`` /
``answer_tolerance_floor`` read distrusted rows as "measured before": each only makes the verdict
stricter (not new, flagged missing, strict history, a lower floor); ``project_history`` /
``_pinned_gate`` read the runs table and the log by their own serials (insertion order, never a
clock), which the distrust does not concern: only stricter; ``earlier_names`` follows ``inherits`` of
distrusted rows, but the lineage's reference is looked up through ``USABLE`` (none: no yardstick);
``moved_reference`` reads the recorded gate of ``latest`` (``USABLE``) only.

Not tried: a distrusted history whose variants were renamed across the distrust end to end; the report's
history sections (people-facing); REPEATABLE READ callers; e89ab96..f19148d^'s exact SQL (only 4fafd48's).
"""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from eval_pipeline.history import measurements
from eval_pipeline.history.answers import accept_answer_run
from eval_pipeline.history.runs import accept_reference, table_names
from tests.unit.verdict import test_clock_checked_once as once
from tests.unit.verdict import test_verdict_attacks_eighth as eighth
from tests.unit.verdict import test_verdict_attacks_thirtyfirst as thirtyfirst
from tests.unit.verdict import test_verdict_attacks_twentyninth as twentyninth

pytestmark = pytest.mark.integration
answers = eighth.answers  # the eighth review's fixture: answer runs through the library (no run row)
judge = eighth.judge  # the eighth review's fixture: retrieval runs under a prefix of their own

_gate = twentyninth._gate
_previous = twentyninth._previous
_checked = twentyninth._checked

_REPO = Path(__file__).resolve().parents[3]
_PREVIOUS_VERSION = "4fafd48"


# --------------------------------------------------------------------------------------------
# hole 1: a history the previous version distrusted (by wiping) is trusted again by the upgrade
# --------------------------------------------------------------------------------------------


def _distrusted_by_4fafd48(uri: str, prefix: str = "eval") -> None:
    """4fafd48's first contact with an unmarked history, in its one transaction: its
    ``_distrust_everything_recorded`` (verbatim: every eligibility wiped, every stamped acceptance
    placed 0.25 past its log entry) and its mark, on a measurements table without ``distrusted``
    (4fafd48 never made the column: the builders here are this version's, so it is dropped)."""
    names = table_names(prefix)
    t = measurements._ident(names)
    with psycopg.connect(uri) as conn:
        conn.execute(sql.SQL("ALTER TABLE {measurements} DROP COLUMN distrusted").format(**t))
        conn.execute(sql.SQL("UPDATE {measurements} SET eligible = false WHERE eligible").format(**t))
        conn.execute(sql.SQL(
            "UPDATE {measurements} m SET accepted_at = CASE WHEN " + measurements.FLAG_ONLY + " THEN m.accepted_at"
            " + interval '1 microsecond' ELSE m.accepted_at END,"
            " accepted_position = COALESCE(" + measurements.LOGGED_POSITION + ", m.seq) + 0.25"
            " WHERE m.accepted_at IS NOT NULL").format(**t))
        measurements._mark_clock_checked(conn, names)


def _previous_version_code(tmp: Path) -> Path | None:
    """4fafd48's eval_pipeline, extracted by ``git archive`` into ``tmp`` (read-only on the
    repository), or None when git or that commit is not available."""
    try:
        tar = subprocess.run(["git", "-C", str(_REPO), "archive", _PREVIOUS_VERSION, "eval_pipeline"],
                             capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    with tarfile.open(fileobj=io.BytesIO(tar)) as archive:
        archive.extractall(tmp, filter="data")
    return tmp


def _contacted_by_4fafd48_itself(uri: str, code: Path) -> None:
    """4fafd48's own ``ensure_tables`` (its first contact: no mark, so it distrusts and marks), in a
    process of its own with its code first on the path."""
    names = table_names("eval")
    with psycopg.connect(uri, autocommit=True) as conn:  # the column 4fafd48 never had
        conn.execute(sql.SQL("ALTER TABLE {measurements} DROP COLUMN distrusted").format(
            **measurements._ident(names)))
    out = thirtyfirst._run_old_install(code, "import sys, eval_pipeline.history.runs as r\n"
                                             "assert 'distrusted boolean' not in "
                                             "open(r.__file__.replace('runs.py', 'measurements.py')).read()\n"
                                             "r.ensure_tables(sys.argv[1])\nprint(r.__file__)\n", uri)
    assert out.returncode == 0 and str(code) in out.stdout, out.stderr[-2000:]
    assert out.stdout.strip() == str(code / "eval_pipeline" / "history" / "runs.py"), out.stdout


def test_a_history_the_previous_version_distrusted_is_still_distrusted_after_the_upgrade(answers):
    twentyninth._older_version_used_it(answers, older=True)  # no mark: 4fafd48 distrusts it on contact
    _distrusted_by_4fafd48(answers.uri)
    assert _checked(answers.uri)
    verdict = answers("T", {"bm25": 0.70})  # dea2bc0's first contact: the column added, DEFAULT false
    gate = _gate(verdict)
    assert not gate.passed, (gate.state, gate.message, _previous(verdict))


def test_the_same_with_the_previous_versions_own_code(answers, tmp_path):
    code = _previous_version_code(tmp_path)
    if code is None:
        pytest.skip(f"no git history with {_PREVIOUS_VERSION}")
    twentyninth._older_version_used_it(answers, older=True)
    _contacted_by_4fafd48_itself(answers.uri, code)
    assert _checked(answers.uri)
    verdict = answers("T", {"bm25": 0.70})
    gate = _gate(verdict)
    assert not gate.passed, (gate.state, gate.message, _previous(verdict))




def test_a_log_only_acceptance_the_previous_version_distrusted_stays_distrusted(judge):
    twentyninth._logged_unstamped_before_positions(judge, older=True)
    _distrusted_by_4fafd48(judge.uri, judge.prefix)
    verdict = judge("T", "A", {"v": "good"}, hits={"v": 70})
    assert not verdict.gates["v"].passed, eighth._why(verdict)


def test_hole_1s_control_retrieval_distrusted_by_this_version_t_fails(judge):
    twentyninth._logged_unstamped_before_positions(judge, older=True)
    verdict = judge("T", "A", {"v": "good"}, hits={"v": 70})
    assert not verdict.gates["v"].passed, eighth._why(verdict)


def test_hole_1s_control_distrusted_by_this_version_t_is_not_compared(answers):
    """Since the answer gate compares a not-compared row with every row of its key recorded before,
    T's -0.25 from the distrusted S is shown: a measured failure against the recorded S, never a pass
    against X."""
    twentyninth._older_version_used_it(answers, older=True)
    verdict = answers("T", {"bm25": 0.70})  # dea2bc0's first contact distrusts it itself
    gate = _gate(verdict)
    assert _checked(answers.uri)
    twentyninth._shown_against_recorded(gate)


# --------------------------------------------------------------------------------------------
# hole 2: an older install's accept does not clear the flag: the named way out does nothing
# --------------------------------------------------------------------------------------------


def _accepted_by_4fafd48(judge, run_id: str, variant: str) -> None:
    """4fafd48's ``measurements.accept`` (verbatim but for the flag it does not know): the row
    stamped and positioned, the acceptance logged."""
    names = table_names(judge.prefix)
    t = measurements._ident(names)
    with psycopg.connect(judge.uri) as conn:
        sequence = measurements._sequence(conn, names)
        conn.execute(sql.SQL(
            "UPDATE {measurements} SET accepted_at = clock_timestamp(),"
            " accepted_position = nextval(%(sequence)s::regclass)"
            " WHERE run_id = %(run)s AND variant = %(variant)s AND aspect = %(aspect)s").format(**t),
            {"run": run_id, "variant": variant, "aspect": "retrieval", "sequence": sequence})
        conn.execute(sql.SQL(
            "INSERT INTO {references} (corpus_signature, labels_fingerprint, scoring_protocol, benchmark_fingerprint,"
            " variant, run_id, note, aspect, accepted_by, accepted_at, position)"
            " SELECT r.corpus_signature, r.labels_fingerprint, r.scoring_protocol, m.benchmark, m.variant, m.run_id,"
            " '', m.aspect, 'older-cli', m.accepted_at, m.accepted_position FROM {measurements} m JOIN {runs} r"
            " ON r.run_id = m.run_id WHERE m.run_id = %s AND m.variant = %s AND m.aspect = %s").format(**t),
            (run_id, variant, "retrieval"))


def _distrusted_s(judge) -> None:
    """S (v hit 0.95, eligible) recorded, then every row distrusted (as dea2bc0's contact with a
    history an older version placed does) and marked; T not compared, as the message says."""
    judge("R", "A", {"v": "good"}, hits={"v": 90})
    judge("S", "A", {"v": "good"}, hits={"v": 95})
    names = table_names(judge.prefix)
    with psycopg.connect(judge.uri) as conn:
        measurements._distrust_everything_recorded(conn, names)
    t = judge("T", "A", {"v": "good"}, hits={"v": 95})
    assert t.gates["v"].state == "not_compared", eighth._why(t)


def test_an_older_installs_accept_of_a_distrusted_run_ends_the_distrust(judge):
    _distrusted_s(judge)
    _accepted_by_4fafd48(judge, "S", "v")
    verdict = judge("U", "A", {"v": "good"}, hits={"v": 95})
    gate = verdict.gates["v"]
    assert gate.passed and gate.state == "comparable", eighth._why(verdict)
    assert {r.get("against") for r in gate.rows} <= {"previous", "reference"} and gate.rows, gate.rows  # S trusted


def test_hole_2s_control_this_versions_accept_ends_it_and_a_regression_then_fails(judge):
    _distrusted_s(judge)
    assert accept_reference(judge.uri, "S", variants=["v"], prefix=judge.prefix) == ["v"]
    verdict = judge("U", "A", {"v": "good"}, hits={"v": 70})
    gate = verdict.gates["v"]
    assert not gate.passed and gate.state == "comparable", eighth._why(verdict)
    # against S as its yardstick, not merely shown against a recorded run
    assert {r.get("against") for r in gate.rows} <= {"previous", "reference"} and gate.rows, gate.rows


# --------------------------------------------------------------------------------------------
# hole 3: this version's mark tells the previous version "checked", its flag tells it nothing: a
# run the previous version judges after this version's distrust is judged against the untrusted rows
# --------------------------------------------------------------------------------------------

_JUDGE_AS_4FAFD48 = """
import os, sys
import eval_pipeline.verdict.answers as a
assert 'distrusted boolean' not in open(a.__file__.replace('verdict/answers.py', 'history/measurements.py')).read()
from eval_pipeline.verdict.answers import judge_answer_run, record_answers
from tests.verdict_frames import answer_frame
uri, run_id, rate = sys.argv[1], sys.argv[2], float(sys.argv[3])
verdict = judge_answer_run({'bm25': answer_frame('bm25', rate, engine='bm25')}, order=['bm25'],
                           corpus_signature='corpus-1', tolerances={'max_pass_rate_drop': 0.1,
                           'max_mean_score_drop': 0.1}, strict=False, connection_string=uri, run_id=run_id,
                           configurations={'bm25': 'cfg-bm25'})
record_answers(verdict, uri, run_id, run_eligible=verdict.passed)
print(a.__file__, verdict.passed)
"""


def _judged_by_4fafd48(uri: str, code: Path, run_id: str, rate: float) -> bool:
    """bm25 answers at ``rate`` judged and recorded by 4fafd48's own code (the eighth's fixture's
    arguments), in a process of its own; whether its verdict passed."""
    out = thirtyfirst._run_old_install(code, _JUDGE_AS_4FAFD48, uri, run_id, str(rate),
                                      pythonpath=f"{code}{os.pathsep}{_REPO}")
    assert out.returncode == 0 and str(code) in out.stdout, out.stderr[-2000:]
    assert out.stdout.split()[0] == str(code / "eval_pipeline" / "verdict" / "answers.py"), out.stdout
    return out.stdout.split()[-1] == "True"


def _stepped_then_contacted_by_this_version(answers) -> None:
    """The twenty-sixth's hole 3 history (X 0.70 accepted and logged; the clock set back a day; S 0.95
    eligible), placed by 87cb394..f19148d^ (X's acceptance after S by time, unchecked, no mark), then
    contacted by this version (every row distrusted, marked): T is not compared. Since the answer gate
    compares a not-compared row with every row of its key recorded before, T's -0.25 from the
    distrusted S is shown: a measured failure against the recorded S (no yardstick)."""
    from tests.unit.verdict import test_verdict_attacks_twentysixth as twentysixth

    twentysixth._set_back(answers, back=True)
    once.placed_by_an_older_version(answers.uri)
    twentyninth._shown_against_recorded(_gate(answers("T", {"bm25": 0.70})))
    assert _checked(answers.uri)


@pytest.mark.xfail(strict=True, raises=AssertionError, reason=(
    "FAILS OPEN (mixed rollout): after this version's distrust and mark, 4fafd48 sees the mark, does not wipe, "
    "knows no flag: U (-0.25 from S) passes against X in 4fafd48's own verdict"))
def test_a_run_the_previous_version_judges_after_the_distrust_does_not_pass_against_untrusted_rows(answers,
                                                                                                   tmp_path):
    code = _previous_version_code(tmp_path)
    if code is None:
        pytest.skip(f"no git history with {_PREVIOUS_VERSION}")
    _stepped_then_contacted_by_this_version(answers)
    passed = _judged_by_4fafd48(answers.uri, code, "U", 0.70)  # -0.25 from S
    assert not passed, "4fafd48 passed U (0.70) against X after this version's mark"


def test_held_this_version_does_not_take_the_run_the_previous_version_passed_for_a_bar(answers, tmp_path):
    """After hole 3, this version's V (0.70) is not compared: U's recorded gate names X as its
    reference, and U itself is now the only trusted bar (moved_reference). Since the answer gate
    compares a not-compared row with every row of its key recorded before, newest first, V's -0.25
    from the distrusted S is shown (U and T, at 0.70, show no drop): a measured failure, U no bar."""
    code = _previous_version_code(tmp_path)
    if code is None:
        pytest.skip(f"no git history with {_PREVIOUS_VERSION}")
    _stepped_then_contacted_by_this_version(answers)
    assert _judged_by_4fafd48(answers.uri, code, "U", 0.70)  # hole 3
    gate = _gate(answers("V", {"bm25": 0.70}))
    twentyninth._shown_against_recorded(gate)
    assert "the previous run U was judged against the pinned reference X" in gate.message, gate.message


def test_hole_3s_control_the_previous_version_alone_does_not_pass_u(answers, tmp_path):
    """4fafd48 alone (its own first contact: its wipe, its mark): U is not compared, and so is V after it."""
    code = _previous_version_code(tmp_path)
    if code is None:
        pytest.skip(f"no git history with {_PREVIOUS_VERSION}")
    from tests.unit.verdict import test_verdict_attacks_twentysixth as twentysixth

    twentysixth._set_back(answers, back=True)
    once.placed_by_an_older_version(answers.uri)
    with psycopg.connect(answers.uri, autocommit=True) as conn:  # the column 4fafd48 never had
        conn.execute("ALTER TABLE eval_measurements DROP COLUMN distrusted")
    assert not _judged_by_4fafd48(answers.uri, code, "U", 0.70)
    assert not _gate(answers("V", {"bm25": 0.70})).passed


# --------------------------------------------------------------------------------------------
# held: a distrusted row re-recorded by a retried step stays distrusted
# --------------------------------------------------------------------------------------------


def test_a_distrusted_answer_row_re_recorded_by_a_retried_step_stays_no_yardstick(answers):
    """a0 (bm25 0.90, eligible) distrusted (an older version's placement, this version's contact);
    a0's answer step retried (the same rows recorded again: ON CONFLICT update): still distrusted, so
    a1 is not compared; the way out (accept a0) then makes a1's -0.25 a measured failure. Since the
    answer gate compares a not-compared row with every row of its key recorded before, a1's -0.25 from
    T (0.90, recorded after the distrust, not compared) is shown: measured against that recorded row,
    a0 still no yardstick; after a0 is accepted, a2 is measured against a0."""
    twentyninth._both_measured(answers, older=True)
    assert _gate(answers("T", {"bm25": 0.90, "dense": 0.90})).state == "not_compared"
    assert answers("a0", {"bm25": 0.90, "dense": 0.90}) is not None  # the retried step: re-recorded
    with psycopg.connect(answers.uri, autocommit=True) as conn:
        assert conn.execute("SELECT bool_and(distrusted) FROM eval_measurements WHERE run_id = 'a0'").fetchone()[0]
    twentyninth._shown_against_recorded(_gate(answers("a1", {"bm25": 0.65, "dense": 0.90})), "T", "0.9000 -> 0.6500")
    assert accept_answer_run(answers.uri, "a0", variants=["bm25"])[0] == [("bm25", "deterministic")]
    gate = _gate(answers("a2", {"bm25": 0.65, "dense": 0.90}))
    assert not gate.passed and gate.state == "comparable", (gate.state, gate.message)
    twentyninth._compared_with_a_yardstick(gate, previous="a0")  # a0 accepted: a yardstick, not merely recorded
