"""The findings and report assets and the report's checks: measure what the report shows
beyond the verdict (`measure_findings`), then render the verdict and the findings, publish the
results folder and record the run (`render_run`); one gate check result per variant."""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from eval_pipeline.common.metadata import Markdown, RunLink, shown_number, shown_number_or_nan
from eval_pipeline.common.state import StateDir
from eval_pipeline.corpus.sources import CorpusSnapshot
from eval_pipeline.history.runs import how_to_accept
from eval_pipeline.questions.sets import QuestionSet
from eval_pipeline.ranking.inputs import InconsistentInputs
from eval_pipeline.ranking.results import stage_latency_summary
from eval_pipeline.recommend import headline as recommendation_headline
from eval_pipeline.recommend import recommend
from eval_pipeline.reporting.console import summary_table
from eval_pipeline.reporting.indexes import answer_contexts, index_section, leg_latency, pair_evidence, pair_frame
from eval_pipeline.reporting.report import (
    ReportInputs,
    embedded_images,
    headline,
    markdown_table,
    measure_sections,
    publish_report,
    render_sections,
)
from eval_pipeline.reporting.verdict_entry import verdict_entry
from eval_pipeline.scoring.variant import triage_counts
from eval_pipeline.store.indexes import IndexStores
from eval_pipeline.store.ingest import StoreInfo, fetch_chunk_texts
from eval_pipeline.store.metadata import index_costs
from eval_pipeline.verdict.answers import record_answers
from eval_pipeline.verdict.retrieval import record_verdict
from eval_pipeline.verdict.run import metrics_digest


@dataclass
class RunReport:
    """What the report asset returns and shows."""

    output: dict[str, Any]
    metadata: dict[str, Any]
    report_path: str
    verdict: Any = field(repr=False, default=None)


@dataclass(frozen=True)
class Findings:
    """The findings asset's value: each registered section's measurement (`sections`, name ->
    what its `measure` returned) and the verdict they were measured beside (its run and the
    digest of the metrics it decided on): a report renders findings of its own verdict only."""

    sections: dict[str, Any]
    verdict_run: str | None
    metrics_digest: str


def measure_findings(
    verdict,
    variant_metrics: Mapping[str, pd.DataFrame],
    *,
    sweep,
    snapshot: CorpusSnapshot,
    stores: IndexStores,
    question_set: QuestionSet,
    connection_string: str,
    state: StateDir,
    llm: Callable[[], Any] | None = None,
    compared_sets: Sequence[Any] = (),
    relevance_calibration: str | None = None,
) -> Findings:
    """The findings asset: what every registered report section shows beyond the verdict,
    measured (`eval_pipeline.reporting.report.measure_sections`: power, the audit, the labels'
    coverage and flips, the indexes' costs and recommendation, a second set's agreement). With
    `llm` (a function giving the LLM client), the unjudged documents of the pooled top 10 are
    graded, and with `relevance_calibration` (a file of people's relevance grades) the grader
    is calibrated on it. `compared_sets`: a second question set ranked by the same variants
    (eval_pipeline.reporting.set_validity.rank_compared_sets)."""
    per_variant = _verdicts_metrics(verdict, variant_metrics)
    sections = measure_sections(ReportInputs(
        verdict=verdict, per_variant=per_variant, sweep=sweep, snapshot=snapshot, stores=stores,
        question_set=question_set, connection_string=connection_string, state=state, llm=llm,
        index_of=verdict.index_of, tables=verdict.tables, compared_sets=tuple(compared_sets),
        relevance_calibration=relevance_calibration))
    return Findings(sections=sections, verdict_run=verdict.run_id, metrics_digest=verdict.metrics_digest)


def _verdicts_metrics(verdict, variant_metrics: Mapping[str, pd.DataFrame]) -> dict[str, pd.DataFrame]:
    """The per-question metrics the verdict was decided on, in its order; other metrics (a
    partition materialized again since) are refused, naming what is missing or changed."""
    unmeasured = getattr(verdict, "unmeasured", ())  # gated without metrics: measured before, missing now
    order = [k for k in verdict.gates if k not in unmeasured]
    missing = [k for k in order if k not in variant_metrics]
    per_variant = {k: variant_metrics[k] for k in order if k in variant_metrics}
    if missing or metrics_digest(per_variant) != verdict.metrics_digest:
        raise InconsistentInputs("the verdict was decided on other variant metrics than the report would show "
                                 f"({'missing: ' + ', '.join(missing) if missing else 'they changed since'}): "
                                 "materialize verdict, findings and report again")
    return per_variant


def render_run(
    verdict,
    variant_metrics: Mapping[str, pd.DataFrame],
    findings: Findings,
    *,
    sweep,
    snapshot: CorpusSnapshot,
    stores: IndexStores,
    question_set: QuestionSet,
    connection_string: str,
    state: StateDir,
    run_id: str,
    results_dir: str | Path,
    record_history: bool,
    warn: Callable[[str], None],
) -> RunReport:
    """The report asset: render what the verdict asset decided (`verdict`, a
    `eval_pipeline.verdict.run.decide_run` result: intervals, the baseline-variant
    comparison, every variant's retrieval and answer gate) and what the findings asset measured
    (`findings`, `measure_findings`), publish the results folder, then record the run in the
    history (only once published: a failed write records nothing; never a run whose verdict was
    decided as not recorded, `RunVerdict.unrecorded`, since it offered no acceptance of it).
    Nothing is measured here: no ranking, no model call, no statistic beyond the tables' rendering.

    The report's sections beyond the retrieval tables are the registered ones
    (eval_pipeline.reporting.report.SECTIONS: validity, indexes when the variants file lists
    them, answers, and any registered since), each rendered from its finding."""
    per_variant = _verdicts_metrics(verdict, variant_metrics)
    if (findings.verdict_run, findings.metrics_digest) != (verdict.run_id, verdict.metrics_digest):
        raise InconsistentInputs(f"the findings were measured beside another verdict (run {findings.verdict_run}), "
                                 f"not this one (run {verdict.run_id}): materialize findings and report again")
    run_id = verdict.run_id or run_id  # the run that decided is the run recorded
    index_of = verdict.index_of
    store = stores[index_of.get(sweep.baseline, next(iter(index_of.values())))]  # the run-level fields' index
    provenance = verdict.provenance
    sections = render_sections(findings.sections)  # the registered sections (eval_pipeline.reporting.report.SECTIONS)
    suffix = f".limited-{len(question_set.questions)}" if question_set.limited else ""
    per_query = pd.concat(per_variant.values(), ignore_index=True)
    paths, plots, markdown = publish_report(
        Path(results_dir), suffix=suffix, verdict=verdict, per_query=per_query,
        provenance=shown_provenance(provenance, snapshot, store, question_set, sweep, run_id, stores=stores),
        latency=_latency(per_variant), missing_variants=[k for k in sweep.keys if k not in per_variant],
        baseline=sweep.baseline, questions=question_set.questions, plot_cache=state.plots, warn=warn,
        sections=sections)
    if record_history and verdict.unrecorded:  # what the verdict said of this run stays true: never recorded
        warn(f"run {run_id} is not recorded: its verdict was decided for a run the report does not record "
             f"({verdict.unrecorded}) and offered no acceptance of it; to record a run, materialize verdict, "
             "findings and report again with record_history on")
    elif record_history:  # only once the results are published: a failed write records nothing
        record_verdict(verdict, connection_string, run_id=run_id, per_variant=per_variant)
        record_answers(verdict.answers, connection_string, run_id, run_eligible=verdict.eligible)
    line = headline(verdict, sweep.baseline)  # once: the output's and the metadata's
    headlines = [part.headline for _, part in sections if part.headline]
    output = report_output(verdict, paths, plots, question_set.limited, headline=line)
    metadata = report_metadata(verdict, paths, plots, markdown, headline=line,
                               recommendation=" ".join(headlines) if headlines else None)
    metadata.update(microscope_metadata(per_variant, paths))
    add_sections(output, metadata, sections)
    return RunReport(output=output, metadata=metadata, report_path=paths["report"], verdict=verdict)


def add_sections(output: dict[str, Any], metadata: dict[str, Any], sections: Sequence[tuple[Any, Any]]) -> None:
    """Each rendered section's output and metadata added to the report's. A section may add
    keys, never replace the report's own (what the blocking checks and the UI read: a plugin
    section writing `verdict_failed` or `summary` would change what the gate checks see): a
    ValueError names the section and the keys."""
    own_output, own_metadata = set(output), set(metadata)
    for section, part in sections:
        clash = sorted((set(part.output) & own_output) | (set(part.metadata) & own_metadata))
        if clash:
            raise ValueError(f"report section {section.name!r} writes the report's own key(s) {', '.join(clash)}: "
                             "a section adds to the report, it never replaces what the verdict decided; rename them")
        output.update(part.output)
        metadata.update(part.metadata)


@dataclass
class IndexReport:
    """The Indexes section, its plots' data and what the report asset shows of it."""

    lines: list[str]
    pairs: pd.DataFrame
    recommendation: Any
    headline: str
    output: dict[str, Any]
    metadata: dict[str, Any]
    data: dict[str, Any] = field(default_factory=dict)  # indexes.json: costs, leg latency, pairs, the picks


def index_report(per_variant: Mapping[str, pd.DataFrame], verdict, *, sweep, stores: IndexStores,
                 index_of: Mapping[str, str], tables: Mapping[str, str], questions,
                 connection_string: str) -> IndexReport:
    """Cost per index, the pairs' quality and latency, answer-in-context, the recommendation
    under the variants file's budgets (eval_pipeline.reporting.indexes)."""
    contexts = answer_contexts(per_variant, questions, tables=tables,
                               fetch=lambda table, ids: fetch_chunk_texts(connection_string, table, ids))
    storage = {key: stores.storage_bytes.get(info.table) for key, info in stores.tables.items()}
    pairs = pair_frame(verdict.summary, verdict.intervals,
                       {k: (index_of[k], sweep.pair(k)[1].key) for k in per_variant}, storage, contexts,
                       evidence=pair_evidence(per_variant))  # identical results and latency noise never decide
    rec = recommend(pairs, **sweep.budgets.kwargs(), metric="nDCG@10")
    latency = {index: leg_latency([f for k, f in per_variant.items() if index_of[k] == index])
               for index in dict.fromkeys(index_of.values())}
    costs = [c for c in index_costs(stores) if c["index"] in latency]
    lines = index_section(costs, latency, pairs, rec, baseline=sweep.baseline)
    picks = {name: (None if pick is None else {"index": pick.index, "variant": pick.variant, "quality": pick.quality,
                                               "p95_ms": pick.p95_ms, "storage_bytes": pick.storage_bytes})
             for name, pick in (("within_budget", rec.within_budget), ("best_overall", rec.best_overall))}
    line = recommendation_headline(rec)
    metadata: dict[str, Any] = {"recommendation": line}
    for c in costs:
        metadata[f"{c['index']} storage_bytes"] = c["storage_bytes"]
    data = {"indexes": costs, "leg_latency_ms": latency, "budgets": sweep.budgets.kwargs(), "baseline": sweep.baseline,
            "pairs": pairs.astype(object).where(pairs.notna(), None).to_dict(orient="records"),
            "recommendation": {**picks, "headline": line}}
    return IndexReport(lines, pairs, rec, line, {**picks, "headline": line}, metadata, data)


def _latency(per_variant: Mapping[str, pd.DataFrame]) -> dict[str, Any]:
    return {k: stage_latency_summary(f) for k, f in per_variant.items()}


def shown_provenance(provenance: Mapping[str, Any], snapshot: CorpusSnapshot, store: StoreInfo,
                     question_set: QuestionSet, sweep, run_id: str, *, stores: IndexStores
                     ) -> dict[str, str]:
    """The report's Provenance section, one readable line per item; with indexes listed, the
    embedder, chunking and table lines are the baseline pair's index's, and every index has
    its own line."""
    limited = (f", limited to {len(question_set.questions)} of {question_set.limited_from}"
               if question_set.limited else "")
    chunking = store.chunking
    if question_set.split:
        split = question_set.split
        limited += (f"; fusion tuning: {split['n_tuning']} questions tuned on (fraction {split['fraction']}, seed "
                    f"{split['seed']}), never scored; every variant is scored on the other {split['n_held_out']}")
    tuned = {k: c["tuned"] for k, c in provenance.get("variants", {}).items() if isinstance(c, dict) and "tuned" in c}
    return {
        "corpus": f"{snapshot.source} ({len(snapshot.documents)} documents, {len(snapshot.skipped)} skipped, "
                  f"signature {snapshot.signature})",
        "question set": f"{question_set.path} (fingerprint {question_set.fingerprint}{limited})",
        **{f"tuned {k}": f"{t['method']} {t['chosen'][t['method']]} (of {t['grid_size']} grid points; {t['metric']} "
                         f"{t['tuning_score']:.3f} on the {t['n_tuning']} answerable tuning questions)"
           for k, t in tuned.items()},
        "embedder": f"{store.embedder} ({provenance['embedder_revision']})",
        "chunking": f"{chunking.split_by} {chunking.split_length}/{chunking.split_overlap}, {store.chunk_count} chunks",
        "vector table": store.table,
        **({f"index {key}": f"{info.embedder}, {info.chunking.split_by} {info.chunking.split_length}/"
                            f"{info.chunking.split_overlap}, {info.chunk_count} chunks, table {info.table}"
            for key, info in stores.tables.items()} if sweep.indexes_listed else {}),
        "variants file": f"{sweep.source} (baseline {sweep.baseline})",
        "code version": provenance["code_version"],
        "run id": run_id,
    }


def plain_text(markdown: str) -> str:
    """A markdown line as the UI's plain metadata text shows it: without the backticks and the
    bold marks it would print literally."""
    return markdown.replace("`", "").replace("**", "")


def verdict_output(verdict) -> dict[str, Any]:
    """What the verdict's checks read: per variant, the gate's state, message, rows, the runs it
    was compared with, what decided and the treatment change."""
    return {"summary": verdict.summary, "gate_rows": verdict.gate_rows(),
            "gate_passed": verdict.gate_passed, "gate_messages": {v: g.message for v, g in verdict.gates.items()},
            "gate_states": {v: g.state for v, g in verdict.gates.items()},
            "gate_passed_by_variant": {v: g.passed for v, g in verdict.gates.items()},
            "gate_runs": {v: {"previous": (verdict.previous[v] or {}).get("run_id"),
                              "reference": (verdict.reference[v] or {}).get("run_id")} for v in verdict.gates},
            "decided_by": dict(verdict.decided_by),
            "accept": {v: verdict.run_id for v in verdict.acceptable_failures},
            "accept_leaves": verdict.whole_acceptance_leaves,
            "accept_removes": {v: verdict.removals_acknowledged([v]) for v in verdict.acceptable_failures},
            "accept_takes": {v: verdict.whole_acceptance_takes(v) for v in verdict.acceptable_failures},
            "treatment_changes": {v: list(c.treatment_changes) for v, c in verdict.history.items()},
            "limited": verdict.limited}


def verdict_failures(verdict) -> list[str]:
    """Each failed gate of the run's verdict: `variant (retrieval)`, `variant (answers)`."""
    answers = verdict.answers
    return ([f"{v} (retrieval)" for v, g in verdict.gates.items() if not g.passed]
            + ([f"{v} (answers)" for v in answers.gates if not answers.variant_passed(v)] if answers else []))


def verdict_metadata(verdict, baseline: str) -> dict[str, Any]:
    """The verdict asset's metadata: the headline, the variants table shown in place (each
    variant's headline metrics, gate and why: eval_pipeline.reporting.console.summary_table),
    whether it passed, and numbers the UI plots over time (variants judged by each kind of
    comparison, failed gates)."""
    states = [g.state for g in verdict.gates.values()]
    failed = verdict_failures(verdict)
    return {"headline": plain_text(headline(verdict, baseline)), "variants": summary_table(verdict),
            "passed": verdict.passed, "eligible": verdict.eligible,
            "failed gates": len(failed), "failed": ", ".join(failed) or "none",
            **{f"variants {state}": states.count(state) for state in ("comparable", "paired", "first_run",
                                                                       "not_compared")},
            "decided by": {v: f"{verdict.gates[v].state}: {how}" for v, how in verdict.decided_by.items()}}


def report_output(verdict, paths: Mapping[str, str], plots: Mapping[str, str], limited: bool, *,
                  headline: str) -> dict[str, Any]:
    """The report asset's value, which its checks read: the verdict as decided, where the files
    are, the failed gates (`verdict_passed` fails the run on any) and the `headline`."""
    return {"paths": {**paths, **plots}, **verdict_output(verdict), "limited": limited,
            "verdict_failed": verdict_failures(verdict), "headline": headline}


def report_metadata(verdict, paths: Mapping[str, str], plots: Mapping[str, str], markdown: str, *,
                    headline: str, recommendation: str | None = None) -> dict[str, Any]:
    """The report asset's metadata: first the `verdict` (the headline and each variant's gate,
    short enough for the asset page to show in place: eval_pipeline.reporting.verdict_entry) and
    the `variants` table (shown in place too, where the long report opens in a dialog), the
    `headline` (and the recommendation), the report with its plots inline (the file on disk links
    them by relative path, which the UI cannot resolve), and the plots alone."""
    line = headline + (f" {recommendation}" if recommendation else "")
    return {"verdict": Markdown(verdict_entry(verdict, headline)), "variants": summary_table(verdict),
            "headline": plain_text(line),
            "report": Markdown(inline_plots(markdown, plots)),
            "plots": Markdown(embedded_images(plots)), "path": Path(paths["report"]),
            "gate_passed": verdict.gate_passed}


def microscope_metadata(per_variant: Mapping[str, pd.DataFrame], paths: Mapping[str, str]) -> dict[str, Any]:
    """The microscope on the report asset's page: misses.jsonl (every miss with its evidence) as a
    path, the run's misses per triage label and per dense cause as numbers (plotted over runs), and
    the same counts per variant."""
    by_variant = {key: triage_counts(frame) for key, frame in per_variant.items()}
    totals: dict[str, int] = {}
    for counts in by_variant.values():
        for name, n in counts.items():
            totals[name] = totals.get(name, 0) + n
    out: dict[str, Any] = {"misses": Path(paths["misses"])} if paths.get("misses") else {}
    out.update({f"misses {n.removeprefix('triage_')}": v for n, v in totals.items() if n.startswith("triage_")})
    out.update({f"dense misses {n.removeprefix('dense_')}": v for n, v in totals.items() if n.startswith("dense_")})
    out["misses by variant"] = {key: {n.removeprefix("triage_"): v for n, v in counts.items()
                                      if n.startswith("triage_") and v} for key, counts in by_variant.items()}
    return out


def inline_plots(markdown: str, plots: Mapping[str, str]) -> str:
    """`markdown` with each `![name](file.png)` of `plots` (name -> path) replaced by the
    image as a data URI."""
    for name, path in plots.items():
        uri = f"data:image/png;base64,{base64.b64encode(Path(path).read_bytes()).decode()}"
        markdown = markdown.replace(f"![{name}]({Path(path).name})", f"![{name}]({uri})")
    return markdown


def gate_check_names(keys: Sequence[str]) -> dict[str, str]:
    """variant key -> a valid check name (`gate__hybrid_mmr`), unique even when two keys differ
    only by characters an identifier cannot hold."""
    plain = {key: "gate__" + re.sub(r"[^A-Za-z0-9_]", "_", key) for key in keys}
    clashing = {name for name in plain.values() if list(plain.values()).count(name) > 1}
    # keys that differ only by such characters get a suffix from the key itself: the same check
    # name for the same key whatever the order of the file
    return {key: name + "_" + hashlib.sha256(key.encode()).hexdigest()[:6] if name in clashing else name
            for key, name in plain.items()}


GATE_COLUMNS = ["against", "metric", "actual", "yardstick", "delta", "tolerance", "passed"]


TREND_METRICS = ("hit@1", "hit@5", "mrr", "ndcg@10", "latency_p95_ms")


def _headline_numbers(summary: Any, key: str) -> dict[str, float]:
    """The variant's headline numbers from the run's summary, rounded to 4 decimals: recorded by
    its gate check on every evaluation, passed or failed, so the check's plots are that variant's
    trend over runs (one series per variant; the partitions' own materializations cannot be
    plotted per partition)."""
    if summary is None or not len(summary) or key not in set(summary["variant"]):
        return {}
    row = summary.set_index("variant").loc[key]
    out = {}
    for metric in TREND_METRICS:
        value = shown_number(row.get(metric)) if metric in row.index else None
        if value is not None:
            out[metric] = value
    return out


def variant_gate_checks(report: Mapping[str, Any], keys: Sequence[str]) -> dict[str, tuple[bool, dict[str, Any]]]:
    """key -> (passed, metadata) of each variant's gate: every failing metric against the
    previous run and the pinned reference, the runs compared, and what changed in the
    treatment. A variant not in this run's report passes, marked not evaluated."""
    out = {}
    for key in keys:
        if key not in report["gate_messages"]:
            out[key] = (True, {"evaluated": False, "message": f"variant {key!r} is not in this run's report"})
            continue
        rows = [r for r in report["gate_rows"] if r["variant"] == key]
        failures = [r for r in rows if r["passed"] is False]
        runs = report.get("gate_runs", {}).get(key, {})
        metadata: dict[str, Any] = {
            "evaluated": True, "state": report.get("gate_states", {}).get(key, rows[0]["state"] if rows else ""),
            "message": report["gate_messages"][key], "failures": len(failures),
            "previous_run": RunLink(runs.get("previous") or ""), "reference_run": RunLink(runs.get("reference") or ""),
            "treatment_changes": ", ".join(report.get("treatment_changes", {}).get(key, [])) or "none",
            "comparisons": Markdown(markdown_table(pd.DataFrame(rows), GATE_COLUMNS)) if rows else Markdown(""),
        }
        if key in report.get("decided_by", {}):
            metadata["decided_by"] = report["decided_by"][key]
        if key in report.get("accept", {}):  # a failed gate: how to accept it once its numbers are intended
            metadata["accept"] = how_to_accept(report["accept"][key], key,
                                               leaves=report.get("accept_leaves", {}).get(key, ()),
                                               removes=report.get("accept_removes", {}).get(key, ()),
                                               takes=report.get("accept_takes", {}).get(key, ()))
        for r in failures:
            metadata[f"{r['against']} {r['metric']} delta"] = shown_number_or_nan(r["delta"])
        metadata.update(_headline_numbers(report.get("summary"), key))  # on every evaluation: the check's trend
        passed = report.get("gate_passed_by_variant", {}).get(key, not failures)  # a strict mismatch has no row
        out[key] = (bool(passed), metadata)
    return out
