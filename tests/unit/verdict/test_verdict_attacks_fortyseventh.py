"""The forty-seventh review of the verdict: 7f310bd (a perfect run's undefined rc_nauc is no drop: a measure may
say from the run's summary row that its NaN is at its best, ``Measure.nan_at_best``; rc_nauc's is "aurc exactly
0", ``metrics.retrieval.at_best``; ``evaluate_gate(at_best=...)`` passes such a row with no delta, on the live,
paired and recorded comparisons) attacked for "a regression that passes, or is accepted whole unnamed, because of
this rule", and for a NaN read as "at its best" when it is not.

No NaN found read as at its best when it is not, and no regression found passing because of the rule: aurc is
exactly 0 only when every loss is 0 (an errored question, an abstention question, a miss before refusal each
cost 1), and rc_nauc is NaN without hit@10 or on an empty frame only beside a NaN aurc. Holes (none fails open;
all three closed since by the lead, their tests plain: 1 by e3cf6e2, the verdict entry prints a missing number
with the missing mark; 2, the console says "rc_nauc not in the yardstick (a drop from it cannot be seen)" when
only the yardstick lacks it; 3, the refusal stays, fail closed, and says the true reason,
``verdict.retrieval._uncounted``: "recorded no drift of rc_nauc undefined in it (that run was at its best)"):

1. a crash of the report (every failed gate row without a yardstick or a delta): ``reporting.verdict_entry``
   formats a failed row's yardstick and delta with ``:.3f``/``:+.3f``; the run after a perfect run (now an
   eligible yardstick) fails its rc_nauc row with yardstick None ("measured now but not in the yardstick"), so
   ``report_metadata`` raises TypeError after the run was recorded: the report asset breaks. The same for a run
   that lost everything (rc_nauc row failed with delta None). Pre-existing in ``verdict_entry``, reached now after
   every perfect run.
2. a message that misleads (console): the same row is "rc_nauc not measured (nothing scored)" in the console's
   ``why``: today measured rc_nauc; the yardstick (the perfect run) did not. The gate is recorded ``comparable``
   (``_judge_against``'s state of a direct comparison, "stricter" since the eighth review) while its message says
   "FAILED (not compared)": the whole acceptance is refused as a measured regression.
3. a false refusal with a false message (drift ledger): a perfect run judged against its pinned reference on the
   same benchmark records its drift without rc_nauc (``carried_drift`` keeps rows with a delta); the next run,
   across a benchmark change, is refused ``not_compared`` because "the previous run recorded no drift from it for
   every gated metric (recorded by an older version, against another reference, or before the metric was gated)":
   none of the three is true. Before 7f310bd the perfect run failed, was no yardstick, and the same run passed.

Held (plain tests): at_best is empty for a run with an errored question, an abstention question, a miss, no
hit@10 column, no rows, and for a run that lost everything; a run that refuses every question whose golds were all
in its top 10 before refusal is at its best on rc_nauc, but its hit@1 drop is measured and the whole acceptance
refused; the run after a perfect run on the same benchmark never passes and a drop from the older reference is
shown there (the whole acceptance refused); the paired comparison passes a perfect run and fails one that lost
everything (measured); a run that lost everything after a perfect first run (rc_nauc alone gated, NaN on both
sides: "no gated metric could be judged") is recorded ``comparable`` and refused whole; the report's gate table
shows the at-best row (actual and delta "–", passed) without failing it.
"""

from __future__ import annotations

import pytest

from tests.unit.verdict import test_verdict_attacks_fortieth as fortieth

judge = fortieth.judge  # judge_run recording under a table prefix of its own; judge.accept

pytestmark = pytest.mark.integration

N = 100
TOL_RC = {"hit@1": 0.05, "rc_nauc": 0.05}
LOOSE = {"hit@1": 0.2, "rc_nauc": 0.05}  # hit@1 90 -> 100 -> 90 within tolerance: rc_nauc decides


def _frame(variant: str, hits: int, *, confident: bool = True):
    """``scored_frame`` with a confidence: 1 for a question found, 0 for a miss (``confident``), else the
    reverse (the misses answered first: rc_nauc below 0)."""
    from tests.verdict_frames import scored_frame

    frame = scored_frame(variant, hits, N)
    found = frame["hit@10"].astype(float)
    frame["confidence"] = found if confident else 1.0 - found
    return frame

def _refused_whole(judge, verdict, run_id: str, *says: str) -> None:
    """``verdict``'s v failed as a measured comparison (``comparable``), its message saying each of ``says``, and
    ``accept run_id`` whole refuses it."""
    gate = verdict.gates["v"]
    assert not gate.passed and gate.state == "comparable", gate.message
    for text in says:
        assert text in gate.message, gate.message
    with pytest.raises(ValueError):
        judge.accept(run_id)


def _row(frame):
    from eval_pipeline.scoring.variant import summarize

    return summarize({"v": frame}).iloc[0]


def _perfect_after(judge, tolerances, *, bench="A"):
    """r1: v finds 90 of 100 (rc_nauc a number), the first run (the pinned reference); r2: v finds every gold at
    rank 1 (rc_nauc NaN, aurc 0): passes, eligible, the previous run of what follows."""
    assert judge("r1", bench, {"v": "k"}, frames={"v": _frame("v", 90)}, tolerances=tolerances).passed
    r2 = judge("r2", bench, {"v": "k"}, frames={"v": _frame("v", 100)}, tolerances=tolerances)
    assert r2.passed and r2.eligible, r2.gates["v"].message
    return r2


# ---------------------------------------------------------------------------------------------------------
# at_best: no NaN read as a best when it is not
# ---------------------------------------------------------------------------------------------------------


def _errored_one(frame):
    frame.loc[0, "errored"] = True
    return frame


def _one_abstention(frame):
    frame.loc[0, "answerable"] = False
    return frame


@pytest.mark.parametrize("make, best", [
    (lambda: _frame("v", 100), {"rc_nauc"}),
    (lambda: _frame("v", 0), set()),  # lost everything: aurc 1
    (lambda: _frame("v", 99), set()),  # one miss: rc_nauc a number
    (lambda: _errored_one(_frame("v", 100)), set()),  # an errored question costs 1
    (lambda: _one_abstention(_frame("v", 100)), set()),  # an abstention question answered costs 1
    (lambda: _frame("v", 100).drop(columns=["hit@10"]), set()),  # no losses: aurc NaN
    (lambda: _frame("v", 100).iloc[:0], set()),  # no rows
], ids=["perfect", "lost-everything", "one-miss", "errored", "abstention", "no-hit@10", "empty"])
def test_held_at_best_only_for_a_run_that_lost_nothing(make, best):
    from eval_pipeline.metrics.retrieval import at_best

    row = _row(make())
    assert at_best(row) == best, (row.get("aurc"), row.get("rc_nauc"))
    assert at_best({"rc_nauc": float("nan")}) == set()  # no aurc: never a best
    assert at_best({"rc_nauc": float("nan"), "aurc": None}) == set()


def test_held_a_run_that_refuses_everything_is_at_its_best_on_rc_nauc_but_its_drop_is_measured(judge):
    """r1 90 found; r2 refuses every question (returned 0) while its golds were all in its top 10 before refusal
    (``hit@10 without refusal`` 1): every loss 0, rc_nauc at its best, but hit@1 1 -> 0 is measured and the whole
    acceptance refused."""
    assert judge("r1", "A", {"v": "k"}, frames={"v": _frame("v", 90)}, tolerances=TOL_RC).passed
    frame = _frame("v", 100)
    frame["hit@10 without refusal"] = 1.0
    for column in [c for c in frame.columns if c.split("@")[0] in ("hit", "recall")] + ["mrr", "ndcg@10", "map"]:
        frame[column] = 0.0
    frame["returned"] = 0
    frame["first_relevant_rank"] = None
    _refused_whole(judge, judge("r2", "A", {"v": "k"}, frames={"v": frame}, tolerances=TOL_RC), "r2",
                   "hit@1 0.9000 -> 0.0000")


# ---------------------------------------------------------------------------------------------------------
# the run after a perfect run (its rc_nauc NaN in the yardstick)
# ---------------------------------------------------------------------------------------------------------


def test_held_the_run_after_a_perfect_run_never_passes(judge):
    """r3 finds 90 again with the same confidence as r1 (its pinned reference): r2's rc_nauc is NaN, so today's
    rc_nauc cannot be compared with it: "FAILED (not compared)" against r2, though r1 passes. Recorded
    ``comparable`` (``_judge_against`` gives a direct comparison that state, known since the eighth review:
    stricter), so the whole acceptance is refused; it never passes."""
    _perfect_after(judge, LOOSE)
    r3 = judge("r3", "A", {"v": "k"}, frames={"v": _frame("v", 90)}, tolerances=LOOSE)
    assert not r3.eligible
    _refused_whole(judge, r3, "r3",
                   "FAILED (not compared): gated metric(s) rc_nauc measured now but not in the yardstick")


def test_held_the_run_after_a_perfect_run_shows_a_drop_from_an_older_run(judge):
    """r3's confidence answers its misses first (rc_nauc below 0): not compared with r2, measured against r1 (the
    reference and a recorded run): a measured regression, the whole acceptance refused."""
    _perfect_after(judge, LOOSE)
    r3 = judge("r3", "A", {"v": "k"}, frames={"v": _frame("v", 90, confident=False)}, tolerances=LOOSE)
    _refused_whole(judge, r3, "r3", "rc_nauc 0.9541 -> ")


def _after_perfect_rows(judge):
    _perfect_after(judge, LOOSE)
    r3 = judge("r3", "A", {"v": "k"}, frames={"v": _frame("v", 90)}, tolerances=LOOSE)
    assert not r3.gates["v"].passed and "rc_nauc measured now but not in the yardstick" in r3.gates["v"].message
    return r3


@pytest.mark.parametrize("hits", [90, 50], ids=["rc_nauc-alone", "beside-a-measured-drop"])
def test_the_report_entry_renders_the_run_after_a_perfect_run(judge, hits):
    """After r2 (perfect), r3 fails its rc_nauc row against r2 with yardstick None: alone (90 found, hit@1 within
    0.2), or beside a measured hit@1 drop (50 found): the report's verdict entry raises either way."""
    from eval_pipeline.reporting.verdict_entry import verdict_entry

    _perfect_after(judge, LOOSE)
    r3 = judge("r3", "A", {"v": "k"}, frames={"v": _frame("v", hits)}, tolerances=LOOSE)
    assert not r3.gates["v"].passed, r3.gates["v"].message
    assert "`v`: **FAILED**" in verdict_entry(r3, "Gate FAILED for `v`.")  # rendered: no TypeError


def test_the_report_entry_renders_a_run_that_lost_everything(judge):
    from eval_pipeline.reporting.verdict_entry import verdict_entry

    assert judge("r1", "A", {"v": "k"}, frames={"v": _frame("v", 90)}, tolerances={"rc_nauc": 0.05}).passed
    r2 = judge("r2", "A", {"v": "k"}, frames={"v": _frame("v", 0)}, tolerances={"rc_nauc": 0.05})
    assert not r2.gates["v"].passed and r2.gates["v"].state == "comparable", r2.gates["v"].message
    assert "`v`: **FAILED** (comparable)" in verdict_entry(r2, "Gate FAILED for `v`.")  # rendered: no TypeError


def test_held_control_the_report_entry_renders_a_measured_drop(judge):
    """Without a perfect run before: r1 90 found, r2 50, both rows measured: the entry names the drops."""
    from eval_pipeline.reporting.verdict_entry import verdict_entry

    assert judge("r1", "A", {"v": "k"}, frames={"v": _frame("v", 90)}, tolerances=TOL_RC).passed
    r2 = judge("r2", "A", {"v": "k"}, frames={"v": _frame("v", 50)}, tolerances=TOL_RC)
    assert r2.gates["v"].state == "comparable", r2.gates["v"].message
    text = verdict_entry(r2, "Gate FAILED for `v`.")
    assert "hit@1 0.500 vs 0.900 (-0.400, tol 0.05, previous)" in text, text


def test_the_console_does_not_say_a_measured_rc_nauc_was_not_measured(judge):
    from eval_pipeline.reporting.console import summary_table

    r3 = _after_perfect_rows(judge)
    why = summary_table(r3).rows[0][-1]
    assert "not measured (nothing scored)" not in why, why
    assert why.startswith("rc_nauc not in the yardstick (a drop from it cannot be seen)"), why


def test_held_control_the_console_names_a_measured_drop(judge):
    from eval_pipeline.reporting.console import summary_table

    assert judge("r1", "A", {"v": "k"}, frames={"v": _frame("v", 90)}, tolerances=TOL_RC).passed
    r2 = judge("r2", "A", {"v": "k"}, frames={"v": _frame("v", 50)}, tolerances=TOL_RC)
    why = summary_table(r2).rows[0][-1]
    assert why.startswith("hit@1 -0.400 beyond its tolerance 0.050"), why


def test_held_the_report_gate_table_shows_the_at_best_row_as_passed(judge):
    """r2 perfect after r1: its rc_nauc rows pass with no delta; the report's gate table, the verdict entry and
    the console show it passed (no failed row, no crash)."""
    import pandas as pd

    from eval_pipeline.common.formatting import markdown_table
    from eval_pipeline.reporting.console import summary_table
    from eval_pipeline.reporting.run import GATE_COLUMNS
    from eval_pipeline.reporting.verdict_entry import verdict_entry

    r2 = _perfect_after(judge, TOL_RC)
    rows = [r for r in r2.gate_rows() if r["metric"] == "rc_nauc"]
    assert rows and all(r["passed"] is True and r["delta"] is None for r in rows), rows
    table = markdown_table(pd.DataFrame(r2.gate_rows()), GATE_COLUMNS)
    assert "rc_nauc" in table and "False" not in table, table
    assert "- `v`: passed (comparable)" in verdict_entry(r2, "Gate passed.")
    assert summary_table(r2).rows[0][-2].startswith("passed"), summary_table(r2).rows


# ---------------------------------------------------------------------------------------------------------
# the drift ledger across a benchmark change after a perfect run
# ---------------------------------------------------------------------------------------------------------


def _across_a_change(judge, second_hits: int):
    """r1 on A (90 found, the pinned reference); r2 on A with ``second_hits`` (100: perfect, judged against r1
    directly: its drift recorded); r3 on B (the benchmark changed), the same configuration, 100 found on B but
    r1's confidence on its 90: paired with r2 (today's results are its configuration's) and r1 by configuration."""
    assert judge("r1", "A", {"v": "k"}, frames={"v": _frame("v", 90)}, tolerances=LOOSE).passed
    r2 = judge("r2", "A", {"v": "k"}, frames={"v": _frame("v", second_hits)}, tolerances=LOOSE)
    assert r2.passed, r2.gates["v"].message
    return r2, judge("r3", "B", {"v": "k"}, frames={"v": _frame("v", 90)}, tolerances=LOOSE)


def test_held_control_the_ledger_carries_rc_nauc_across_a_change(judge):
    r2, r3 = _across_a_change(judge, 95)
    assert "rc_nauc" in r2.provenance["drift"]["v"]["metrics"], r2.provenance.get("drift")
    gate = r3.gates["v"]
    assert gate.passed, gate.message


def test_a_perfect_run_does_not_make_the_next_benchmark_change_not_compared_for_a_false_reason(judge):
    r2, r3 = _across_a_change(judge, 100)
    assert "rc_nauc" not in r2.provenance["drift"]["v"]["metrics"], r2.provenance.get("drift")
    gate = r3.gates["v"]
    assert not gate.passed and gate.state == "not_compared", gate.message  # fail closed, as before
    assert "recorded by an older version, against another reference" not in gate.message, gate.message
    assert "recorded no drift of rc_nauc undefined in it (that run was at its best)" in gate.message, gate.message


# ---------------------------------------------------------------------------------------------------------
# the paired comparison
# ---------------------------------------------------------------------------------------------------------


def _rank_90(variant, reference):
    """A reference configuration ranked on today's questions: 90 found, confident on them (rc_nauc a number)."""
    return _frame(variant, 90)


@pytest.mark.parametrize("hits, passes", [(100, True), (0, False)], ids=["perfect", "lost-everything"])
def test_held_the_paired_comparison_reads_the_run_not_the_nan(judge, hits, passes):
    """r0, r1 on A with configuration k1 (r0 the pinned reference); r2 on B with k2: r1's configuration paired
    on B (rc_nauc a number). A perfect r2 passes its NaN; one that lost everything fails it, measured."""
    for run_id in ("r0", "r1"):
        assert judge(run_id, "A", {"v": "k1"}, frames={"v": _frame("v", 90)}, tolerances={"rc_nauc": 0.05}).passed
    r2 = judge("r2", "B", {"v": "k2"}, frames={"v": _frame("v", hits)}, tolerances={"rc_nauc": 0.05},
               rank_reference=_rank_90)
    gate = r2.gates["v"]
    assert gate.state == "paired", gate.message
    assert gate.passed is passes, gate.message
    assert ("undefined today: the run is at its best" in gate.message) is passes, gate.message


# ---------------------------------------------------------------------------------------------------------
# a perfect yardstick and a run that lost everything (both NaN)
# ---------------------------------------------------------------------------------------------------------


def test_held_control_a_run_that_lost_everything_after_a_perfect_one_is_measured_against_an_older_reference(judge):
    """r1 90 (the reference), r2 perfect, r3 lost everything, gated on rc_nauc alone: NaN on both sides against
    r2 (not judged), measured against r1: the whole acceptance refused."""
    _perfect_after(judge, {"rc_nauc": 0.05})
    _refused_whole(judge, judge("r3", "A", {"v": "k"}, frames={"v": _frame("v", 0)}, tolerances={"rc_nauc": 0.05}),
                   "r3")


def test_held_a_run_that_lost_everything_after_a_perfect_first_run_is_not_accepted_whole(judge):
    """r1 perfect (a first run: eligible, the reference), r2 lost everything, gated on rc_nauc alone: NaN on both
    sides is "measured on neither side" (the message says nothing was judged), but the gate fails and is recorded
    ``comparable`` (``_judge_against``'s state of a direct comparison): the whole acceptance is refused."""
    assert judge("r1", "A", {"v": "k"}, frames={"v": _frame("v", 100)}, tolerances={"rc_nauc": 0.05}).passed
    _refused_whole(judge, judge("r2", "A", {"v": "k"}, frames={"v": _frame("v", 0)}, tolerances={"rc_nauc": 0.05}),
                   "r2", "no gated metric could be judged")


def test_held_the_run_after_a_perfect_run_is_accepted_by_naming_the_variant(judge):
    """What the README says: the run after a perfect one fails its rc_nauc row (not in the yardstick) until it is
    accepted naming the variant; the whole acceptance refuses it; once named, the next run is judged against it."""
    from eval_pipeline.history.runs import NameTheRun

    _after_perfect_rows(judge)
    with pytest.raises(NameTheRun, match="--variant v"):
        judge.accept("r3")
    assert judge.accept("r3", variants=["v"]) == ["v"]
    r4 = judge("r4", "A", {"v": "k"}, frames={"v": _frame("v", 90)}, tolerances=LOOSE)
    assert r4.gates["v"].passed and r4.gates["v"].state == "comparable", r4.gates["v"].message
