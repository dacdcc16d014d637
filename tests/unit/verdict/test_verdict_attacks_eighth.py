"""The eighth review of the verdict, aimed first at the rules added by the seventh review's fixes
(ac4017a..c957cde): a pinned reference gone from the history (``lost_reference``,
``recorded_runs``), a benchmark change with no drift recorded, a reranker fallback, the accept
rules for runs recorded without per-variant gate states, and GRADING_CODE in the LLM graders'
versions. Each hole found was written as a strict xfail and became a plain test with its fix
(a115ba9: `moved_reference`, the reference moves only to the one the previous run was judged
against or to one accepted since; bdc12ed: `gate_failed: true`; f4d9faa: a gated metric missing
from a yardstick fails as not compared; 56c95af: grading/llm.py and `grading_code` in the LLM
yardsticks; aef85b0: the endpoint's path in who served). The attacks that held are plain tests. They call
the library directly; the ones that need the history judge runs with ``judge_run`` (or
``judge_answer_run``) against the session's embedded Postgres (marked ``integration``, a few
seconds each); nothing here needs Dagster.

What did not hold until fixed:

1. a pinned reference deleted in part: ``recorded_runs`` asks whether the *run* is still in the
   history (its run row or any of its measurements), not whether the reference's measurement of
   this variant and aspect is:

   a. its measurements deleted, its run row kept: the next eligible run becomes the reference
      silently and a regression in steps passes (retrieval);
   b. one variant's measurement deleted, another variant's of the same run kept (retrieval and
      answers alike);

2. a deleted *latest* acceptance falls back on an older acceptance: ``lost_reference`` treats any
   accepted reference as "accepted since", so an improvement accepted and then deleted lets the
   variant slide back to the older accepted level in steps (retrieval and answers);
3. answer rows recorded before today carry no ``reference_run_id``: their pinned reference
   deleted, the next eligible row becomes the reference silently (retrieval rows have recorded
   it for long; the answer side has no such fallback check);
4. a gated metric that is NaN (NULL) at the pinned reference only is "not judged" against it, so
   that metric is judged only step to step: a regression in steps passes;
5. accepting a whole run recorded in the older shape ``"gate_failed": true`` (a boolean, which
   the history's own eligibility SQL still reads) without per-variant states is allowed:
   ``failed_against_yardstick`` only reads a list, so its measured regression is accepted
   unnamed (the answer side reads "recorded not eligible" instead, and would refuse);
6. code that decides an LLM grade is outside GRADING_CODE and every other part of the LLM
   graders' yardsticks:

   a. grading/llm.py (``score_in_range``, ``reply_objects``: how a reply's score becomes a level);
   b. grading/run.py (``_llm_rows``: how a judge grade becomes the row's ``passed`` and ``score``;
      it is in the code-graded yardsticks' ``grading_code`` only);
   c. who graded drops the endpoint's path: two deployments behind one gateway host and port
      (``https://gw/a/v1``, ``https://gw/b/v1``) serving one model name are one yardstick.

What held (plain tests): a reranker fallback fails the gate whatever its mark (None/NaN with one
True, strings read as truthy: stricter), in a full or a limited run, never eligible, and a variant
without a reranker has none; a reference's run row deleted with its measurements kept does not
pass (today it raises a TypeError in the lookup rather than saying not_compared); every gated
metric NaN at the reference fails (its message says not compared, its recorded state is
``comparable``: accepting the run whole then needs the variant named, stricter); a rename whose
inherited reference is deleted is not compared; the previous run deleted leaves the reference to
catch the steps; after a
benchmark change with no drift recorded (not compared), accepting the not-compared run, or the
older previous run, as the README says, ends it (no loop), across a second benchmark change too.

Not attacked to the end: races between two runs recording at once (read the code only: every
lookup is cut at the run's own first measurement, and two concurrent runs are both judged against
the same reference, so no step escapes it); grounding grades under a chunking change; the other
modules that turn LLM grades into numbers (grading/summary.py, grading/answer_metrics.py, likely
the same class as 6b).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[3]
N = 100  # questions per retrieval run: question i a hit at rank 1 for i < hits, so the metrics are exact
TOL = {"hit@1": 0.05, "mrr": 0.05}


# --------------------------------------------------------------------------------------------
# the LLM graders' yardsticks: code that grades outside GRADING_CODE
# --------------------------------------------------------------------------------------------


def _in_a_checkout_with(tmp_path: Path, file: str, old: str, new: str, script: str) -> list[str]:
    """The lines ``script`` prints when a new process runs it from a copy of the checkout's
    eval_pipeline/ whose ``file`` has ``old`` replaced by ``new`` (the versions carry the syntax
    trees of files, which an in-process copy of a module cannot show)."""
    checkout = tmp_path / f"checkout-{uuid.uuid4().hex[:6]}"
    shutil.copytree(ROOT / "eval_pipeline", checkout / "eval_pipeline", ignore=shutil.ignore_patterns("__pycache__"))
    edited = checkout / file
    source = edited.read_text()
    assert old in source, f"{old!r} left {file}: re-aim this test"
    edited.write_text(source.replace(old, new, 1))
    out = subprocess.run([sys.executable, "-c", script], cwd=checkout,
                         env={**os.environ, "PYTHONPATH": str(checkout), "XDG_CACHE_HOME": str(tmp_path / "cache")},
                         capture_output=True, text=True, check=True)
    return out.stdout.splitlines()


_PARSE = ("from eval_pipeline.grading import judges as j; print(j.parse_decision_reply('{\"level\": 3}')[0]); "
          "print(j.JUDGE_PROMPT_VERSION); print(j.DECISION_PROFILE_VERSION)")


def test_the_llm_yardsticks_move_when_the_shared_reply_reading_changes(tmp_path):
    """An edit of grading/llm.py that reads every level one higher grades every answer better;
    both LLM graders' versions (their yardsticks and their grade caches' keys) must change."""
    old = "        return int(value)\n"
    new = "        return min(high, int(value) + 1)\n"
    as_is = _in_a_checkout_with(tmp_path, "eval_pipeline/grading/llm.py", old, old, _PARSE)
    edited = _in_a_checkout_with(tmp_path, "eval_pipeline/grading/llm.py", old, new, _PARSE)
    assert (as_is[0], edited[0]) == ("3", "4")  # the edit grades otherwise
    assert edited[1] != as_is[1], "the judge's version did not move"
    assert edited[2] != as_is[2], "the decision grader's version did not move"


_ROUTE = """
from types import SimpleNamespace
from eval_pipeline.answering.served import ServedBy
from eval_pipeline.grading import judges, run
from eval_pipeline.grading.registry import AnswerToGrade, GradingContext
answer = AnswerToGrade("v", SimpleNamespace(id="p1", reference="ref"), {"text": "t"}, False)
grade = judges._judge_grade(run._item_id(answer), (2, 2, 2), "", ServedBy("host:1", "m", "m"), False)
rows, yardsticks = run._llm_rows("judge", [grade], [answer], judges.judge_yardstick,
                                 GradingContext(None, None, None, "temperature=0", ("v",)))
print(rows["v"][0]["passed"]); print(yardsticks["v"])
"""


def test_the_judge_yardstick_moves_when_the_routing_of_its_grades_changes(tmp_path):
    """An edit of grading/run.py that passes a judge grade of 0.25 (the judge's mark is 0.6) raises
    the judge's pass rate; the yardstick the row is recorded under must change with it."""
    old = 'out.append(_row(variant, prompt.id, grader, "graded", passed=g.passed,'
    new = 'out.append(_row(variant, prompt.id, grader, "graded", passed=bool(g.overall >= 0.25),'
    as_is = _in_a_checkout_with(tmp_path, "eval_pipeline/grading/run.py", old, old, _ROUTE)
    edited = _in_a_checkout_with(tmp_path, "eval_pipeline/grading/run.py", old, new, _ROUTE)
    assert (as_is[0], edited[0]) == ("False", "True")  # the edit passes an answer the judge failed
    assert edited[1] != as_is[1], edited[1]


def _decision_yardstick_at(base_url: str) -> str:
    from eval_pipeline.answering.served import ServedBy, provider_of
    from eval_pipeline.grading.judges import DECISION_PROFILE_VERSION, DecisionGrade, decision_yardstick

    served = ServedBy(provider_of(base_url), "judge", "judge")
    return decision_yardstick([DecisionGrade("a1", 4, 0.75, True, "graded", "", served, DECISION_PROFILE_VERSION)])


def test_a_grading_endpoint_behind_another_path_is_another_yardstick():
    """A gateway routes by path (``/a/v1``, ``/b/v1``) to different weights served under one name,
    as the port did on one host (fixed in the seventh review). A digest of the path would do (the
    path is left out so that nothing secret is recorded)."""
    assert _decision_yardstick_at("http://gw:8000/a/v1") != _decision_yardstick_at("http://gw:8000/b/v1")


# --------------------------------------------------------------------------------------------
# the reranker fallback rule (no history)
# --------------------------------------------------------------------------------------------


def _frame(variant: str, hits: int) -> pd.DataFrame:
    from tests.verdict_frames import scored_frame

    return scored_frame(variant, hits, N)


def _provenance(bench: str, configs: dict[str, str]) -> dict[str, Any]:
    from tests.verdict_frames import bench_provenance

    return bench_provenance(bench, configs)


def _judge_alone(frame: pd.DataFrame, *, limited: bool = False):
    from eval_pipeline.verdict.retrieval import judge_run

    return judge_run({"v": frame}, baseline="v", provenance=_provenance("A", {"v": "good"}), tolerances=TOL,
                     strict=False, run_id="r1", limited=limited, connection_string=None, sweep_keys=["v"])


@pytest.mark.parametrize("marks", [[None] * (N - 1) + [True], [float("nan")] * (N - 1) + [1],
                                   ["False"] * N, ["no"] + [False] * (N - 1)],
                         ids=["none-and-one-true", "nan-and-one", "string-False", "one-string"])
@pytest.mark.parametrize("limited", [False, True], ids=["full", "limited"])
def test_any_reranker_fallback_fails_the_gate_whatever_its_mark(marks, limited):
    """Held: one fallback among None/NaN marks fails, and a string mark counts as one (stricter),
    in a full or a limited run; never eligible."""
    verdict = _judge_alone(_frame("v", 100).assign(rerank_fallback=pd.Series(marks, dtype=object)), limited=limited)
    assert not verdict.gates["v"].passed and not verdict.eligible, verdict.gates["v"].message


def test_a_variant_without_a_reranker_has_no_fallback():
    """Held (the control): no fallback column, no fallback; a first run passes."""
    verdict = _judge_alone(_frame("v", 100).drop(columns=["rerank_fallback"]))
    assert verdict.gates["v"].passed and verdict.eligible, verdict.gates["v"].message


# --------------------------------------------------------------------------------------------
# the retrieval history (the session's Postgres)
# --------------------------------------------------------------------------------------------


@pytest.fixture
def judge(pg_uri, tmp_path_factory):
    """judge_run(run_id, bench, {variant: knob}, hits=...) under a table prefix of its own; a
    configuration ranked today (paired) scores as many hits as its knob says."""
    import psycopg

    from eval_pipeline.history.measurements import placement_function
    from eval_pipeline.history.runs import table_names
    from eval_pipeline.verdict.retrieval import judge_run

    prefix = f"a8_{uuid.uuid4().hex[:12]}"
    statistics = tmp_path_factory.getbasetemp() / "statistics_cache"  # one a session, as the asset's is its state dir's
    quality = {"good": 100, "bad": 50}

    def faithful(variant, reference):
        return _frame(variant, quality[reference["variant"]["knob"]])

    def run(run_id, bench, configs, *, hits=None, frame=_frame, **settings):
        hits = {v: quality[k] for v, k in configs.items()} | dict(hits or {})  # a code change moves quality
        arguments = dict(baseline=next(iter(configs)), provenance=_provenance(bench, configs), tolerances=TOL,
                         strict=False, run_id=run_id, limited=False, connection_string=pg_uri, history_prefix=prefix,
                         record=True, sweep_keys=list(configs), rank_reference=faithful,
                         statistics_cache=statistics) | settings
        return judge_run({v: frame(v, hits[v]) for v in configs}, **arguments)

    def sql(statement: str, *params):
        with psycopg.connect(pg_uri, autocommit=True) as conn:
            conn.execute(statement.format(**{k: f'"{v}"' for k, v in table_names(prefix).items()}), params)

    run.prefix, run.uri, run.sql = prefix, pg_uri, sql
    yield run
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        for table in reversed(list(table_names(prefix).values())):
            conn.execute(f'DROP TABLE IF EXISTS "{table}" CASCADE')
        names = table_names(prefix)  # the history's own function, and one an older version left
        for function in (placement_function(names), names["measurements"] + "_place_acceptance"):
            conn.execute(f'DROP FUNCTION IF EXISTS "{function}"')


def _delete_run(judge, run_id: str) -> None:
    """Delete a run whole, as the seventh review's tests do: metrics, measurements, run row."""
    judge.sql("DELETE FROM {metrics} WHERE run_id = %s", run_id)
    judge.sql("DELETE FROM {measurements} WHERE run_id = %s", run_id)
    judge.sql("DELETE FROM {runs} WHERE run_id = %s", run_id)


def stamp_ahead(history, run_id: str, variant: str | None = None) -> None:
    """``run_id``'s acceptance (of ``variant``, default all) as if the server's clock had been a day
    ahead when it was made, then set right (by NTP after a restart, say): its stamp on the
    measurement and in the acceptance log, rewritten as recorded (around the trigger that would
    take a new stamp for a new acceptance and place it now). ``history``: the ``judge`` or
    ``answers`` fixture."""
    import psycopg

    from eval_pipeline.history.runs import table_names

    names = table_names(getattr(history, "prefix", "eval"))
    where = "run_id = %s" + (" AND variant = %s" if variant else "")
    params = (run_id, variant) if variant else (run_id,)
    with psycopg.connect(history.uri, autocommit=True) as conn:
        conn.execute("SET session_replication_role = replica")  # no trigger fires: the history as it was recorded
        for table in (names["measurements"], names["references"]):
            conn.execute(f'UPDATE "{table}" SET accepted_at = accepted_at + interval \'1 day\' WHERE {where}', params)


def _why(verdict, variant: str = "v") -> str:
    reference = verdict.reference.get(variant)
    return f"reference {reference and reference['run_id']}: {verdict.gates[variant].message}"


@pytest.mark.integration
def test_a_reference_whose_measurements_were_deleted_is_not_replaced_silently(judge):
    judge("r1", "A", {"v": "good"})  # hit@1 1.00: the pinned reference
    assert judge("r2", "A", {"v": "good"}, hits={"v": 97}).gates["v"].passed  # -0.03, within
    judge.sql("DELETE FROM {measurements} WHERE run_id = %s", "r1")  # its metrics go with it; the run row stays
    step = judge("r3", "A", {"v": "good"}, hits={"v": 94})  # -0.06 from the reference r2 was judged against
    assert not step.gates["v"].passed, _why(step)


@pytest.mark.integration
def test_a_reference_whose_variant_measurement_alone_was_deleted_is_not_replaced_silently(judge):
    judge("r1", "A", {"v": "good", "w": "good"})
    assert judge("r2", "A", {"v": "good", "w": "good"}, hits={"v": 97}).gates["v"].passed
    judge.sql("DELETE FROM {measurements} WHERE run_id = %s AND variant = 'v'", "r1")
    step = judge("r3", "A", {"v": "good", "w": "good"}, hits={"v": 94})
    assert not step.gates["v"].passed, _why(step)


@pytest.mark.integration
def test_a_reference_run_row_deleted_without_its_measurements_does_not_pass(judge):
    """Held: the lookup of a measurement whose run row is gone fails (today a TypeError in
    `_run_with_metrics`, not a not_compared gate); nothing passes."""
    judge("r1", "A", {"v": "good"})
    assert judge("r2", "A", {"v": "good"}, hits={"v": 97}).gates["v"].passed
    judge.sql("DELETE FROM {runs} WHERE run_id = %s", "r1")
    try:
        step = judge("r3", "A", {"v": "good"}, hits={"v": 94})
    except Exception:  # noqa: BLE001 - any failure is closed: the run is neither passed nor recorded
        return
    assert not step.gates["v"].passed, _why(step)


@pytest.mark.integration
def test_deleting_the_latest_acceptance_does_not_fall_back_silently_on_an_older_one(judge):
    from eval_pipeline.history.runs import accept_reference

    judge("r1", "A", {"v": "good"}, hits={"v": 90})
    accept_reference(judge.uri, "r1", prefix=judge.prefix)  # hit@1 0.90, accepted
    assert judge("r2", "A", {"v": "good"}).gates["v"].passed  # 1.00: an improvement
    accept_reference(judge.uri, "r2", prefix=judge.prefix)  # the reference from now on
    assert judge("r3", "A", {"v": "good"}, hits={"v": 97}).gates["v"].passed  # -0.03, judged against r2
    _delete_run(judge, "r2")
    step = judge("r4", "A", {"v": "good"}, hits={"v": 94})  # -0.06 from r2; +0.04 from r1
    assert not step.gates["v"].passed, _why(step)


@pytest.mark.integration
def test_deleting_an_inherited_reference_after_a_rename_is_not_compared(judge):
    """Held: v renamed w (same configuration) in r2; r1, the reference of the lineage, deleted."""
    judge("r1", "A", {"v": "good"})
    assert judge("r2", "A", {"w": "good"}, hits={"w": 97}).gates["w"].passed
    _delete_run(judge, "r1")
    step = judge("r3", "A", {"w": "good"}, hits={"w": 94})
    assert not step.gates["w"].passed and step.gates["w"].state == "not_compared", _why(step, "w")


@pytest.mark.integration
def test_deleting_the_previous_run_leaves_the_reference_to_catch_the_steps(judge):
    """Held."""
    judge("r1", "A", {"v": "good"})
    assert judge("r2", "A", {"v": "good"}, hits={"v": 97}).gates["v"].passed
    assert judge("r3", "A", {"v": "good"}, hits={"v": 97}).gates["v"].passed
    _delete_run(judge, "r3")
    step = judge("r4", "A", {"v": "good"}, hits={"v": 94})
    assert not step.gates["v"].passed and step.reference["v"]["run_id"] == "r1", _why(step)


def _second_rank_frame(variant: str, hits: int) -> pd.DataFrame:
    """Scores where the first `hits` questions find their gold at rank 1 and the others at rank 2:
    hit@1 moves, hit@10 stays 1.00."""
    from eval_pipeline.metrics.retrieval import score_queries

    qrels = {f"q{i:03d}": {f"d{i}": 1} for i in range(N)}
    rankings = {q: ([f"d{i}"] if i < hits else ["x", f"d{i}"]) for i, q in enumerate(qrels)}
    df = score_queries(rankings, qrels, errored=[])
    df.insert(0, "variant", variant)
    df["doc_ids"] = [list(rankings[q]) for q in df["qid"]]
    df["latency_ms"] = 1.0
    df["miss_class"] = None
    df["rerank_fallback"] = False
    return df


@pytest.mark.integration
def test_a_gated_metric_nan_at_the_reference_only_still_binds_a_regression_in_steps(judge):
    """hit@1 NULL at the reference (a metric it measured nothing of, say a refusal measure before
    the variant refused), hit@10 not: hit@1 falls 0.96 -> 0.92 -> 0.88, each step within 0.05."""
    tol = {"hit@1": 0.05, "hit@10": 0.05}
    judge("r1", "A", {"v": "good"}, frame=_second_rank_frame, tolerances=tol)
    judge.sql("UPDATE {metrics} SET value = NULL WHERE run_id = %s AND metric = 'hit@1'", "r1")
    # fixed: measured now but not in the reference, hit@1 cannot be judged against it: the gate
    # fails (not compared) at the first step already, and at every step after, until an accept
    for run_id, hits in (("r2", 96), ("r3", 92), ("r4", 88)):
        step = judge(run_id, "A", {"v": "good"}, hits={"v": hits}, frame=_second_rank_frame, tolerances=tol)
        assert not step.gates["v"].passed, _why(step)
        assert "hit@1 measured now but not in the yardstick" in step.gates["v"].message, _why(step)


@pytest.mark.integration
def test_every_gated_metric_nan_at_the_reference_fails(judge):
    """Held: nothing could be judged against the reference, so the gate fails ("not compared" in
    its message; its state is recorded as ``comparable``, which makes accepting the run whole need
    the variant named: stricter)."""
    tol = {"hit@1": 0.05}
    judge("r1", "A", {"v": "good"}, tolerances=tol)
    judge.sql("UPDATE {metrics} SET value = NULL WHERE run_id = %s AND metric = 'hit@1'", "r1")
    step = judge("r2", "A", {"v": "good"}, hits={"v": 96}, tolerances=tol)
    assert not step.gates["v"].passed and "not in the yardstick" in step.gates["v"].message, _why(step)


def _not_compared_across_a_benchmark_change(judge):
    judge("r1", "A", {"v": "good"})
    assert judge("r2", "A", {"v": "good"}, hits={"v": 97}).gates["v"].passed
    judge.sql("UPDATE {runs} SET provenance = provenance - 'drift' WHERE run_id = %s", "r2")  # older code
    r3 = judge("r3", "B", {"v": "good"}, hits={"v": 97})
    assert not r3.gates["v"].passed and r3.gates["v"].state == "not_compared", _why(r3)


@pytest.mark.integration
def test_accepting_the_not_compared_run_ends_it(judge):
    """Held: no loop; the next runs pass, on its benchmark and across another change."""
    from eval_pipeline.history.runs import accept_reference

    _not_compared_across_a_benchmark_change(judge)
    accept_reference(judge.uri, "r3", prefix=judge.prefix)
    for run_id, bench in (("r4", "B"), ("r5", "C")):
        step = judge(run_id, bench, {"v": "good"}, hits={"v": 97})
        assert step.gates["v"].passed, _why(step)


@pytest.mark.integration
def test_accepting_the_older_previous_run_ends_it(judge):
    """Held: no loop when the run accepted is the previous one, on the older benchmark."""
    from eval_pipeline.history.runs import accept_reference

    _not_compared_across_a_benchmark_change(judge)
    accept_reference(judge.uri, "r2", prefix=judge.prefix)
    for run_id in ("r4", "r5"):
        step = judge(run_id, "B", {"v": "good"}, hits={"v": 97})
        assert step.gates["v"].passed, _why(step)


@pytest.mark.integration
def test_accepting_a_whole_run_recorded_with_gate_failed_true_needs_its_variants_named(judge):
    from eval_pipeline.history.runs import accept_reference

    judge("r1", "A", {"v": "good", "w": "good"})
    failed = judge("r2", "A", {"v": "bad", "w": "good"})  # v: hit@1 1.00 -> 0.50 against a comparable run
    assert not failed.gates["v"].passed and failed.gates["v"].state == "comparable"
    # as an older version recorded it (the eligibility SQL still reads this boolean form)
    judge.sql("UPDATE {runs} SET provenance = (provenance - 'gate') || jsonb_build_object('gate_failed', true) "
              "WHERE run_id = %s", "r2")
    with pytest.raises(ValueError):
        accept_reference(judge.uri, "r2", prefix=judge.prefix)


# --------------------------------------------------------------------------------------------
# the answer history (the default history, held fresh under the tests' lock)
# --------------------------------------------------------------------------------------------

ANSWER_TOL = {"max_pass_rate_drop": 0.1, "max_mean_score_drop": 0.1}


def _answer_frame(variant: str, pass_rate: float) -> pd.DataFrame:
    from tests.verdict_frames import answer_frame

    return answer_frame(variant, pass_rate, engine=variant)


def two_acceptances(judge) -> None:
    """r1 (hit@1 0.90) accepted, then r2 (1.00, an improvement that passes) accepted: the history
    the later reviews damage (a log entry, a stamp, a clock) to see whether the bar stays r2's."""
    from eval_pipeline.history.runs import accept_reference

    judge("r1", "A", {"v": "good"}, hits={"v": 90})
    accept_reference(judge.uri, "r1", prefix=judge.prefix)
    assert judge("r2", "A", {"v": "good"}).gates["v"].passed
    accept_reference(judge.uri, "r2", prefix=judge.prefix)


@pytest.fixture
def answers(pg_uri):
    """answers(run_id, {variant: pass_rate}): judge_answer_run + record_answers of deterministic
    grades on a fresh default history; ``answers.sql`` runs a statement on it."""
    import psycopg

    from eval_pipeline.verdict.answers import judge_answer_run, record_answers
    from tests.integration.answer_history_lock import fresh_default_history

    with fresh_default_history(pg_uri):
        def run(run_id, rates):
            verdict = judge_answer_run({v: _answer_frame(v, r) for v, r in rates.items()}, order=list(rates),
                                       corpus_signature="corpus-1", tolerances=ANSWER_TOL, strict=False,
                                       connection_string=pg_uri, run_id=run_id,
                                       configurations={v: f"cfg-{v}" for v in rates})
            record_answers(verdict, pg_uri, run_id, run_eligible=verdict.passed)
            return verdict

        def sql(statement, *params):
            with psycopg.connect(pg_uri, autocommit=True) as conn:
                conn.execute(statement, params)

        run.uri, run.sql = pg_uri, sql
        yield run


def _answer_gate(verdict, variant: str = "bm25"):
    return verdict.gates[variant]["deterministic"]


@pytest.mark.integration
def test_a_deleted_answer_reference_under_a_row_recorded_before_today_is_not_replaced_silently(answers):
    assert answers("a0", {"bm25": 0.90}).passed  # the pinned reference: the first eligible row
    assert answers("a1", {"bm25": 0.85}).passed  # -0.05, within
    answers.sql("UPDATE eval_measurements SET provenance = provenance #- '{gate,reference_run_id}' "
                "WHERE run_id = %s", "a1")  # as recorded before today
    answers.sql("DELETE FROM eval_measurements WHERE run_id = %s", "a0")
    gate = _answer_gate(answers("a2", {"bm25": 0.78}))  # -0.07 from a1, -0.12 from a0
    assert not gate.passed, gate.message


@pytest.mark.integration
def test_a_deleted_answer_reference_of_one_variant_is_not_replaced_silently(answers):
    assert answers("a0", {"bm25": 0.90, "dense": 0.90}).passed
    assert answers("a1", {"bm25": 0.85, "dense": 0.90}).passed
    answers.sql("DELETE FROM eval_measurements WHERE run_id = %s AND variant = 'bm25'", "a0")
    gate = _answer_gate(answers("a2", {"bm25": 0.78, "dense": 0.90}))
    assert not gate.passed, gate.message


@pytest.mark.integration
def test_deleting_the_latest_answer_acceptance_does_not_fall_back_silently_on_an_older_one(answers):
    from eval_pipeline.history.answers import accept_answer_run

    assert answers("a0", {"bm25": 0.80}).passed
    assert accept_answer_run(answers.uri, "a0")[0] == [("bm25", "deterministic")]
    assert answers("a1", {"bm25": 0.90}).passed  # an improvement
    assert accept_answer_run(answers.uri, "a1")[0] == [("bm25", "deterministic")]
    assert answers("a2", {"bm25": 0.85}).passed  # -0.05 from a1
    answers.sql("DELETE FROM eval_measurements WHERE run_id = %s", "a1")
    gate = _answer_gate(answers("a3", {"bm25": 0.78}))  # -0.07 from a2, -0.12 from a1, -0.02 from a0
    assert not gate.passed, gate.message
