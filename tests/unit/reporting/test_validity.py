"""The report's "How far the numbers can be trusted" section (eval_pipeline.reporting.validity).

Everything is built from a hand-made run small enough to score by hand: six documents, four
answerable questions and one abstention question, three variants scored with `score_variant`
(no database, no model). The figures asserted are worked out in the comments.

The run
    qrels   q1 {d1: 1, d5: 0, d6: 0}   q2 {d2: 1, d5: 0, d6: 0}   q3 {d3: 1}   q4 {d4: 1, d5: 0, d6: 0}
            q5: an abstention question (no gold)
    bm25 (the baseline) and metadata (an exact copy of it):
            q1 [d5, d1, d6]  hit, rr 1/2, ndcg 1/log2(3), judged 3 of 10
            q2 [d5, d2, d6]  hit, rr 1/2, ndcg 1/log2(3), judged 3 of 10
            q3 [d6, d3]      hit, rr 1/2, ndcg 1/log2(3), judged 1 of 10 (d6 is unjudged for q3)
            q4 [d5, d6]      miss (diagnosed both_legs), judged 2 of 10
            Judged@10 = (0.3 + 0.3 + 0.1 + 0.2) / 4 = 0.225, one unjudged document in the top 10
    hybrid: the gold document alone, first, for every question: hit, rr 1, ndcg 1, judged 1 of 10
            Judged@10 = 0.1: better than bm25 on every question (mrr and ndcg)
"""

from __future__ import annotations

import dataclasses
import json
import math
import types
from statistics import NormalDist

import pandas as pd
import pytest

from eval_pipeline.corpus.sources import CorpusSnapshot, Document
from eval_pipeline.history import runs as history
from eval_pipeline.validity.flips import RESULT_DECIDING_FIELDS
from eval_pipeline.validity.power import minimum_detectable_effect, questions_needed
from eval_pipeline.scoring.variant import score_variant
from eval_pipeline.config.sweep import parse_sweep
from eval_pipeline.questions.sets import Question
from eval_pipeline.reporting.validity import (
    assess,
    validity_metadata,
    validity_section,
    write_validity_files,
)

DOCUMENTS = tuple(Document(f"d{i}", title, "", f"{title.lower()}.md", f"{title.lower()} body text")
                  for i, title in enumerate(["Alpha", "Bravo", "Charlie", "Delta", "Echo", "Foxtrot"], start=1))
SNAPSHOT = CorpusSnapshot(documents=DOCUMENTS, source="test")
# q1 copies its document's words (the audit flags it); the others share no content word with theirs.
QUESTIONS = [
    Question("q1", "alpha body", ("d1",), relevance={"d1": 1, "d5": 0, "d6": 0}),
    Question("q2", "how do I rotate keys?", ("d2",), relevance={"d2": 1, "d5": 0, "d6": 0}),
    Question("q3", "where are invoices archived?", ("d3",)),
    Question("q4", "who approves refunds?", ("d4",), relevance={"d4": 1, "d5": 0, "d6": 0}),
    Question("q5", "what is the moon made of?", ()),
]
BASE = {"q1": ["d5", "d1", "d6"], "q2": ["d5", "d2", "d6"], "q3": ["d6", "d3"], "q4": ["d5", "d6"], "q5": ["d1"]}
BETTER = {"q1": ["d1"], "q2": ["d2"], "q3": ["d3"], "q4": ["d4"], "q5": []}
BASE_MISSES = {"q4": "both_legs"}

Z = NormalDist().inv_cdf(0.975) + NormalDist().inv_cdf(0.8)  # 2.8016
NDCG_RANK_2 = 1 / math.log2(3)
MRR_DIFFERENCES = [0.5, 0.5, 0.5, 1.0]  # hybrid minus bm25 on q1..q4
NDCG_DIFFERENCES = [1 - NDCG_RANK_2] * 3 + [1.0]


def results(variant: str, rankings: dict, misses: dict | None = None) -> pd.DataFrame:
    misses = misses or {}
    return pd.DataFrame({"variant": variant, "qid": list(rankings), "doc_ids": list(rankings.values()),
                         "error": None, "miss_class": [misses.get(q) for q in rankings]})


def scored(variant: str, rankings: dict, misses: dict | None = None) -> pd.DataFrame:
    return score_variant(results(variant, rankings, misses), QUESTIONS)


def per_variant() -> dict[str, pd.DataFrame]:
    return {"bm25": scored("bm25", BASE, BASE_MISSES), "hybrid": scored("hybrid", BETTER),
            "metadata": scored("metadata", BASE, BASE_MISSES)}


def sweep(tolerances=None, **extra):
    return parse_sweep({"baseline": "bm25", "variants": ["bm25", {"engine": "hybrid"}, "metadata"],
                        "gate": {"tolerances": tolerances or {"mrr": 0.05, "ndcg@10": 0.5}}, **extra})


def run(frames=None, config=None, verdict=None, connection_string=None):
    return assess(per_variant() if frames is None else frames, questions=QUESTIONS, snapshot=SNAPSHOT,
                  sweep=config or sweep(), verdict=verdict, connection_string=connection_string)


@pytest.fixture(scope="module")
def validity():
    return run()


def table(lines: list[str], header_start: str) -> list[list[str]]:
    """The cells of the markdown table whose header line starts with `header_start` (header first)."""
    lines = [line for entry in lines for line in entry.split("\n")]  # a table is one entry of the section
    start = next(i for i, line in enumerate(lines) if line.startswith(header_start))
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        if not line.startswith("|---"):
            rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows


def warnings(lines: list[str]) -> list[str]:
    return [line.removeprefix("> **Warning:** ") for line in lines if line.startswith("> **Warning:** ")]


# --- assess ----------------------------------------------------------------------------------


def test_the_frames_score_as_the_module_docstring_says():
    frames = per_variant()
    base, better = frames["bm25"].set_index("qid"), frames["hybrid"].set_index("qid")
    assert base.loc[["q1", "q2", "q3", "q4"], "hit@10"].tolist() == [1.0, 1.0, 1.0, 0.0]
    assert base.loc[["q1", "q2", "q3", "q4"], "mrr"].tolist() == [0.5, 0.5, 0.5, 0.0]
    assert base.loc[["q1", "q2", "q3", "q4"], "ndcg@10"].tolist() == pytest.approx([NDCG_RANK_2] * 3 + [0.0])
    assert better.loc[["q1", "q2", "q3", "q4"], "ndcg@10"].tolist() == [1.0] * 4
    assert not base.loc["q5", "answerable"]


def test_judged_table_has_one_row_per_variant_with_judged_at_10_over_k(validity):
    judged = validity.judged.set_index("variant")
    assert list(validity.judged["variant"]) == ["bm25", "hybrid", "metadata"]
    assert judged.loc["bm25", "judged"] == pytest.approx(0.225)  # (3 + 3 + 1 + 2) / 10 / 4
    assert judged.loc["hybrid", "judged"] == pytest.approx(0.1)  # one judged document of 10, every question
    assert judged.loc["metadata", "judged"] == pytest.approx(0.225)
    assert judged["n_questions"].tolist() == [4, 4, 4]  # the abstention question is left out
    assert judged.loc["bm25", "unjudged_total"] == 1  # d6 on q3
    assert judged.loc["hybrid", "unjudged_total"] == 0


def test_a_question_returning_two_documents_one_judged_scores_one_tenth():
    only_q3 = {"bm25": scored("bm25", {**BETTER, "q3": ["d6", "d3"], "q1": [], "q2": [], "q4": []})}
    v = run(only_q3)
    # q3: 1 judged of k = 10 (not of the 2 returned); q1, q2, q4 return nothing: 0
    assert v.judged.loc[0, "judged"] == pytest.approx((0 + 0 + 0.1 + 0) / 4)
    assert v.judged.loc[0, "n_short"] == 4


def test_judged_warning_names_the_variants_when_judged_differs_by_more_than_a_tenth(validity):
    w = validity.judged_warning
    assert w is not None
    assert "differs by 0.12" in w  # 0.225 - 0.1
    assert "highest bm25, metadata (0.23)" in w  # f"{0.225:.2f}" rounds half to even on the float
    assert "lowest hybrid (0.10)" in w


def test_no_judged_warning_when_judged_differs_by_a_tenth_or_less():
    frames = per_variant()
    assert run({"bm25": frames["bm25"], "metadata": frames["metadata"]}).judged_warning is None  # spread 0
    # q1 3, q2 2, q3 1, q4 2 judged: 0.2, 0.025 below bm25
    near = scored("near", {"q1": ["d1", "d5", "d6"], "q2": ["d2", "d5"], "q3": ["d3"], "q4": ["d4", "d5"], "q5": []})
    v = run({"bm25": frames["bm25"], "near": near})
    assert v.judged.set_index("variant").loc["near", "judged"] == pytest.approx(0.2)
    assert v.judged_warning is None


def test_power_has_one_row_per_non_baseline_variant_and_gated_metric(validity):
    p = validity.power
    assert list(zip(p["variant"], p["metric"])) == [("hybrid", "mrr"), ("hybrid", "ndcg@10"),
                                                     ("metadata", "mrr"), ("metadata", "ndcg@10")]
    assert p["n"].tolist() == [4, 4, 4, 4]  # the answerable questions
    assert p["tolerance"].tolist() == [0.05, 0.5, 0.05, 0.5]
    assert validity.effect == 0.02


def test_mde_is_the_power_formula_on_the_hand_computed_differences(validity):
    rows = validity.power.set_index(["variant", "metric"])
    # mrr differences 0.5, 0.5, 0.5, 1.0: sd 0.25, so MDE = z * 0.25 / sqrt(4)
    assert rows.loc[("hybrid", "mrr"), "mde"] == pytest.approx(minimum_detectable_effect(MRR_DIFFERENCES))
    assert rows.loc[("hybrid", "mrr"), "mde"] == pytest.approx(Z * 0.25 / 2)
    assert rows.loc[("hybrid", "ndcg@10"), "mde"] == pytest.approx(minimum_detectable_effect(NDCG_DIFFERENCES))
    # questions for 0.02: ceil((z * 0.25 / 0.02) ** 2) = ceil(1226.39)
    assert rows.loc[("hybrid", "mrr"), "questions_needed"] == questions_needed(MRR_DIFFERENCES, effect=0.02) == 1227
    assert rows.loc[("hybrid", "ndcg@10"), "questions_needed"] == questions_needed(NDCG_DIFFERENCES, effect=0.02)


def test_identical_variants_have_an_undefined_mde_and_no_warning(validity):
    rows = validity.power.set_index(["variant", "metric"])
    for metric in ("mrr", "ndcg@10"):
        assert math.isnan(rows.loc[("metadata", metric), "mde"])
        needed = rows.loc[("metadata", metric), "questions_needed"]
        assert needed is None or math.isnan(needed)
        assert not isinstance(rows.loc[("metadata", metric), "warning"], str)


def test_a_tolerance_below_the_mde_warns_and_one_above_does_not(validity):
    rows = validity.power.set_index(["variant", "metric"])
    assert "gate tolerance 0.050 on mrr is below the minimum detectable effect 0.350" in rows.loc[("hybrid", "mrr"),
                                                                                                   "warning"]
    assert not isinstance(rows.loc[("hybrid", "ndcg@10"), "warning"], str)  # 0.5 >= 0.442


def test_p_best_sums_to_one_and_goes_to_the_variant_better_on_every_question(validity):
    assert set(validity.p_best) == {"bm25", "hybrid", "metadata"}
    assert sum(validity.p_best.values()) == pytest.approx(1.0)
    assert validity.p_best["hybrid"] == 1.0  # higher nDCG@10 on every question: it wins every resample
    assert validity.p_best["bm25"] == validity.p_best["metadata"] == 0.0


def test_without_the_baseline_there_is_no_power_table():
    frames = per_variant()
    v = run({"hybrid": frames["hybrid"], "metadata": frames["metadata"]})
    assert v.power.empty
    assert list(v.power.columns) == ["variant", "metric", "n", "mde", "questions_needed", "tolerance", "warning"]
    assert sum(v.p_best.values()) == pytest.approx(1.0)
    lines = validity_section(v, files={})
    assert not any("What the question set can detect" in line for line in lines)
    assert not any("comparisons with the baseline" in line for line in warnings(lines))


def test_the_audit_is_run_on_the_question_set_with_the_sweeps_thresholds(validity):
    a = validity.audit
    assert [f.qid for f in a.flagged] == ["q1"]  # its words are its document's, and the title ranks it first
    assert a.counts["documents_without_questions"] == 2  # d5, d6
    assert a.problems == ("2 of 6 documents (33.3%) have no question, above audit.max_uncovered_document_share 0.25",)
    relaxed = run(config=sweep(audit={"max_uncovered_document_share": 0.5}))
    assert relaxed.audit.passed and relaxed.audit.problems == ()


def test_without_a_verdict_or_a_connection_there_are_no_flips(validity, monkeypatch):
    monkeypatch.setattr(history, "read_run", lambda *a, **k: pytest.fail("read_run must not be called"))
    assert validity.flips == {} and validity.flip_rows == []
    from eval_pipeline.history.runs import Comparison

    verdict = types.SimpleNamespace(previous={"bm25": {"run_id": "r1"}}, provenance={},
                                    history={"bm25": Comparison(state="comparable")})
    assert run(verdict=verdict, connection_string=None).flips == {}


# --- the section -----------------------------------------------------------------------------


def test_section_starts_with_the_warnings(validity):
    lines = validity_section(validity, files={})
    assert lines[:2] == ["## How far the numbers can be trusted", ""]
    shown = warnings(lines)
    assert shown[0] == validity.audit.problems[0]
    assert shown[1] == validity.judged_warning
    assert len(shown) == 3
    assert lines[2:5] == [f"> **Warning:** {w}" for w in shown] and lines[5] == ""


def test_tolerances_below_the_mde_make_one_sentence_with_the_count():
    v = run(config=sweep({"mrr": 0.05, "ndcg@10": 0.05}))
    shown = [w for w in warnings(validity_section(v, files={})) if "comparisons" in w]
    assert len(shown) == 1  # one sentence, not one per comparison
    (sentence,) = shown
    mdes = sorted([minimum_detectable_effect(MRR_DIFFERENCES), minimum_detectable_effect(NDCG_DIFFERENCES)])
    # the two metadata rows (an exact copy of the baseline) have no MDE: not counted as comparisons
    assert sentence.startswith("in 2 of 2 comparisons with the baseline variant (and 2 with an undefined MDE) "
                               "the gate's tolerance (mrr 0.050, ndcg@10 0.050) is below the minimum detectable effect "
                               f"({mdes[0]:.3f}–{mdes[1]:.3f})")
    assert not any("gate tolerance 0.050 on" in w for w in warnings(validity_section(v, files={})))


def test_one_tolerance_below_the_mde_is_counted_in_of_all_comparisons(validity):
    shown = [w for w in warnings(validity_section(validity, files={})) if "comparisons" in w]
    assert len(shown) == 1
    assert shown[0].startswith("in 1 of 2 comparisons with the baseline variant (and 2 with an undefined MDE) the "
                               "gate's tolerance (mrr 0.050) is below the minimum detectable effect (0.350)")


def test_no_warning_block_when_nothing_is_wrong(validity):
    quiet = dataclasses.replace(validity, audit=dataclasses.replace(validity.audit, problems=()), judged_warning=None,
                                power=validity.power.assign(warning=None))
    lines = validity_section(quiet, files={})
    assert warnings(lines) == []
    assert lines[2].startswith("**The question set**")
    assert "- audit passed (a warning: `audit: {blocking: true}` blocks)" in lines


def test_audit_lines_name_the_file_and_the_figures(validity):
    lines = validity_section(validity, files={"question_audit": "/somewhere/question_audit.limited-5.jsonl"})
    assert any("`question_audit.limited-5.jsonl`" in line for line in lines)
    assert ("- 0.250 of answerable questions are answerable by surface overlap alone (1 of 4; max 0.5); "
            "mean content-word overlap with the gold document 0.250") in lines
    assert ("- 0 near-duplicate pairs; 2 of 6 documents without a question (0.333); abstention share 0.200"
            in lines)
    assert "- audit FAILED (a warning: `audit: {blocking: true}` blocks)" in lines
    blocking = run(config=sweep(audit={"blocking": True}))
    assert "- audit FAILED (blocking)" in validity_section(blocking, files={})


def test_judged_table_shows_judged_unjudged_and_p_best(validity):
    rows = table(validity_section(validity, files={}), "| variant | Judged@10")
    assert rows == [["variant", "Judged@10", "unjudged in top 10", "P(best nDCG@10)"],
                    ["bm25", "0.225", "1", "0.000"],
                    ["hybrid", "0.100", "0", "1.000"],
                    ["metadata", "0.225", "1", "0.000"]]


def test_detect_table_shows_integer_questions_needed_and_the_missing_mark_for_an_undefined_mde(validity):
    lines = validity_section(validity, files={})
    assert any(line.startswith("**What the question set can detect**") and "a difference of 0.02" in line for line in lines)
    rows = table(lines, "| variant | metric | n | mde")
    assert rows[0] == ["variant", "metric", "n", "mde", "questions for 0.02", "tolerance", "flag"]
    body = {(r[0], r[1]): r for r in rows[1:]}
    assert list(body) == [("hybrid", "mrr"), ("hybrid", "ndcg@10"), ("metadata", "mrr"), ("metadata", "ndcg@10")]
    assert body[("hybrid", "mrr")][2:6] == ["4", "0.350", "1227", "0.050"]  # 1227, not 1227.000
    ndcg_needed = questions_needed(NDCG_DIFFERENCES, effect=0.02)
    assert body[("hybrid", "ndcg@10")][2:6] == ["4", f"{minimum_detectable_effect(NDCG_DIFFERENCES):.3f}",
                                                str(ndcg_needed), "0.500"]
    for metric, tolerance in (("mrr", "0.050"), ("ndcg@10", "0.500")):
        assert body[("metadata", metric)][2:6] == ["4", "–", "–", tolerance]
    assert not any(".000" in r[4] for r in rows[1:])


def test_the_flag_column_marks_only_tolerances_below_a_defined_mde(validity):
    """hybrid/mrr: 0.05 < MDE 0.350, flagged. hybrid/ndcg@10: 0.5 >= MDE 0.442 and metadata (MDE
    undefined) have no warning in the power table, so no flag."""
    rows = table(validity_section(validity, files={}), "| variant | metric | n | mde")
    flags = {(r[0], r[1]): r[6] for r in rows[1:]}
    assert flags == {("hybrid", "mrr"): "below MDE", ("hybrid", "ndcg@10"): "",
                     ("metadata", "mrr"): "", ("metadata", "ndcg@10"): ""}


# --- flips -----------------------------------------------------------------------------------

CLEAN = {"corpus_signature": "c1", "question_set_fingerprint": "qs1", "labels_fingerprint": "l1", "benchmark_fingerprint": "b1",
         "embedder": "fake", "embedder_revision": "rev1", "chunking": {"size": 512, "overlap": 64},
         "scoring_protocol": "docs-best-chunk/v1", "code_version": "0123456789ab",
         "variants": {"bm25": {"engine": "bm25"}, "hybrid": {"engine": "hybrid"}},
         "gate": "passed"}
RUN_ID = "r1-0123456789"


def recorded_questions() -> pd.DataFrame:
    """What read_run gives for the previous run: bm25 missed q1 (never a candidate) and hit q2..q4;
    hybrid hit q1..q4, as now. Rows sorted by variant and qid, as read_run sorts them."""
    rows = []
    for variant, hits, misses in (("bm25", [0, 1, 1, 1], {"q1": "never_candidate"}), ("hybrid", [1, 1, 1, 1], {})):
        for qid, hit in zip(["q1", "q2", "q3", "q4"], hits):
            rows.append({"variant": variant, "qid": qid, "answerable": True, "errored": False, "hit@10": float(hit),
                         "mrr": float(hit), "ndcg@10": float(hit), "miss_class": misses.get(qid),
                         "doc_ids": [f"d{qid[1]}"] if hit else ["d6"]})
        rows.append({"variant": variant, "qid": "q5", "answerable": False, "errored": False, "hit@10": math.nan,
                     "mrr": math.nan, "ndcg@10": math.nan, "miss_class": None, "doc_ids": ["d1"]})
    return pd.DataFrame(rows)


@pytest.fixture
def read_run(monkeypatch):
    """read_run replaced by a recorder returning the previous run (provenance set per test)."""
    calls = []
    state = {"provenance": CLEAN}

    def fake(connection_string, run_id, **kwargs):
        calls.append((connection_string, run_id))
        if run_id != RUN_ID:
            return None
        return {"run_id": run_id, "created_at": None, "limited": False, "eligible": True,
                "provenance": state["provenance"], "metrics": pd.DataFrame(), "questions": recorded_questions()}

    monkeypatch.setattr(history, "read_run", fake)
    return types.SimpleNamespace(calls=calls, state=state)


def flipped(read_run, previous_provenance, current_provenance, previous=None, state="comparable"):
    from eval_pipeline.history.runs import Comparison

    read_run.state["provenance"] = previous_provenance
    previous = previous or {"bm25": {"run_id": RUN_ID}}
    verdict = types.SimpleNamespace(previous=previous, provenance=current_provenance,
                                    history={v: Comparison(state=state) for v in previous})
    return run(verdict=verdict, connection_string="postgresql://unused")


@pytest.mark.parametrize("state", ["mismatch", "unknown", "first_run"])
def test_no_flips_against_a_run_of_another_benchmark(read_run, state):
    """The gate names the latest run of another corpus or labels to say why nothing is
    comparable: its hits are for other questions or labels, never flips of this run's."""
    v = flipped(read_run, CLEAN, changed(labels_fingerprint="other"), state=state)
    assert v.flips == {} and v.flip_rows == [] and read_run.calls == []


def changed(**fields):
    return {**CLEAN, **fields}


@pytest.mark.parametrize("previous, current", [
    (CLEAN, changed(embedder="another-model")),
    (CLEAN, changed(variants={"bm25": {"engine": "bm25", "k1": 1.2}})),
    (changed(code_version="0123456789ab-dirty"), changed(code_version="0123456789ab-dirty")),
    (changed(code_version="unknown"), changed(code_version="unknown")),
], ids=["embedder differs", "variant config differs", "dirty code", "unknown code"])
def test_flips_count_both_directions_and_are_not_nondeterministic_when_provenance_differs(read_run, previous,
                                                                                          current):
    v = flipped(read_run, previous, current)
    assert list(v.flips) == ["bm25"]
    f = v.flips["bm25"]
    assert (f["previous_run"], f["hit_to_miss"], f["miss_to_hit"], f["same_provenance"]) == (RUN_ID, 1, 1, False)
    assert v.flip_rows == [
        {"variant": "bm25", "question_id": "q4", "direction": "hit_to_miss", "miss_class": "both_legs",
         "nondeterministic": False},
        {"variant": "bm25", "question_id": "q1", "direction": "miss_to_hit", "miss_class": "never_candidate",
         "nondeterministic": False},
    ]
    assert read_run.calls == [("postgresql://unused", RUN_ID)]


def test_flips_between_runs_with_identical_clean_provenance_are_nondeterministic(read_run):
    current = {**CLEAN, "gate": "failed", "gate_failed": ["bm25"]}  # verdict fields are outcomes, not inputs
    v = flipped(read_run, CLEAN, current)
    f = v.flips["bm25"]
    assert (f["hit_to_miss"], f["miss_to_hit"], f["same_provenance"]) == (1, 1, True)
    assert [(r["question_id"], r["direction"], r["nondeterministic"]) for r in v.flip_rows] == [
        ("q4", "hit_to_miss", True), ("q1", "miss_to_hit", True)]


@pytest.mark.parametrize("missing", RESULT_DECIDING_FIELDS)
def test_a_result_deciding_field_missing_from_both_runs_is_not_identical_provenance(read_run, missing):
    partial = {k: v for k, v in CLEAN.items() if k != missing}
    v = flipped(read_run, partial, dict(partial))
    assert v.flips["bm25"]["same_provenance"] is False
    assert {r["nondeterministic"] for r in v.flip_rows} == {False}


def test_a_run_is_read_once_and_variants_it_did_not_record_are_skipped(read_run):
    previous = {"bm25": {"run_id": RUN_ID}, "hybrid": {"run_id": RUN_ID}, "metadata": {"run_id": RUN_ID}}
    v = flipped(read_run, CLEAN, CLEAN, previous)
    assert read_run.calls == [("postgresql://unused", RUN_ID)]  # one read for the three variants
    assert list(v.flips) == ["bm25", "hybrid"]  # the recorded run has no metadata rows
    assert (v.flips["hybrid"]["hit_to_miss"], v.flips["hybrid"]["miss_to_hit"], v.flips["hybrid"]["rows"]) == (0, 0, [])
    assert len(v.flip_rows) == 2


def test_a_previous_run_the_history_does_not_have_gives_no_flips(read_run):
    v = flipped(read_run, CLEAN, CLEAN, {"bm25": {"run_id": "gone"}, "hybrid": {}})
    assert v.flips == {}
    assert read_run.calls == [("postgresql://unused", "gone")]


@pytest.mark.parametrize("same, nondeterministic", [(True, "2"), (False, "0")])
def test_section_lists_the_flips_per_variant(read_run, same, nondeterministic):
    v = flipped(read_run, CLEAN, CLEAN if same else changed(embedder="other"))
    lines = validity_section(v, files={"flips": "/x/flips.limited-5.jsonl"})
    assert any(line.startswith("**Changed since the previous comparable run**") and "`flips.limited-5.jsonl`" in line
               for line in lines)
    rows = table(lines, "| variant | since run")
    assert rows == [["variant", "since run", "hit→miss", "miss→hit", "nondeterministic"],
                    ["bm25", RUN_ID[:8], "1", "1", nondeterministic]]


# --- files and metadata ----------------------------------------------------------------------


def test_write_validity_files_writes_both_jsonl_files_with_the_suffix(read_run, tmp_path):
    v = flipped(read_run, CLEAN, CLEAN)
    paths = write_validity_files(v, tmp_path, ".limited-5")
    assert paths == {"question_audit": str(tmp_path / "question_audit.limited-5.jsonl"),
                     "flips": str(tmp_path / "flips.limited-5.jsonl")}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["flips.limited-5.jsonl", "question_audit.limited-5.jsonl"]
    audit_lines = (tmp_path / "question_audit.limited-5.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(audit_lines) == len(v.audit.flagged) == 1
    row = json.loads(audit_lines[0])
    assert row["qid"] == "q1" and row["gold"] == ["d1"] and row["reasons"] == ["surface_overlap", "metadata_rank_1"]
    flip_lines = (tmp_path / "flips.limited-5.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line) for line in flip_lines] == v.flip_rows
    assert len(flip_lines) == 2


def test_write_validity_files_without_flips_writes_an_empty_flips_file(validity, tmp_path):
    paths = write_validity_files(validity, tmp_path)
    assert (tmp_path / "flips.jsonl").read_text() == ""
    assert paths["question_audit"] == str(tmp_path / "question_audit.jsonl")
    assert len((tmp_path / "question_audit.jsonl").read_text().splitlines()) == 1


def test_validity_metadata_is_numeric(validity):
    meta = validity_metadata(validity)
    # every finite number as the UI shows it: 4 decimals
    assert all(round(v, 4) == v for v in meta.values() if isinstance(v, float) and math.isfinite(v))
    assert meta["judged@10/bm25"] == pytest.approx(0.225)
    assert meta["judged@10/hybrid"] == pytest.approx(0.1)
    assert meta["judged@10/metadata"] == pytest.approx(0.225)
    assert meta["mde/hybrid/mrr"] == pytest.approx(Z * 0.25 / 2, abs=5e-5)
    assert meta["mde/hybrid/ndcg@10"] == pytest.approx(minimum_detectable_effect(NDCG_DIFFERENCES), abs=5e-5)
    assert isinstance(meta["mde/metadata/mrr"], float) and math.isnan(meta["mde/metadata/mrr"])
    assert meta["audit/documents"] == 6
    assert meta["audit/flagged"] == 1
    assert meta["audit/documents_without_questions_share"] == 0.3333  # 2 of 6, shown
    assert meta["audit_passed"] is False
    assert {k for k in meta if k.startswith(("judged@10/", "mde/"))} == {
        "judged@10/bm25", "judged@10/hybrid", "judged@10/metadata",
        "mde/hybrid/mrr", "mde/hybrid/ndcg@10", "mde/metadata/mrr", "mde/metadata/ndcg@10"}
    for key, value in meta.items():
        assert isinstance(value, (int, float, bool)), (key, value)  # never a string, "nan" or otherwise
    assert all(isinstance(meta[k], (int, float)) and not isinstance(meta[k], bool)
               for k in meta if k.startswith("audit/"))


def test_validity_metadata_counts_the_flips(read_run):
    meta = validity_metadata(flipped(read_run, CLEAN, CLEAN))
    assert meta["flips/bm25/hit_to_miss"] == 1
    assert meta["flips/bm25/miss_to_hit"] == 1
    assert not any(k.startswith(("flips/hybrid", "flips/metadata")) for k in meta)
