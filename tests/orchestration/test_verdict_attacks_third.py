"""The third attack review of the verdict: a hostile user tries to get a regression through (exit
0, ``gate_passed`` True, the regressed run recorded eligible or made a yardstick) by changing the
benchmark, a variant's identity, the gate settings, the history or acceptance.

Fast: every test calls ``judge_run`` (and, for answers, ``judge_answer_run`` + ``record_answers``)
directly against the real embedded Postgres, under a table prefix of its own. The retrieval runs
have 100 questions, each a hit at rank 1 for i < hits, else a miss, so the metrics are exact
fractions. A configuration's quality ("knob") is the same on any benchmark, and
``rank_reference`` ranks a recorded configuration faithfully on "today's questions" *with today's
engine*: a code change is the ``engine_identity`` of the provenance, and its effect on quality is
given with ``frames`` (the same configuration ranked by other code ranks otherwise).

Tests that fail mark a hole (their docstring says what the attacker did and what the verdict
said); tests that pass are kept as regression tests of attacks the verdict held.
"""

from __future__ import annotations

import json
import uuid

import pandas as pd
import psycopg
import pytest

from eval_pipeline.history.runs import SCORING_PROTOCOL, accept_reference, read_run, table_names
from eval_pipeline.metrics.retrieval import score_queries
from eval_pipeline.verdict.answers import judge_answer_run, record_answers
from eval_pipeline.verdict.retrieval import judge_run

pytestmark = pytest.mark.integration

N = 100
TOL = {"hit@1": 0.05, "mrr": 0.05}
QUALITY = {"good": 100, "other": 100, "fresh": 100, "minus3": 97, "minus6": 94, "bad": 50, "second": 50}
SECOND = ("second",)  # knobs whose misses at rank 1 have the gold at rank 2 (hit@5 stays 1.0)


def frame(variant: str, hits: int, *, second: bool = False) -> pd.DataFrame:
    """Question i is a hit at rank 1 for i < hits; else a miss (``second``: the gold at rank 2)."""
    qrels = {f"q{i:03d}": {f"d{i}": 1} for i in range(N)}
    rankings = {q: ([f"d{i}"] if i < hits else ["x", f"d{i}"] if second else ["x"]) for i, q in enumerate(qrels)}
    df = score_queries(rankings, qrels, errored=[])
    df.insert(0, "variant", variant)
    df["doc_ids"] = [list(rankings[q]) for q in df["qid"]]
    df["latency_ms"] = 1.0
    df["miss_class"] = [None if h else "never_candidate" for h in df["hit@1"]]
    return df


def provenance(bench: str, configs: dict[str, str], *, engine: str = "E1") -> dict:
    return {
        "corpus_signature": "corpus-1", "question_set_fingerprint": f"qs-{bench}",
        "labels_fingerprint": f"labels-{bench}", "benchmark_fingerprint": f"bench-{bench}",
        "embedder": "minilm", "embedder_revision": "rev-1", "chunking": {"split_length": 150},
        "scoring_protocol": SCORING_PROTOCOL, "code_version": f"code-{engine}", "engine_identity": engine,
        "variants": {v: {"engine": "pg-dense", "knob": k} for v, k in configs.items()},
    }


def states(verdict) -> dict[str, tuple[str, bool]]:
    return {v: (g.state, g.passed) for v, g in verdict.gates.items()}


@pytest.fixture
def judge(pg_uri):
    """judge_run(run_id, benchmark, {variant: knob}) under a table prefix of this test's own.
    ``engine`` is the code that ranks; ``hits`` overrides a variant's quality (what that code
    made of its configuration); the paired ranking ranks with today's engine, so it gives a
    configuration's quality today (``hits`` when the configuration is the variant's own, ``today``
    {knob: hits} for other configurations)."""
    prefix = f"t3_{uuid.uuid4().hex[:12]}"

    def run(run_id, bench, configs, *, engine="E1", hits=None, today=None, tolerances=TOL, strict=False,
            answer_strict=False, record=True, limited=False, sweep=None):
        hits = hits or {}
        per_variant = {v: frame(v, hits.get(v, QUALITY[k]), second=k in SECOND) for v, k in configs.items()}
        # today's code on these configurations (and on the knobs in `today`)
        today = {**{k: hits[v] for v, k in configs.items() if v in hits}, **(today or {})}

        def rank_reference(variant, reference):
            knob = reference["variant"]["knob"]
            return frame(variant, today.get(knob, QUALITY[knob]), second=knob in SECOND)

        return judge_run(per_variant, baseline=next(iter(configs)),
                         provenance=provenance(bench, configs, engine=engine), tolerances=tolerances,
                         strict=strict, answer_strict=answer_strict, run_id=run_id, limited=limited,
                         connection_string=pg_uri, history_prefix=prefix, record=record,
                         sweep_keys=sweep or list(configs), rank_reference=rank_reference)

    run.prefix = prefix
    run.uri = pg_uri
    yield run
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        for table in reversed(list(table_names(prefix).values())):
            conn.execute(f'DROP TABLE IF EXISTS "{table}" CASCADE')


# --------------------------------------------------------------------------------------------
# holes
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("second_step", ["code", "configuration"])
def test_code_regressions_straddling_a_benchmark_change_fail_against_the_pinned_reference(judge, second_step):
    """HOLE. The attacker regresses the code in two steps of 0.03 (each inside the 0.05
    tolerance) with a question edit between them:

    r0  benchmark B1, code E1: hit@1 1.00 (the pinned reference)
    r1  B1, code E2: 0.97           comparable with r0: passes (-0.03)
    r2  B2 (questions edited), E2:  paired, the same configuration and engine as r1: passes
    r3  B2, code E3: 0.94           comparable with r2 (-0.03): passes; the pinned reference r0
                                    is on B1, its configuration is the variant's own, so "today's
                                    results are its results" (-0.00); the anchor (the first run
                                    on B2) is r2, the previous run itself: nothing sees -0.06.

    The second step may be a configuration change instead (`second_step`): r0's configuration,
    ranked on today's questions by today's code, already carries the first -0.03, so a new
    configuration at 0.94 is "-0.03 against the reference" too.

    The verdict said: r3 passed, eligible, 0.06 below its pinned reference. Expected: it fails
    (the README: "neither a regression in small steps nor one made around a question edit
    passes")."""
    assert judge("r0", "B1", {"a": "good"}, engine="E1").gate_passed
    step1 = judge("r1", "B1", {"a": "good"}, engine="E2", hits={"a": 97})
    assert states(step1) == {"a": ("comparable", True)}
    moved = judge("r2", "B2", {"a": "good"}, engine="E2", hits={"a": 97})
    assert states(moved) == {"a": ("paired", True)}
    if second_step == "code":
        step2 = judge("r3", "B2", {"a": "good"}, engine="E3", hits={"a": 94})
    else:  # the same code as r2: the reference configuration ranks at 0.97 today
        step2 = judge("r3", "B2", {"a": "minus6"}, engine="E2", hits={"a": 94}, today={"good": 97})
    assert step2.reference["a"]["run_id"] == "r0"
    assert not step2.gate_passed, step2.gates["a"].message
    assert not step2.eligible


def test_re_accepting_an_older_run_does_not_undo_a_tightening_made_since(judge):
    """HOLE. The tolerances were 1.0 in the project's early days (r0), then tightened to 0.05 (r1,
    eligible, judged with 0.05). The team re-accepts r0 (a documented roll-back of the reference:
    re-accepting an older run makes it the reference and the previous run again), and the
    attacker sets the tolerances back to 1.0 with a drop of 0.50 (r2). The tolerances are
    pinned only from the two yardstick runs, both now r0, which "stands for the tolerances it
    asked for" (1.0): r2 passes, eligible, with no "loosened" note.

    `strict` is pinned otherwise (`_pinned_policy`): from the accepted run on, every later
    yardstick run counts with what it was judged with, so re-accepting r0 keeps a strict turned on
    since. Expected for the tolerances likewise: r1's 0.05 still applies and r2 fails."""
    loose = {"hit@1": 1.0, "mrr": 1.0}
    assert judge("r0", "B1", {"a": "good"}, tolerances=loose).gate_passed
    tightened = judge("r1", "B1", {"a": "good"})
    assert tightened.gate_passed and tightened.provenance["effective_tolerances"]["a"] == TOL
    accept_reference(judge.uri, "r0", note="back to r0", prefix=judge.prefix)
    regressed = judge("r2", "B1", {"a": "bad"}, tolerances=loose)
    assert regressed.previous["a"]["run_id"] == "r0" and regressed.reference["a"]["run_id"] == "r0"
    assert not regressed.gate_passed, regressed.gates["a"].message
    assert not regressed.eligible


@pytest.mark.parametrize("change", ["loosened", "metrics dropped"])
def test_a_variant_added_while_the_tolerances_are_loosened_is_not_gated_with_the_loose_ones(judge, change):
    """HOLE. The attacker loosens the gate (never accepted) in the same change as a new variant
    `b`: the tolerances raised to 1.0, or hit@1 and mrr no longer gated (only hit@5). `a` is judged
    with its pinned tolerances and the run passes, eligible. `b`'s first run records that it was
    "judged with" the loose gate, so from then on `b` is gated with it:

    r0  {a}      tolerances hit@1/mrr 0.05
    r1  {a, b}   loosened (`a` pinned at 0.05, `loosened` noted; `b` first_run, recorded loose)
    r2  {a, b}   the same loose gate, `b` drops hit@1 1.00 -> 0.50 (its gold now at rank 2, so
                 hit@5 holds): passes, no "loosened" note, eligible.

    Expected: the project's tolerances stay in force for a variant that never had a run judged
    under stricter ones, until a run under the loose ones is accepted (the README: "a tolerance
    raised, or a metric no longer gated ... is judged with the tolerances the yardstick run was
    judged with, until a run under the new ones is accepted"); `strict` is pinned project-wide
    for the same reason."""
    loose = {"hit@1": 1.0, "mrr": 1.0} if change == "loosened" else {"hit@5": 0.05}
    assert judge("r0", "B1", {"a": "good"}).gate_passed
    added = judge("r1", "B1", {"a": "good", "b": "fresh"}, tolerances=loose)
    assert added.gate_passed and added.eligible and "a" in added.loosened
    regressed = judge("r2", "B1", {"a": "good", "b": "second"}, tolerances=loose)
    assert regressed.previous["b"]["run_id"] == "r1"
    assert not regressed.gates["b"].passed, regressed.gates["b"].message
    assert not regressed.eligible


# --------------------------------------------------------------------------------------------
# held (kept as regression tests)
# --------------------------------------------------------------------------------------------


def test_re_accepting_an_older_run_keeps_strict_turned_on_since(judge):
    """HELD (the counterpart of the test above, for `strict`). r0 asked no strict; r1 and r2 did
    (eligible); r0 is re-accepted; r3 turns strict off and adds a variant: still strict, `b` fails."""
    assert judge("r0", "B1", {"a": "good"}).gate_passed
    assert judge("r1", "B1", {"a": "good"}, strict=True).gate_passed
    assert judge("r2", "B1", {"a": "good"}, strict=True).gate_passed
    accept_reference(judge.uri, "r0", prefix=judge.prefix)
    added = judge("r3", "B1", {"a": "good", "b": "bad"}, strict=False)
    assert added.policy["strict"] is True
    assert states(added) == {"a": ("comparable", True), "b": ("not_compared", False)}


def test_gating_another_metric_instead_of_the_regressed_one_still_judges_it(judge):
    """HELD. The attacker regresses hit@1 by 0.50 and, in the same change, stops gating hit@1 and
    mrr and gates ndcg@10 and hit@5 instead (a "metric swap" that looks like a tightening). The
    metrics the yardstick was judged with stay gated: it fails on hit@1 and mrr."""
    assert judge("r0", "B1", {"a": "good"}).gate_passed
    swapped = judge("r1", "B1", {"a": "bad"}, tolerances={"ndcg@10": 0.01, "hit@5": 0.01})
    assert not swapped.gate_passed and not swapped.eligible
    assert {"hit@1", "mrr"} <= {r["metric"] for r in swapped.gates["a"].failures}
    assert swapped.provenance["effective_tolerances"]["a"] == {"ndcg@10": 0.01, "hit@5": 0.01, **TOL}


@pytest.mark.parametrize("spelling", ["nDCG@10", "Hit@1", "hit@1 ", "ndcg@10\u200b"])
def test_a_tolerance_key_spelled_otherwise_is_refused_not_ignored(judge, spelling):
    """HELD. A tolerance key spelled otherwise ("nDCG@10", "Hit@1", a trailing space, a zero-width
    space) beside a regression: the variants file is refused when loaded, and judge_run given it
    anyway raises (a KeyError on the summary) rather than judge without the metric."""
    from eval_pipeline.gates.retrieval import validate_tolerances

    with pytest.raises(ValueError, match="unknown metric"):
        validate_tolerances({spelling: 1.0})
    assert judge("r0", "B1", {"a": "good"}).gate_passed
    with pytest.raises((ValueError, KeyError)):
        judge("r1", "B1", {"a": "bad"}, tolerances={spelling: 1.0})


def test_swapping_configurations_between_two_names_with_a_question_edit_fails(judge):
    """HELD. `a` (good) and `b` (bad) swap configurations in the same run as a question edit: each
    name's own history wins, `a`'s old configuration is ranked on today's questions, and `a` fails."""
    assert judge("r0", "B1", {"a": "good", "b": "bad"}).gate_passed
    swapped = judge("r1", "B2", {"a": "bad", "b": "good"})
    assert states(swapped) == {"a": ("paired", False), "b": ("paired", True)}
    assert not swapped.gate_passed and not swapped.eligible


def test_a_regression_judged_without_recording_cannot_then_be_accepted(judge):
    """HELD. record_history false on a regressed run (it still fails), then an attempt to accept it:
    there is no such run to accept."""
    assert judge("r0", "B1", {"a": "good"}).gate_passed
    unrecorded = judge("r1", "B1", {"a": "bad"}, record=False)
    assert not unrecorded.gate_passed
    with pytest.raises(ValueError, match="no recorded run"):
        accept_reference(judge.uri, "r1", prefix=judge.prefix)
    assert not judge("r2", "B1", {"a": "bad"}).gate_passed


def test_a_limited_run_in_between_is_no_yardstick_even_when_it_passed(judge):
    """HELD. A limited run of the regressed configuration (on its own subset: paired, it passes)
    interleaved before the full regressed run: it is never eligible, so the full run is still
    judged against r0."""
    assert judge("r0", "B1", {"a": "good"}).gate_passed
    smoke = judge("r1", "B1-limited", {"a": "bad"}, limited=True)
    assert not smoke.eligible and read_run(judge.uri, "r1", prefix=judge.prefix)["eligible"] is False
    full = judge("r2", "B1", {"a": "bad"})
    assert full.previous["a"]["run_id"] == "r0" and not full.gate_passed


def test_a_rename_with_a_question_edit_and_a_code_change_in_one_run_is_not_compared(judge):
    """HELD. Three changes at once, with a drop of 0.50: `a` renamed `a2` (same configuration: it
    keeps `a`'s history), the questions edited (B2) and the code changed (E2). A paired ranking
    would run today's code on both sides, so nothing can judge it: not_compared, strict or not."""
    assert judge("r0", "B1", {"a": "good", "b": "other"}).gate_passed
    run = judge("r1", "B2", {"a2": "good", "b": "other"}, engine="E2", hits={"a2": 50})
    assert run.previous["a2"]["variant"] == "a"
    assert states(run)["a2"] == ("not_compared", False)
    assert not run.gate_passed and not run.eligible


def test_variant_keys_that_differ_only_in_case_space_unicode_or_punctuation_cannot_share_a_check():
    """HELD. Keys differing only in case, white space or Unicode normalization are refused by the
    variants file; keys differing only in punctuation get distinct check names (a failing variant
    cannot be hidden behind a passing one's check)."""
    from eval_pipeline.ranking.variants import VariantConfigError, parse_variant
    from eval_pipeline.reporting.run import gate_check_names

    for name in ("Dense", "dense ", "de\u0301nse", "d\u00e9nse", "dense\u200b", "\uff44ense"):
        with pytest.raises(VariantConfigError):
            parse_variant({"engine": "pg-dense", "name": name}, "attack")
    names = gate_check_names(["hybrid-mmr", "hybrid_mmr", "hybrid.mmr", "hybrid+mmr"])
    assert len(set(names.values())) == 4


# --------------------------------------------------------------------------------------------
# answers (judge_answer_run reads and record_answers writes the default eval_* history)
# --------------------------------------------------------------------------------------------

ANSWER_TOL = {"max_pass_rate_drop": 0.1, "max_mean_score_drop": 0.1}
ANSWER_LOOSE = {"max_pass_rate_drop": 1.0, "max_mean_score_drop": 1.0}


def answer_frame(variant, pass_rate, *, grader="deterministic", errored=0, generator="extractive:v1"):
    """One answer_metrics row, as the answer_metrics asset gives it."""
    row = {"variant": variant, "grader": grader, "set_id": "team.tiny", "set_name": "team.tiny",
           "set_fingerprint": "fp-1", "limited": False, "generator": generator, "yardstick": f"{grader}:v1",
           "n_prompts": 20, "n_errored": errored, "n_scored": 20 - errored, "pass_rate": pass_rate,
           "pass_rate_low": 0.0, "pass_rate_high": 1.0, "mean_score": pass_rate, "mean_low": 0.0, "mean_high": 1.0,
           "n_grader_failed": 0, "corpus_signature": "corpus-1", "store_table": "t",
           "variant_config": json.dumps({"engine": "bm25"}), "treatment_json": json.dumps({"context_k": 5}),
           "metrics_json": json.dumps({})}
    return pd.DataFrame([row])


def graded(variant, **pass_rates) -> pd.DataFrame:
    """A variant's answer_metrics with one row per grader: graded("bm25", deterministic=0.9)."""
    return pd.concat([answer_frame(variant, p, grader=g) for g, p in pass_rates.items()], ignore_index=True)


# the same lock as tests/integration/test_verdict_attacks.py: nothing else may use the answer
# table (no prefix, project-wide) or the default history meanwhile
from tests.integration.answer_history_lock import ANSWER_TABLE_LOCK as _ANSWER_TABLE_LOCK  # noqa: E402


@pytest.fixture
def answers(pg_uri):
    """judge_answer_run + record_answers as the report does (a row is a yardstick only when the
    run's verdict passed), on a fresh default (`eval_*`) history, dropped
    before and after, under an advisory lock. ``retrieval`` also records a retrieval run of the
    same id in the default history (so it can be accepted as the CLI does)."""
    tables = list(reversed(list(table_names("eval").values())))
    lock = psycopg.connect(pg_uri, autocommit=True)
    lock.execute("SELECT pg_advisory_lock(%s)", (_ANSWER_TABLE_LOCK,))

    def drop():
        for table in tables:
            lock.execute(f'DROP TABLE IF EXISTS "{table}" CASCADE')

    try:
        drop()

        def run(run_id, frames, *, tolerances=ANSWER_TOL, strict=False, retrieval=None):
            if retrieval is not None:
                judge_run({v: frame(v, h) for v, h in retrieval.items()}, baseline=next(iter(retrieval)),
                          provenance=provenance("B1", {v: "good" for v in retrieval}), tolerances=TOL,
                          strict=False, run_id=run_id, limited=False, connection_string=pg_uri)
            verdict = judge_answer_run(frames, order=list(frames), corpus_signature="corpus-1",
                                       tolerances=tolerances, strict=strict, connection_string=pg_uri,
                                       run_id=run_id)
            record_answers(verdict, pg_uri, run_id, run_eligible=verdict.passed)
            return verdict

        run.uri = pg_uri
        yield run
        drop()
    finally:
        lock.execute("SELECT pg_advisory_unlock(%s)", (_ANSWER_TABLE_LOCK,))
        lock.close()


def astates(verdict) -> dict[str, dict[str, tuple[str, bool]]]:
    return {v: {g: (r.state, r.passed) for g, r in gs.items()} for v, gs in verdict.gates.items()}


def test_a_grader_added_while_the_answer_tolerances_are_loosened_is_not_gated_with_the_loose_ones(answers):
    """HOLE (answers). The same as the retrieval one: answers.gate loosened to 1.0 (never
    accepted) in the same change as a new grader `static`; `deterministic` is pinned at 0.1 and the
    run passes; `static`'s first row records "judged with 1.0", so its drop 0.9 -> 0.2 next run
    passes. Expected: it fails (never looser than the yardstick's, until a run is accepted)."""
    assert answers("a0", {"bm25": graded("bm25", deterministic=0.9)}).passed
    added = answers("a1", {"bm25": graded("bm25", deterministic=0.9, static=0.9)}, tolerances=ANSWER_LOOSE)
    assert astates(added) == {"bm25": {"deterministic": ("comparable", True), "static": ("first_run", True)}}
    dropped = answers("a2", {"bm25": graded("bm25", deterministic=0.9, static=0.2)}, tolerances=ANSWER_LOOSE)
    assert astates(dropped)["bm25"]["static"] == ("comparable", False), dropped.gates["bm25"]["static"].message
    assert not dropped.passed


def test_accepting_a_run_whose_answers_could_not_be_accepted_does_not_acknowledge_a_grader_removal(answers):
    """HOLE? (answers). r1 is a deliberate retrieval trade-off whose answers had one errored answer
    (a flaky generator): its answer gate fails. The team accepts r1 the way the CLI does
    (`accept_reference`, then `accept_answer_run`, which refuses every answer row: errored). The
    next run drops the `static` grader (and its regression with it): `answer_graders_of` counts
    only rows since the variant's latest acceptance, by time, and r1's rows (refused) predate it,
    so nothing of `static` is "missing". Expected: r1 measured `static` (it did not leave it out),
    so its acceptance does not acknowledge `static`'s removal: the next run fails, not_compared."""
    from eval_pipeline.history.answers import accept_answer_run

    both = {"bm25": graded("bm25", deterministic=0.9, static=0.9)}
    assert answers("r0", both, retrieval={"bm25": 100}).passed
    flaky = {"bm25": pd.concat([answer_frame("bm25", 0.9, errored=1),
                                answer_frame("bm25", 0.9, grader="static", errored=1)], ignore_index=True)}
    assert not answers("r1", flaky, retrieval={"bm25": 90}).passed
    # a deliberate trade-off: bm25 failed against a comparable yardstick, so it is named
    assert accept_reference(answers.uri, "r1", variants=["bm25"]) == ["bm25"]
    # named again: accept_answer_run is the answers-only acceptance, whose whole-run form refuses bm25's
    # measured retrieval regression as the command line's does
    accepted, refused = accept_answer_run(answers.uri, "r1", variants=["bm25"])
    assert accepted == [] and len(refused) == 2
    without_static = answers("r2", {"bm25": graded("bm25", deterministic=0.9)}, retrieval={"bm25": 90})
    assert without_static.missing == [("bm25", "static", "r1")]  # r1 measured it (its row was refused)
    assert not without_static.passed


def test_re_accepting_an_older_run_keeps_the_graders_measured_since(answers):
    """HOLE (answers). r0 graded `deterministic` only; r1 added `static` (a new measurement,
    passes, eligible). The team re-accepts r0 as the CLI does (a documented roll-back of the
    reference). The next run leaves `static` out (and whatever it would have caught):
    `answer_graders_of` counts rows since the variant's latest acceptance *by time*, and r1's rows
    predate the acceptance, so `static` is not "missing" and the answer gate passes.

    The retrieval side counts the variants known *from the accepted run on* (by seq), so
    re-accepting an older run keeps the variants added since (tests/integration/
    test_verdict_attacks_second.py::test_accepting_an_older_run_for_one_variant_keeps_the_variants_known_since).
    Expected here likewise: r0 lacks `static` because it predates it, not because it was removed;
    the run without `static` fails, not_compared."""
    from eval_pipeline.history.answers import accept_answer_run

    assert answers("r0", {"bm25": graded("bm25", deterministic=0.9)}, retrieval={"bm25": 100}).passed
    added = answers("r1", {"bm25": graded("bm25", deterministic=0.9, static=0.9)}, retrieval={"bm25": 100})
    assert astates(added)["bm25"]["static"] == ("first_run", True) and added.passed
    assert accept_reference(answers.uri, "r0") == ["bm25"]
    assert accept_answer_run(answers.uri, "r0")[0] == [("bm25", "deterministic")]
    without_static = answers("r2", {"bm25": graded("bm25", deterministic=0.9)}, retrieval={"bm25": 100})
    assert without_static.missing == [("bm25", "static", "r1")]
    assert not without_static.passed
