"""The thirteenth review of the verdict, aimed at 3d449f5 (the twelfth review's fixes):
``_latest_acceptance``'s ``conflicts`` (history/measurements.py) and ``moved_reference``'s
``acceptance_conflict`` (history/runs.py); ``accept_reference``'s refusal of a run whose gate
records ``maybe_renamed_from`` (history/runs.py, recorded by verdict/retrieval.py
``record_verdict``); ``ConfigurationRefused`` moved to ranking/inputs.py and raised in
ranking/steps.py. Runs judged with the eighth review's ``judge`` fixture against the session's
embedded Postgres (marked ``integration``); nothing here needs Dagster.

Holes (strict xfails, each confirmed by running it; all three fixed since, now plain tests: the
anchor's conflict makes the variant not compared like the reference's; an acceptance is stamped
after every earlier one of its variant and aspect, so no conflict arises from a clock that ran
ahead; the message names the two candidate runs, `history.runs.acceptance_conflict`):

1. the anchor ignores the conflict (FAILS OPEN): eval_pipeline/verdict/retrieval.py:444
   ``anchor = reference_run(connection_string, identity=identity, ...)`` gets
   ``acceptance_conflict`` set (runs.py:751) but nothing reads it (``moved_reference`` is only
   called with ``ref``, retrieval.py:439). r1 on A the reference; r2 (0.90) and r3 (1.00) on B,
   r2 accepted, r3 accepted and its log entry deleted, r1 accepted again (so the any-benchmark
   reference r1 has no conflict): the B anchor is the older logged r2, and 1.00 -> 0.97 -> 0.94
   -> 0.91 on B passes in steps (the control with r3's log entry kept fails at r6). The
   eleventh's hole 5 through the anchor. Fix: at retrieval.py:444, if
   ``anchor.get("acceptance_conflict")`` set ``moved`` to the conflict message (or drop the
   anchor and fail not compared).

2. re-accepting the intended *logged* run does not clear a clock-ahead conflict, though the
   message promises it: measurements.py:520 stamps ``clock_timestamp()``, which is still before
   the unlogged stamp that ran ahead, so the unlogged run stays "after" the logged one and every
   run is not compared until the clock passes that stamp (a day here; for ever if it ran years
   ahead). Fail-closed, but stuck; only accepting the *unintended* unlogged run clears it. Fix:
   stamp ``GREATEST(clock_timestamp(), <max ACCEPTED_AT of the variant's aspect> + 1 µs)`` in
   ``accept`` (or log the unlogged one when re-accepting any run of the variant).

3. the conflict message's command names today's run: runs.py:706 writes ``accept RUN_ID
   --variant VARIANT``, and ``with_exact_command`` (retrieval.py:568-572) rewrites the generic
   ``accept RUN_ID`` into today's run ("accept r3 --variant v --variant VARIANT"): the user is
   told to accept the run that was not compared, not the intended one. By name, so not
   fail-open, but misleading. Fix: write the command without the literal ``RUN_ID`` (e.g.
   ``accept <intended run> --variant v``, or name both candidate runs).

Held (plain tests): re-accepting the unlogged run clears the conflict (r4 judged against it, a
0.94 fails measured); a history with no deletion and no clock step (acceptances re-done, a rename
with the same configuration accepted by name) never raises a conflict; the anchor control
(log entry kept) catches the slide; the way out of a refused rename run (materialize w2, it
inherits w and passes; ``accept latest`` takes that run; a later regression of w2 fails);
``ConfigurationRefused`` is one class (defined in inputs, used by steps and paired), a ValueError, no import
cycle. By reading: ``params["after"]`` is reset after the unlogged pick and stays None when
nothing is logged (the ``first`` fallback is unaffected); the conflict is set in both
``reference_run`` (retrieval, heirs, and the lineage ``older`` lookup, whose dict replaces
``ref`` before ``moved_reference``) and answers ``_lookup``; ``moved_reference``'s early return
on ``previous is None`` is unreachable with a reference found (the same key/any-identity lookup);
a legitimate history writes no unlogged acceptance (``accept`` logs through ``JOIN {runs}`` and
the pipeline records the run row before the answers, reporting/run.py:155-156; the run row is
upserted, never deleted); the Dagster job (assets/reference.py) and the CLI accept answers only
after ``accept_reference`` succeeded, so a maybe-renamed run is refused there too;
``ConfigurationRefused`` in steps.py:178/186/242 depends only on the question set's tuning part
(deterministic), and a stale question_set would fail today's own ranking or
``check_inputs_agree`` before the verdict.

Not reached: a conflict under heirs with both acceptances under different names; an anchor
conflict in the answer verdict (answers have no anchor); ties of stamps between the logged and
the unlogged acceptance (``>``: the logged one wins); the Dagster accept job run end to end.
"""

from __future__ import annotations

import pytest

from tests.unit.verdict import test_verdict_attacks_eighth as eighth
from tests.unit.verdict import test_verdict_attacks_twelfth as twelfth
from tests.unit.verdict.test_verdict_attacks_eighth import _why

judge, answers = eighth.judge, eighth.answers  # the eighth review's fixtures: runs judged against the session Postgres
_ahead, _answers, _answer_frame = twelfth._ahead, twelfth._answers, twelfth._answer_frame

CONFLICT = "no entry in the acceptance log"


# --------------------------------------------------------------------------------------------
# 1. the acceptance conflict
# --------------------------------------------------------------------------------------------


@pytest.mark.integration
def test_re_accepting_the_logged_run_after_a_clock_ahead_stamp_clears_the_conflict(judge):
    """r1 (0.90) accepted with the clock a day ahead, its log entry deleted; r2 (1.00) accepted
    after the clock was set right (logged). As found: r2 was stamped now, before r1's stamp, so r3
    was not compared (the conflict), and accepting r2 again, as the message asks, stamped it before
    r1's again: not compared until the clock passed r1's stamp. Fixed: an acceptance is stamped
    after every earlier one of its variant and aspect (`measurements.accept`), so r2 is the latest
    by the log and by time, no conflict arises, and r3 and r4 are judged against r2."""
    from eval_pipeline.history.runs import accept_reference

    judge("r1", "A", {"v": "good"}, hits={"v": 90})
    accept_reference(judge.uri, "r1", prefix=judge.prefix)
    _ahead(judge, "r1")
    judge.sql("DELETE FROM {references} WHERE run_id = %s", "r1")
    judge("r2", "A", {"v": "good"})
    accept_reference(judge.uri, "r2", prefix=judge.prefix)
    step = judge("r3", "A", {"v": "good"})
    assert step.reference["v"]["run_id"] == "r2" and step.gates["v"].passed, _why(step)
    accept_reference(judge.uri, "r2", variants=["v"], prefix=judge.prefix)  # accepted again: still no conflict
    after = judge("r4", "A", {"v": "good"}, hits={"v": 94})
    assert CONFLICT not in after.gates["v"].message and after.reference["v"]["run_id"] == "r2", _why(after)
    assert not after.gates["v"].passed and after.gates["v"].state == "comparable", _why(after)  # 0.94 vs 1.00


@pytest.mark.integration
def test_re_accepting_the_unlogged_run_clears_the_conflict(judge):
    """Held: r1 (0.90) accepted, r2 (1.00) accepted and its log entry deleted: r3 not compared;
    accepting r2 again logs it, and r4 is judged against r2 (0.94 fails as measured)."""
    from eval_pipeline.history.runs import accept_reference

    eighth.two_acceptances(judge)
    judge.sql("DELETE FROM {references} WHERE run_id = %s", "r2")
    step = judge("r3", "A", {"v": "good"})
    assert not step.gates["v"].passed and CONFLICT in step.gates["v"].message, _why(step)
    accept_reference(judge.uri, "r2", variants=["v"], prefix=judge.prefix)
    after = judge("r4", "A", {"v": "good"}, hits={"v": 94})
    assert after.reference["v"]["run_id"] == "r2" and CONFLICT not in after.gates["v"].message, _why(after)
    assert not after.gates["v"].passed and after.gates["v"].state != "not_compared", _why(after)


@pytest.mark.integration
def test_a_history_without_deletion_or_clock_step_has_no_conflict(judge):
    """Held: accept r1, r2, r1 again, r3 (renamed w->w2 same configuration in between): no
    conflict ever raised."""
    from eval_pipeline.history.runs import accept_reference

    for run_id in ("r1", "r2"):
        judge(run_id, "A", {"v": "good", "w": "good"})
        accept_reference(judge.uri, run_id, prefix=judge.prefix)
    accept_reference(judge.uri, "r1", prefix=judge.prefix)
    step = judge("r3", "A", {"v": "good", "w2": "good"})
    accept_reference(judge.uri, "r3", variants=["v", "w2"], prefix=judge.prefix)
    step = judge("r4", "A", {"v": "good", "w2": "good"})
    assert all(CONFLICT not in g.message for g in step.gates.values()) and step.passed, [
        _why(step, v) for v in step.gates]


@pytest.mark.integration
def test_the_anchor_does_not_ignore_an_acceptance_conflict(judge):
    """r1 on A (the reference); r2 (0.90) and r3 (1.00) on B, both judged against r1 (drift
    recorded); r2 accepted (logged), r3 accepted and its log entry deleted (the eleventh's hole 5
    on benchmark B); r1 accepted again (logged, after r3): the reference of any benchmark is r1
    (no conflict there), today's B anchor (``reference_run(identity=B)``) is the logged r2 with r3
    in ``conflicts``, which nobody reads (eval_pipeline/verdict/retrieval.py:444)."""
    from eval_pipeline.history.runs import accept_reference

    def stale(hits):
        return lambda variant, reference: eighth._frame(variant, hits)

    judge("r1", "A", {"v": "good"})
    first = [judge("r2", "B", {"v": "good"}, hits={"v": 90}), judge("r3", "B", {"v": "good"}, hits={"v": 100})]
    accept_reference(judge.uri, "r2", variants=["v"], prefix=judge.prefix)
    accept_reference(judge.uri, "r3", variants=["v"], prefix=judge.prefix)
    judge.sql("DELETE FROM {references} WHERE run_id = %s", "r3")
    accept_reference(judge.uri, "r1", variants=["v"], prefix=judge.prefix)
    steps = [judge(run_id, "B", {"v": "good"}, hits={"v": hits}, rank_reference=stale(hits))
             for run_id, hits in (("r5", 97), ("r6", 94), ("r7", 91))]
    seen = [(s.gates["v"].state, _why(s)) for s in first + steps]
    assert not all(s.gates["v"].passed for s in steps), seen


@pytest.mark.integration
def test_the_anchor_control_without_the_deletion_catches_the_slide(judge):
    """Held (the control of the hole above): r3's log entry kept, the B anchor is r3 (1.00) and
    the slide fails by r6."""
    from eval_pipeline.history.runs import accept_reference

    judge("r1", "A", {"v": "good"})
    judge("r2", "B", {"v": "good"}, hits={"v": 90})
    judge("r3", "B", {"v": "good"}, hits={"v": 100})
    for run_id in ("r2", "r3", "r1"):
        accept_reference(judge.uri, run_id, variants=["v"], prefix=judge.prefix)
    steps = [judge(run_id, "B", {"v": "good"}, hits={"v": hits},
                   rank_reference=lambda variant, reference, hits=hits: eighth._frame(variant, hits))
             for run_id, hits in (("r5", 97), ("r6", 94), ("r7", 91))]
    assert not all(s.gates["v"].passed for s in steps), [_why(s) for s in steps]


@pytest.mark.integration
def test_the_conflict_message_does_not_ask_to_accept_todays_run(judge):
    eighth.two_acceptances(judge)
    judge.sql("DELETE FROM {references} WHERE run_id = %s", "r2")
    step = judge("r3", "A", {"v": "good"})
    message = step.gates["v"].message
    assert CONFLICT in message
    head = message.split(": judged against it")[0]
    assert "accept r3" not in head, head


# --------------------------------------------------------------------------------------------
# 2. the refusal of a maybe-renamed run
# --------------------------------------------------------------------------------------------


@pytest.mark.integration
def test_the_way_out_of_a_refused_rename_run(judge):
    """Held: r3 renames w to w2 without materializing it (refused whole and by name); r4 measures
    w2 (inherits w, passes): accept latest (r4) is taken, and r5 passes."""
    from eval_pipeline.history.runs import accept_reference, resolve_run_id

    judge("r1", "A", {"v": "good", "w": "good"})
    judge("r2", "A", {"v": "good", "w": "good"})
    judge("r3", "A", {"v": "good"}, sweep_keys=["v", "w2"])
    with pytest.raises(ValueError, match="did not measure w2"):
        accept_reference(judge.uri, "r3", variants=["v"], prefix=judge.prefix)
    r4 = judge("r4", "A", {"v": "good", "w2": "good"})
    assert r4.passed, [_why(r4, v) for v in r4.gates]
    assert resolve_run_id(judge.uri, "latest", prefix=judge.prefix) == "r4"
    assert set(accept_reference(judge.uri, "r4", prefix=judge.prefix)) == {"v", "w2"}
    r5 = judge("r5", "A", {"v": "good", "w2": "good"}, hits={"w2": 50})
    assert not r5.gates["w2"].passed, _why(r5, "w2")


# --------------------------------------------------------------------------------------------
# 3. ConfigurationRefused
# --------------------------------------------------------------------------------------------


def test_configuration_refused_is_one_class_everywhere():
    """Held: one class (ranking.inputs), used by verdict.paired, raised by ranking.steps, a ValueError."""
    from eval_pipeline.ranking import inputs, steps
    from eval_pipeline.verdict import paired

    assert paired.ConfigurationRefused is inputs.ConfigurationRefused is steps.ConfigurationRefused
    assert issubclass(inputs.ConfigurationRefused, ValueError)
