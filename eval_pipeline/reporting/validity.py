"""How far the run's numbers can be trusted, said before any ranking is believed: the question
set's audit, how completely each variant's top 10 is labelled, what the question set can detect
(minimum detectable effects against the gate's tolerances, the chance each variant is the best),
and which questions changed since each variant's previous comparable run.

Every figure comes from a pure function of `eval_pipeline.validity` (audit, coverage, power,
flips); this module only gathers them for the report, its metadata and its two JSONL files.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from eval_pipeline.common.atomic import atomic_write_text
from eval_pipeline.common.checks import missing
from eval_pipeline.common.formatting import MISSING, fmt_number, markdown_table
from eval_pipeline.common.metadata import shown_floats
from eval_pipeline.grading.agreement import calibrated_pass_rate, load_calibration
from eval_pipeline.history import runs as history
from eval_pipeline.metrics.retrieval import HOLES, PRIMARY_METRIC, metric_names, score_queries
from eval_pipeline.validity.audit import AuditResult, run_audit
from eval_pipeline.validity.coverage import judged_spread_warning, judged_summary, pooled_unjudged
from eval_pipeline.validity.flips import flips, identical_provenance, outcomes_from_frame, to_jsonl_rows
from eval_pipeline.validity.holes import (
    CANDIDATE_MIN_GRADE,
    augmented_qrels,
    calibrate_relevance,
    grade_holes,
    grading_counts,
    judged_by,
    review_rows,
    write_review_file,
)
from eval_pipeline.validity.power import (
    minimum_detectable_effect,
    probability_best,
    questions_needed,
    tolerance_below_mde,
)

JUDGED_K = 10
# With the LLM's labels, only metrics cut at the pool's depth: a document at rank 11-20 is graded
# only if another variant had it in its top 10, so hit@20 or an uncut MRR would depend on which
# other variants ran.
HOLE_METRICS = metric_names(HOLES)
FLIP_K = 10  # the miss diagnosis's cutoff, and the hit the history keeps per question
P_BEST_METRIC = PRIMARY_METRIC


@dataclass(frozen=True)
class Holes:
    """The LLM's grades of the pooled unjudged documents, and every variant's headline metrics
    with the original labels and with the LLM's added."""

    counts: dict[str, int]
    metrics: pd.DataFrame  # variant, metric, original, with_llm
    review_rows: list[dict[str, Any]]
    judged_by: str
    gold_not_answering: list[str] = field(default_factory=list)  # no gold graded >= 2 (the audit's LLM check)
    answered_elsewhere: list[str] = field(default_factory=list)  # a hole graded >= 2: a missing gold?
    # the grader's agreement with people on a relevance calibration file, and the share of the
    # holes people would call relevant with its PPI interval (grading.agreement.calibrate_relevance)
    calibration: dict[str, Any] | None = None

    def audit_rows(self) -> list[dict[str, Any]]:
        """The LLM's audit findings, one row per question, for question_audit.jsonl."""
        return ([{"qid": q, "reasons": ["llm_gold_does_not_answer"], "judged_by": self.judged_by}
                 for q in self.gold_not_answering]
                + [{"qid": q, "reasons": ["llm_answered_by_another_document"], "judged_by": self.judged_by}
                   for q in self.answered_elsewhere])


@dataclass(frozen=True)
class Validity:
    audit: AuditResult
    judged: pd.DataFrame  # eval_pipeline.validity.coverage.JUDGED_SUMMARY_COLUMNS
    judged_warning: str | None
    judged_negatives: bool  # whether the labels judge any document non-relevant
    limited: bool  # a run on the first N questions
    power: pd.DataFrame  # variant, metric, n, mde, questions_needed, tolerance, warning
    effect: float
    p_best: dict[str, float]
    flips: dict[str, dict[str, Any]] = field(default_factory=dict)  # variant -> previous run, counts, rows
    holes: Holes | None = None  # when the LLM graded the unjudged documents

    @property
    def flip_rows(self) -> list[dict[str, Any]]:
        return [row for f in self.flips.values() for row in f["rows"]]


def assess(per_variant: Mapping[str, pd.DataFrame], *, questions: Sequence, snapshot, sweep, verdict,
           connection_string: str | None, llm=None, hole_cache: Path | None = None, limited: bool = False,
           relevance_calibration: str | Path | None = None, audit_cache: Path | None = None) -> Validity:
    """Everything the validity section shows. `per_variant` are the scored frames
    (`score_variant`); `verdict` names each variant's previous comparable run, whose
    per-question outcomes are read from the history for the flip lists. With `llm` (an
    LLMClient), the unjudged documents of the pooled top 10 are graded (cached in
    `hole_cache`, see eval_pipeline.validity.holes); with `relevance_calibration` (a file of
    people's relevance grades) the grader is calibrated on it too. With `audit_cache`, the
    question-set audit is read from the runs before (eval_pipeline.validity.audit.run_audit)."""
    qrels = {q.qid: q.qrels() for q in questions}
    judged = judged_summary(per_variant, qrels, k=JUDGED_K)
    # Labels that judge only relevant documents make Judged@k the share of golds found, an
    # effectiveness figure: its spread then says nothing about the labels, so no warning.
    negatives = any(grade <= 0 for judged_docs in qrels.values() for grade in judged_docs.values())
    warning = judged_spread_warning(dict(zip(judged["variant"], judged["judged"])), k=JUDGED_K) if negatives else None
    power, p_best = _power(per_variant, sweep)
    return Validity(audit=run_audit(questions, snapshot, sweep.audit, limited=limited, cache_dir=audit_cache),
                    judged=judged,
                    judged_warning=warning,
                    judged_negatives=negatives, limited=limited,
                    power=power, effect=sweep.effect, p_best=p_best,
                    flips=_flips(per_variant, verdict, connection_string),
                    holes=_grade_holes(per_variant, questions, snapshot, qrels, llm, hole_cache,
                                       relevance_calibration) if llm else None)


def _grade_holes(per_variant, questions, snapshot, qrels, llm, cache: Path | None,
                 relevance_calibration: str | Path | None = None) -> Holes:
    """Grade the holes, score every variant again on the original labels plus the LLM's
    (a hole graded >= 2 counts as relevant, one below as judged non-relevant, a failed one stays
    unjudged), and the review rows for the candidates a person may accept. The same grader
    grades each question's gold documents: the audit's LLM checks (is the question answerable
    from its gold alone; is it answered by another document too)."""
    if cache is None:
        raise ValueError("grading the holes needs a cache folder (the state dir's hole_grades)")
    texts = {d.doc_id: f"{d.title}\n{d.content}" if d.title else d.content for d in snapshot.documents}
    grades = grade_holes(pooled_unjudged(per_variant, qrels, k=JUDGED_K), questions, texts, llm=llm, cache_dir=cache)
    golds = grade_holes([(q.qid, d) for q in questions if q.answerable for d in q.gold], questions, texts, llm=llm,
                        cache_dir=cache)
    best_gold: dict[str, int] = {}
    gold_failed: set[str] = set()
    for g in golds:
        if g.grade is not None:  # g.ok
            best_gold[g.question_id] = max(best_gold.get(g.question_id, 0), g.grade)
        else:
            gold_failed.add(g.question_id)
    # A question is "not answered by its gold" only when every gold was graded and none reached 2.
    not_answering = sorted(q for q, grade in best_gold.items() if grade < 2 and q not in gold_failed)
    augmented = augmented_qrels(questions, grades)
    rows = []
    for variant, frame in per_variant.items():
        rankings = {str(q): list(d) for q, d in zip(frame["qid"], frame["doc_ids"])}
        errored = set(frame.loc[frame["errored"].astype(bool), "qid"]) if "errored" in frame else set()
        again = score_queries(rankings, augmented, errored=errored)
        for metric in HOLE_METRICS:
            if metric in frame and metric in again:
                rows.append({"variant": variant, "metric": metric,
                             "original": float(frame.loc[frame["answerable"].astype(bool), metric].mean()),
                             "with_llm": float(again.loc[again["answerable"].astype(bool), metric].mean())})
    counts = {**grading_counts(grades), "gold_questions_graded": len(set(best_gold) - gold_failed),
              "gold_questions_failed": len(gold_failed)}
    calibration = None
    if relevance_calibration:
        calibrated = calibrate_relevance(load_calibration(relevance_calibration), llm=llm, cache_dir=cache,
                                         source=str(relevance_calibration))
        calibration = calibrated_pass_rate([g.grade >= CANDIDATE_MIN_GRADE for g in grades if g.grade is not None],
                                           calibrated)
    return Holes(counts=counts, metrics=pd.DataFrame(rows, columns=["variant", "metric", "original", "with_llm"]),
                 review_rows=review_rows(grades, questions=questions, passages=texts), judged_by=judged_by(llm),
                 gold_not_answering=not_answering,
                 answered_elsewhere=sorted({g.question_id for g in grades if g.grade is not None and g.grade >= 2}),
                 calibration=calibration)


def _answerable_scores(frame: pd.DataFrame, metric: str) -> pd.Series:
    rows = frame[frame["answerable"].astype(bool)]
    return pd.Series(rows[metric].astype(float).to_numpy(), index=rows["qid"].astype(str)).sort_index()


def _power(per_variant: Mapping[str, pd.DataFrame], sweep) -> tuple[pd.DataFrame, dict[str, float]]:
    """Per (variant, gated metric): the MDE of the paired comparison with the baseline variant
    (from the spread of per-question differences this run), the questions needed to detect
    `sweep.effect`, and whether the gate's tolerance is below the MDE."""
    rows = []
    baseline = per_variant.get(sweep.baseline)
    taken: dict[tuple[str, str], pd.Series] = {}

    def scores_of(variant: str, metric: str) -> pd.Series:  # the baseline's are asked once per variant
        if (variant, metric) not in taken:
            taken[(variant, metric)] = _answerable_scores(per_variant[variant], metric)
        return taken[(variant, metric)]

    for variant, frame in per_variant.items():
        if baseline is None or variant == sweep.baseline:
            continue
        for metric, tolerance in sweep.tolerances.items():
            if metric not in frame or metric not in baseline:
                continue
            a, b = scores_of(variant, metric), scores_of(sweep.baseline, metric)
            differences = (a - b.reindex(a.index)).dropna().to_numpy()
            mde = minimum_detectable_effect(differences)
            rows.append({"variant": variant, "metric": metric, "n": len(differences), "mde": mde,
                         "questions_needed": questions_needed(differences, effect=sweep.effect),
                         "tolerance": tolerance,
                         "warning": tolerance_below_mde(tolerance, mde, metric=metric)})
    scores = {v: scores_of(v, P_BEST_METRIC) for v, f in per_variant.items() if P_BEST_METRIC in f}
    common = sorted(set.intersection(*(set(s.index) for s in scores.values()))) if scores else []
    p_best = probability_best({v: s.reindex(common).to_numpy() for v, s in scores.items()}) if common else {}
    columns = ["variant", "metric", "n", "mde", "questions_needed", "tolerance", "warning"]
    return pd.DataFrame(rows, columns=columns), p_best


def _flips(per_variant: Mapping[str, pd.DataFrame], verdict, connection_string: str | None) -> dict[str, dict]:
    """Per variant with a previous comparable run: the questions that went from hit to miss
    and back at hit@10, flagged nondeterministic when both runs had identical provenance.
    Only against a run of the same benchmark (the gate's comparison is `comparable`): the
    run the gate names when nothing is comparable measured other questions or labels, and
    its hits are not this run's questions' hits."""
    out: dict[str, dict] = {}
    runs: dict[str, dict | None] = {}
    for variant, frame in per_variant.items():
        previous = (verdict.previous.get(variant) or {}) if verdict is not None else {}
        run_id = previous.get("run_id")
        comparison = verdict.history.get(variant) if verdict is not None else None
        if not run_id or connection_string is None or comparison is None or not comparison.comparable:
            continue
        if run_id not in runs:
            runs[run_id] = history.read_run(connection_string, run_id)
        recorded = runs[run_id]
        if recorded is None or variant not in set(recorded["questions"]["variant"]):
            continue
        before = outcomes_from_frame(recorded["questions"], k=FLIP_K, variant=variant)
        now = outcomes_from_frame(frame, k=FLIP_K)
        same = identical_provenance(recorded["provenance"], verdict.provenance, variant)
        report = flips(before, now)
        out[variant] = {"previous_run": run_id, "hit_to_miss": len(report.hit_to_miss),
                        "miss_to_hit": len(report.miss_to_hit), "same_provenance": same,
                        "rows": to_jsonl_rows(variant, before, now, same_provenance=same)}
    return out


def no_abstention_warning(counts: Mapping[str, Any]) -> list[str]:
    """The trust section's warning for a question set without an abstention slice (an imported or
    BEIR set, a hand-written one without any): nothing in the run can say whether a variant
    refuses when it should. Empty when the set has one, or when the audit did not count it."""
    share = counts.get("abstention_share")
    if share is None or missing(share) or float(share) > 0:
        return []
    return ["The question set has no abstention question (no question without an answer in the corpus, as an "
            "imported or BEIR set often has none): the refusal rates and the risk-coverage curves cannot say whether "
            "a variant knows when to say \"I don't know\"; add an abstention slice (a generated set's "
            "abstention_frac) to measure it."]


def _calibration_lines(c: Mapping[str, Any]) -> list[str]:
    """The relevance grader's agreement with people, and the share of the holes people would
    call relevant (PPI), or why there is no interval."""
    head = (f"**The grader against people** (`{Path(c['source']).name}`, {c['n_calibration']} passages graded, "
            f"{c['n_not_graded']} not): accuracy {fmt_number(c['accuracy'])}, Cohen's kappa {fmt_number(c['kappa'])} "
            "(relevant at a grade of 2 or more).")
    if "estimate" in c:
        return [head + f" Holes relevant: {fmt_number(c['judge_rate'])} by the grader alone; people would say "
                f"{fmt_number(c['estimate'])} [{fmt_number(c['low'])}, {fmt_number(c['high'])}] (prediction-powered "
                f"{round(100 * c['confidence'])}% interval: the grader's rate corrected by its errors on the "
                "calibration set).", ""]
    return [head + f" No interval for the holes: {c.get('error', 'not enough grades')}.", ""]


def validity_section(v: Validity, *, files: Mapping[str, str]) -> list[str]:
    """The report's "How far the numbers can be trusted" section (markdown lines)."""
    a = v.audit.counts
    lines = ["## How far the numbers can be trusted", ""]
    warnings = list(v.audit.problems) + ([v.judged_warning] if v.judged_warning else []) + _power_warning(v.power)
    warnings += no_abstention_warning(a)
    lines += [f"> **Warning:** {w}" for w in warnings] + ([""] if warnings else [])
    lines += ["**The question set** (audit; flagged questions in "
              f"`{Path(files.get('question_audit', 'question_audit.jsonl')).name}`):", ""]
    lines += [f"- {fmt_number(a.get('surface_answerable_share'))} of answerable questions are answerable by surface "
              f"overlap alone ({a.get('surface_answerable', MISSING)} of {a.get('answerable', MISSING)}; max "
              f"{v.audit.thresholds.max_surface_share}); mean content-word overlap with the gold document "
              f"{fmt_number(a.get('overlap_share_mean'))}",
              f"- {a.get('near_duplicate_pairs', 0)} near-duplicate pairs; "
              f"{a.get('documents_without_questions', MISSING)} of {a.get('documents', MISSING)} documents without a "
              f"question ({fmt_number(a.get('documents_without_questions_share'))}); abstention share "
              f"{fmt_number(a.get('abstention_share'))}",
              f"- audit {'passed' if v.audit.passed else 'FAILED'}"
              f"{' (blocking)' if v.audit.thresholds.blocking else ' (a warning: `audit: {blocking: true}` blocks)'}"
              f"{'; a limited run: its questions only, the coverage of the corpus not judged' if v.limited else ''}",
              ""]
    judged = v.judged.assign(**{f"Judged@{JUDGED_K}": v.judged["judged"].map(fmt_number),
                                "unjudged in top 10": v.judged["unjudged_total"],
                                "engine errors (left out)": v.judged["n_errored_excluded"],
                                "P(best nDCG@10)": v.judged["variant"].map(lambda k: _probability(v.p_best.get(k)))})
    sparse = ("" if v.judged_negatives else
              " These labels judge no document non-relevant, so Judged@10 here is only the share of gold documents "
              "found (at most the golds per question ÷ 10) and says nothing about how complete the labels are; "
              "grade the holes (`findings: {config: {grade_holes: true}}`) to measure that.")
    columns = ["variant", f"Judged@{JUDGED_K}", "unjudged in top 10", "P(best nDCG@10)"]
    if int(v.judged["n_errored_excluded"].sum()):
        columns.insert(3, "engine errors (left out)")
    lines += [f"**Labels and rank stability.** Judged@{JUDGED_K} is the share of a variant's top {JUDGED_K} that "
              "carries a judgement (questions an engine failed on are left out); unjudged documents count as "
              f"non-relevant, which favours variants that return the judged documents.{sparse} P(best) is the "
              "bootstrap probability that the variant has the highest nDCG@10.", "", _table(judged, columns), ""]
    if len(v.power):
        shown = v.power.assign(
            mde=v.power["mde"].map(fmt_number),
            flag=v.power["warning"].map(lambda w: "below MDE" if isinstance(w, str) else ""),
            needed=v.power["questions_needed"].map(lambda n: MISSING if missing(n) else int(n)))
        lines += [f"**What the question set can detect** (paired against the baseline variant; α 0.05, power 0.8). "
                  "`mde`: the smallest true difference from the baseline variant this set detects, from the spread "
                  f"of the per-question differences; `questions for {v.effect}`: the questions needed to detect a "
                  f"difference of {v.effect}; {MISSING}: fewer than 2 questions, or the two variants agree on every "
                  "question, so the spread, and with it the MDE, is undefined.", "",
                  _table(shown.rename(columns={"needed": f"questions for {v.effect}"}),
                         ["variant", "metric", "n", "mde", f"questions for {v.effect}", "tolerance", "flag"]), ""]
    if v.holes is not None:
        h = v.holes
        wide = h.metrics.pivot(index="variant", columns="metric", values=["original", "with_llm"])
        table = pd.DataFrame({"variant": list(dict.fromkeys(h.metrics["variant"]))})
        for metric in dict.fromkeys(h.metrics["metric"]):
            table[f"{metric} original"] = table["variant"].map(wide[("original", metric)]).map(fmt_number)
            table[f"{metric} + LLM"] = table["variant"].map(wide[("with_llm", metric)]).map(fmt_number)
        failed = h.counts.get("failed", 0) + h.counts.get("unparseable", 0)
        lines += [f"**With the holes graded** by `{h.judged_by}`: {h.counts.get('holes', 0)} unjudged documents in the "
                  f"pooled top {JUDGED_K}, {h.counts.get('graded', 0)} graded ({failed} failed or unparseable: left "
                  f"unjudged); a grade of 2 or more counts as relevant. Candidate golds are in "
                  f"`{Path(files.get('hole_review', 'hole_review.jsonl')).name}`: set `accept` to true and import them "
                  "with the question set's `extra_golds`.", "", _table(table, list(table.columns)), "",
                  f"The same grader on the gold documents: {len(h.gold_not_answering)} of "
                  f"{h.counts['gold_questions_graded']} questions whose golds were all graded are not answered by any "
                  f"of them (grade below 2; {h.counts['gold_questions_failed']} questions had a gold whose grading "
                  f"failed), and {len(h.answered_elsewhere)} are answered by another "
                  "document too (a sign of a missing gold); both listed in "
                  f"`{Path(files.get('question_audit', 'question_audit.jsonl')).name}`.", ""]
        if h.calibration is not None:
            lines += _calibration_lines(h.calibration)
    if v.flips:
        rows = pd.DataFrame([{"variant": k, "since run": f["previous_run"][:8], "hit→miss": f["hit_to_miss"],
                              "miss→hit": f["miss_to_hit"],
                              "nondeterministic": sum(bool(r["nondeterministic"]) for r in f["rows"])}
                             for k, f in v.flips.items()])
        lines += [f"**Changed since the previous comparable run** (hit@{FLIP_K}; questions in "
                  f"`{Path(files.get('flips', 'flips.jsonl')).name}`; nondeterministic: flips between runs with "
                  "identical provenance, a sign of ties, ANN randomness or an unstable reranker; a question an engine "
                  "failed on in either run is an engine error, not nondeterminism).", "",
                  _table(rows, list(rows.columns)), ""]
    return lines


def _probability(p: float | None) -> str:
    """A bootstrap probability: never shown as a certain 1.000 or 0.000 it is not."""
    if p is None:
        return MISSING
    return "> 0.999" if 0.999 < p < 1 else "< 0.001" if 0 < p < 0.001 else f"{p:.3f}"


def _power_warning(power: pd.DataFrame) -> list[str]:
    """One sentence for every tolerance below its MDE (the table lists them one by one)."""
    below = power[power["warning"].notna()]
    if not len(below):
        return []
    tolerances = ", ".join(f"{m} {t:.3f}" for m, t in below.groupby("metric", sort=False)["tolerance"].first().items())
    defined = int(power["mde"].notna().sum())
    undefined = len(power) - defined
    return [f"in {len(below)} of {defined} comparisons with the baseline variant"
            + (f" (and {undefined} with an undefined MDE)" if undefined else "")
            + f" the gate's tolerance ({tolerances}) is below the minimum detectable effect ({_span(below['mde'])}): "
            "by the spread of this set's per-question differences, a change of that size cannot be told from the "
            "noise of which questions were asked, so a gate at that tolerance decides partly on sampling luck. "
            "Raise the tolerances or add questions (see the table below)."]


def _span(values: pd.Series) -> str:
    low, high = float(values.min()), float(values.max())
    return f"{low:.3f}" if round(low, 3) == round(high, 3) else f"{low:.3f}–{high:.3f}"


def _table(frame: pd.DataFrame, columns: list[str]) -> str:
    return markdown_table(frame, columns)


def write_validity_files(v: Validity, folder: Path, suffix: str = "") -> dict[str, str]:
    """question_audit.jsonl (one flagged question a line) and flips.jsonl (one changed
    question a line), atomically, beside the report."""
    audit_path, flips_path = folder / f"question_audit{suffix}.jsonl", folder / f"flips{suffix}.jsonl"
    rows = v.audit.to_jsonl_rows() + (v.holes.audit_rows() if v.holes is not None else [])
    atomic_write_text(audit_path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    atomic_write_text(flips_path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in v.flip_rows))
    paths = {"question_audit": str(audit_path), "flips": str(flips_path)}
    if v.holes is not None:
        paths["hole_review"] = str(folder / f"hole_review{suffix}.jsonl")
        # The previous run's file was carried into the stage: a person's accepts survive the rewrite, and
        # the rows already imported stay, so the labels of the next run do not silently revert.
        write_review_file(paths["hole_review"], v.holes.review_rows, keep_decisions=True)
    return paths


def validity_metadata(v: Validity) -> dict[str, Any]:
    """Numbers for the report asset's metadata (plotted over time in the UI)."""
    out: dict[str, Any] = {f"audit/{k}": val for k, val in v.audit.counts.items()
                           if isinstance(val, (int, float)) and not isinstance(val, bool)}
    out["audit_passed"] = v.audit.passed
    for _, row in v.judged.iterrows():
        out[f"judged@{JUDGED_K}/{row['variant']}"] = float(row["judged"])
    for _, row in v.power.iterrows():
        out[f"mde/{row['variant']}/{row['metric']}"] = float(row["mde"])
    if v.holes is not None:
        out.update({f"holes/{k}": n for k, n in v.holes.counts.items()})
        for key in ("accuracy", "kappa", "estimate", "low", "high", "judge_rate"):
            if v.holes.calibration is not None and key in v.holes.calibration:
                out[f"holes/calibration {key}"] = float(v.holes.calibration[key])  # rounded with the rest below
        out["audit/llm_gold_does_not_answer"] = len(v.holes.gold_not_answering)
        out["audit/llm_answered_by_another_document"] = len(v.holes.answered_elsewhere)
        for _, row in v.holes.metrics.iterrows():
            out[f"with_llm_labels/{row['variant']}/{row['metric']}"] = row["with_llm"]
    for variant, f in v.flips.items():
        out[f"flips/{variant}/hit_to_miss"] = f["hit_to_miss"]
        out[f"flips/{variant}/miss_to_hit"] = f["miss_to_hit"]
    # as the UI shows a number (a share such as 0.16666666666666666 otherwise); an undefined one
    # (an MDE over identical variants) stays NaN, a gap in the plotted series
    return shown_floats(out)
