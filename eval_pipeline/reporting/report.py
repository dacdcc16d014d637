"""The markdown report and the per-question JSONL that other tools can read.

The report's sections beyond the retrieval tables have one registry (`SECTIONS`, issue #24):
each `ReportSection` declares its name, where it sits (`slot`), what it needs and two steps:
``measure(inputs)``, everything the section shows, computed by the `findings` asset before the
report (it may read the database or ask the LLM; its value is stored, so it must pickle; None:
nothing to say), and ``render(measured) -> SectionPart``, a pure function of that value (its
lines, the files and plots it writes into the results folder, what it adds to the report
asset's output, metadata and headline). The report asset only renders: what it shows was
decided by the verdict and measured by the findings. The built-in sections (validity, indexes,
answers) are declared in eval_pipeline.reporting.sections. A new section is one file that
defines its two steps and calls ``SECTIONS.register(ReportSection(...))``, plus the line that
imports the file (`BUILTIN_SECTION_MODULES`, or EVAL_PIPELINE_PLUGINS): no signature changes.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from eval_pipeline.common.atomic import atomic_write_bytes, atomic_write_text
from eval_pipeline.common.formatting import fmt_number, markdown_table
from eval_pipeline.common.registry import Registry
from eval_pipeline.metrics.selective import UNREFUSED_HIT
from eval_pipeline.ranking.microscope import CROWDING_MARGIN, DENSE_CAUSES, TRIAGE_LABELS
from eval_pipeline.ranking.results import STAGES
from eval_pipeline.reporting.publish import final_paths, staged_results
from eval_pipeline.reporting.trec import write_trec_files
from eval_pipeline.scoring.variant import CLASS_METRICS, HEADLINE_METRICS, class_breakdown

# Where a section sits. The report reads in the order a reader needs it: the headline and the
# regression gate (what failed, against what, by how much), then `before_variants` (the indexes'
# recommendation), the variants table and the comparison with the baseline, `after_gate` (answer
# quality), the plots, `after_plots`, the causes (classes, abstention, latency, misses), then
# `before_provenance` (how far the numbers can be trusted: power, audit, labels, set validity),
# and the provenance last.
SLOTS = ("before_variants", "after_gate", "after_plots", "before_provenance")

# What a section may need: the LLM client (given only when the report's config asks for a
# model: `inputs.llm`), the database, the variants file's indexes (built only when it lists them).
SECTION_NEEDS = ("llm", "database", "indexes")


@dataclass(frozen=True)
class ReportInputs:
    """Everything a section's `measure` may read: the verdict, each variant's per-question
    metrics (in the verdict's order), the sweep (the variants file), the corpus, the index
    stores, the questions, the database, the state dir, the LLM client's factory (None unless
    asked), each partition's index and table, and any second question set ranked by the same
    variants."""

    verdict: Any
    per_variant: Mapping[str, pd.DataFrame]
    sweep: Any
    snapshot: Any
    stores: Any
    question_set: Any
    connection_string: str
    state: Any
    llm: Callable[[], Any] | None
    index_of: Mapping[str, str]
    tables: Mapping[str, str]
    # a second question set of the run on the same corpus (`question_set.compare_with`), ranked by
    # every variant: eval_pipeline.reporting.set_validity.ComparedSet, read by the set_validity section
    compared_sets: Sequence[Any] = ()
    # a file of people's relevance grades the holes' grader is calibrated on (with the LLM only)
    relevance_calibration: str | None = None


@dataclass
class SectionPart:
    """What one section adds to one report. `lines` may be a function of the files its
    `write` put into the staged results folder (name -> path)."""

    lines: Sequence[str] | Callable[[Mapping[str, str]], Sequence[str]] = ()
    write: Callable[[Path, str], Mapping[str, str]] | None = None  # (stage folder, suffix) -> files written
    plots: Callable[[Path, str], Mapping[str, str]] | None = None  # (stage folder, suffix) -> PNGs, shown under Plots
    output: Mapping[str, Any] = field(default_factory=dict)  # added to the report asset's value
    metadata: Mapping[str, Any] = field(default_factory=dict)  # added to the report asset's metadata
    headline: str | None = None  # added after the report's headline


@dataclass(frozen=True)
class ReportSection:
    name: str
    slot: str  # of SLOTS
    measure: Callable[[ReportInputs], Any]  # in the findings asset; None: nothing to say
    render: Callable[[Any], SectionPart]  # in the report asset, from the measured value alone
    needs: frozenset[str] = frozenset()  # of SECTION_NEEDS
    description: str = ""

    def __post_init__(self) -> None:
        if self.slot not in SLOTS:
            raise ValueError(f"report section {self.name!r}: slot {self.slot!r} is not valid; "
                             f"valid: {', '.join(SLOTS)}")


BUILTIN_SECTION_MODULES: tuple[str, ...] = ("eval_pipeline.reporting.sections", "eval_pipeline.reporting.set_validity")


SECTIONS: Registry[ReportSection] = Registry("report section", modules=BUILTIN_SECTION_MODULES)


def measure_sections(inputs: ReportInputs) -> dict[str, Any]:
    """{section name: what it measured}, every registered section in registration order (a
    section that needs the indexes only when the variants file lists them; a section that
    measured None is left out): the findings asset's value."""
    out = {}
    for section in SECTIONS.kinds():
        if "indexes" in section.needs and not getattr(inputs.sweep, "indexes_listed", False):
            continue
        measured = section.measure(inputs)
        if measured is not None:
            out[section.name] = measured
    return out


def render_sections(findings: Mapping[str, Any]) -> list[tuple[ReportSection, SectionPart]]:
    """Each measured section rendered, in registration order. A finding whose section is no
    longer registered (a plugin removed since the findings were stored) is an error naming it,
    never silently dropped."""
    kinds = {section.name: section for section in SECTIONS.kinds()}
    unknown = sorted(set(findings) - set(kinds))
    if unknown:
        raise ValueError(f"the findings hold section(s) {', '.join(unknown)} that are not registered "
                         f"(registered: {', '.join(kinds)}): materialize findings again")
    return [(section, section.render(findings[name])) for name, section in kinds.items() if name in findings]

HOW_TO_READ = """\
## How to read this

- Every metric is a mean over the **answerable** questions (those with at least one gold
  document); a question the engine errored on counts as a miss, never as skipped.
- **hit@k**: share of questions with a gold document in the top k. **mrr**: mean of 1/rank
  of the first gold document (0 when none is returned). **recall@10**: share of a question's
  gold documents in the top 10. **ndcg@10**: rank-discounted gain, 1.0 when every gold
  document is at the top.
- **Miss diagnosis**: *never candidate* (no leg found the gold document), *keyword only* /
  *dense only* (one leg had it; this variant did not surface it), *both legs*, *lost in
  fusion* (a fused leg had it, fusion pushed it out), *demoted by reranker* (top 10 before
  reranking, not after), *abstained* (the threshold returned nothing), *errored*.
- Chunk results are turned into documents before scoring: a document takes the rank of its
  best chunk. Equal scores are ordered by document id, so a re-run gives the same numbers.
- **Abstention questions** have no answer in the corpus. They are reported apart and do not
  enter the means; a variant without a score threshold always returns something, so it
  never refuses correctly.
- `metadata` reads only titles, descriptions and file names. An engine that does not beat it
  on the body-only slice is not using the document text.
- Differences of a few points on a couple of hundred questions can be noise: compare with
  the per-question file (`per_query.jsonl`) before deciding.
"""


def _best(summary: pd.DataFrame) -> pd.Series:
    return summary.sort_values(["ndcg@10", "mrr", "variant"], ascending=[False, False, True]).iloc[0]


def headline(verdict, baseline: str | None) -> str:
    """One line for the top of the report and the Dagster UI: best variant, the run's verdict
    (retrieval and answers, and which comparison decided), what changed since the previous
    run, new and vanished variants."""
    best = _best(verdict.summary)
    gates = verdict.gates
    states = {state: [v for v, g in gates.items() if g.state == state]
              for state in ("comparable", "paired", "first_run", "not_compared")}
    failed = [v for v, g in gates.items() if not g.passed]
    answers = getattr(verdict, "answers", None)
    answers_failed = [v for v in answers.gates if not answers.variant_passed(v)] if answers is not None else []
    if failed or answers_failed:
        parts = []
        if failed:
            how = {"not_compared": "not compared", "paired": "against its reference configuration on today's "
                   "questions"}
            parts.append("Gate FAILED for " + ", ".join(
                f"`{v}`" + (f" ({how[gates[v].state]})" if gates[v].state in how else "") for v in failed))
        if answers_failed:
            parts.append("answer gate FAILED for " + ", ".join(f"`{v}`" for v in answers_failed))
        gate = "; ".join(parts)
    else:
        compared = [f"{len(states['comparable'])} of {len(gates)} variants compared with their previous run"]
        if states["paired"]:
            compared.append(f"{len(states['paired'])} paired with their reference configuration on today's questions")
        if states["first_run"]:
            compared.append(f"{len(states['first_run'])} first run")
        gate = f"Gate passed ({', '.join(compared)})"
    changes = []
    for v in states["comparable"]:
        prev = verdict.previous[v]["metrics"].get("ndcg@10")
        now = float(verdict.summary.set_index("variant").loc[v, "ndcg@10"])
        if prev is not None and abs(now - prev) >= 0.0005:
            changes.append(f"`{v}` nDCG@10 {now - prev:+.3f}")
    # what moved is nDCG@10 (a gate may still have failed on another metric), and only of the
    # variants compared with their previous run: said of the whole run, it would cover a variant
    # that nothing judged (renamed and changed, say)
    of = "" if len(states["comparable"]) == len(gates) else \
        f" ({len(states['comparable'])} of {len(gates)} variants compared with their previous run)"
    since = (f"Since the previous run{of}: " + ", ".join(changes)) if changes else (
        f"nDCG@10 unchanged since the previous run{of}" if states["comparable"] else "No comparable previous run")
    new = [v for v in states["first_run"] if verdict.previous.get(v) is None]
    vanished = list(getattr(verdict, "vanished", []) or [])
    membership = "".join([f" New: {', '.join(f'`{v}`' for v in new)}." if new and len(new) < len(gates) else "",
                          f" Gone from the variants file: {', '.join(f'`{v}`' for v in vanished)}." if vanished
                          else ""])
    loosened = getattr(verdict, "loosened", {}) or {}
    if loosened:
        membership += (" The gate was loosened since the yardstick of " + ", ".join(f"`{v}`" for v in loosened)
                       + ": judged with the old tolerances until a run is accepted.")
    limited = " (limited run: not a baseline)" if verdict.limited else ""
    return (f"Best variant: {best['variant']} (nDCG@10 {best['ndcg@10']:.3f}, MRR {best['mrr']:.3f}). "
            f"{gate}. {since}.{membership}{limited}")


def render_plots(verdict, folder: Path, suffix: str = "", *, cache_dir: Path | None = None,
                 per_query: pd.DataFrame | None = None) -> dict[str, str]:
    """The report's PNGs, written beside the markdown; with `per_query` (every variant's
    per-question rows) holding a confidence, the risk-coverage curves too.

    With `cache_dir`, a plot whose input table (and plotting code) is unchanged is copied from
    the cache instead of drawn again: importing matplotlib and drawing the figures was about
    2 s of a re-run that changed nothing (bench/warm_rerun.py).
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    wanted = {"hit_at_k": ("hit_at_k_curves", verdict.summary, {}),
              "ndcg_intervals": ("metric_bars", verdict.intervals, {"metric": "ndcg@10"})}
    if len(verdict.baseline_comparison):
        wanted["baseline_deltas"] = ("baseline_deltas", verdict.baseline_comparison, {"metric": "ndcg@10"})
    if per_query is not None and "confidence" in per_query and per_query["confidence"].notna().any():
        wanted["risk_coverage"] = ("risk_coverage_curves", _risk_table(per_query), {})
    plots = {}
    for name, (function, table, options) in wanted.items():
        path = folder / f"{name}{suffix}.png"
        cached = Path(cache_dir) / f"{_plot_key(function, table, options)}.png" if cache_dir is not None else None
        data = cached.read_bytes() if cached is not None and cached.exists() else b""
        if _whole_png(data):
            atomic_write_bytes(path, data)
        else:  # not cached, or a truncated or foreign file: draw it (again)
            # deferred: plots imports matplotlib (~0.9 s), only when a plot is drawn
            from eval_pipeline.reporting import plots as plotting  # noqa: PLC0415

            getattr(plotting, function)(table, path, **options)
            if cached is not None:
                atomic_write_bytes(cached, path.read_bytes())
        plots[name] = str(path)
    return plots


def _risk_table(per_query: pd.DataFrame) -> pd.DataFrame:
    """What the risk-coverage curves read of the per-question rows (metrics.selective.losses):
    the plot's cache key hashes these columns only, not the whole frame."""
    hit = UNREFUSED_HIT if UNREFUSED_HIT in per_query else "hit@10"
    return per_query[["variant", "answerable", "errored", "confidence", hit]].reset_index(drop=True)


# The code a cached plot was drawn by: the plotting module, and the risk-coverage curves' measures.
_PLOTS_SOURCES = (Path(__file__).resolve().parent / "plots.py",
                  Path(__file__).resolve().parent.parent / "metrics" / "selective.py")
_PNG_START, _PNG_END = b"\x89PNG\r\n\x1a\n", b"IEND\xaeB`\x82"


def _whole_png(data: bytes) -> bool:
    """A complete PNG: its signature at the start and its IEND chunk at the end."""
    return data.startswith(_PNG_START) and data.endswith(_PNG_END)


def _plot_key(function: str, table: pd.DataFrame, options: Mapping[str, Any]) -> str:
    """A digest of the plotting code, the function, its options and its input table."""
    digest = hashlib.sha256(b"".join(source.read_bytes() for source in _PLOTS_SOURCES))
    digest.update(repr((function, sorted(options.items()), list(table.columns), table.dtypes.astype(str).tolist()))
                  .encode())
    digest.update(pd.util.hash_pandas_object(table, index=False).to_numpy().tobytes())
    return digest.hexdigest()


def embedded_images(plots: Mapping[str, str]) -> str:
    """Markdown with the PNGs inline (data URIs), for the Dagster UI."""
    return "\n\n".join(
        f"**{name.replace('_', ' ')}**\n\n![{name}](data:image/png;base64,"
        f"{base64.b64encode(Path(path).read_bytes()).decode()})" for name, path in plots.items()
    )


def render_report(
    summary: pd.DataFrame,
    per_query: pd.DataFrame,
    provenance: Mapping[str, Any],
    *,
    latency: Mapping[str, Mapping[str, Mapping[str, float]]] | None = None,
    missing_variants: list[str] | None = None,
    verdict=None,
    baseline: str | None = None,
    plots: Mapping[str, str] | None = None,
    sections: Mapping[str, Sequence[str]] | None = None,
    recommendation: str | None = None,
) -> str:
    """The whole report. `per_query` holds every variant's rows (column `variant`);
    `latency` maps variant -> stage -> {p50, p95, max, mean}; `verdict` (a RunVerdict) adds
    intervals, significance against the baseline variant and the gate; `plots` maps names
    to PNG file names beside the report; `sections` maps a slot (`SLOTS`) to the lines of the
    registered sections that sit there (`SECTIONS`: "Indexes" before the variants, "Answer
    quality" after them, "How far the numbers can be trusted" and "Do the question sets agree?"
    before the provenance);
    `recommendation` is added to the headline."""
    slot = {name: list((sections or {}).get(name, ())) for name in SLOTS}
    best = _best(summary)
    lines = ["# Retrieval evaluation", ""]
    if verdict is not None:
        lines += [f"**{headline(verdict, baseline)}**" + (f" **{recommendation}**" if recommendation else ""), ""]
    else:
        lines += [f"**Best variant: `{best['variant']}`** with nDCG@10 {best['ndcg@10']:.3f}, MRR {best['mrr']:.3f} "
                  f"and hit@5 {best['hit@5']:.3f} on {int(best['n_answerable'])} answerable questions.", ""]
    errored = int(summary["n_errored"].sum())
    if errored:
        lines += [f"> **Warning:** {errored} question(s) errored and were scored as misses; see `per_query.jsonl`.", ""]
    fallbacks = {r["variant"]: int(r["n_rerank_fallback"]) for _, r in summary.iterrows()
                 if int(r.get("n_rerank_fallback", 0) or 0)}
    if fallbacks:
        listed = ", ".join(f"`{v}` {n}" for v, n in fallbacks.items())
        lines += [f"> **Warning:** the reranker fell back to the first-stage order (its answer named no candidate) "
                  f"on {listed} question(s); those questions were not reranked.", ""]
    if missing_variants:
        lines += [f"> **Warning:** no results yet for variant(s) {', '.join(missing_variants)}; materialize them.", ""]
    if verdict is not None:  # the verdict first: what failed, against what, by how much
        lines += _gate_section(verdict)
    lines += slot["before_variants"]
    lines += ["## Variants", ""]
    table = summary.assign(errored=summary["n_errored"], **{"p50 ms": summary["latency_p50_ms"],
                                                            "p95 ms": summary["latency_p95_ms"]})
    columns = ["variant", *HEADLINE_METRICS, "errored", "p50 ms", "p95 ms"]
    if verdict is not None:
        table = _with_intervals_and_marks(table, verdict, baseline)
        columns = ["variant", *HEADLINE_METRICS, "ndcg@10 95% CI", "errored", "p50 ms", "p95 ms"]
    lines += [markdown_table(table, columns), ""]
    if verdict is not None and len(verdict.baseline_comparison):
        lines += [f"▲/▼: significantly better/worse than the baseline variant `{baseline}` on nDCG@10 "
                  "(paired randomization test, Holm-corrected across variants, p < 0.05).", ""]
        lines += _baseline_section(verdict, baseline)
    lines += slot["after_gate"]
    if plots:
        lines += ["## Plots", ""] + [f"![{name}]({file})" for name, file in plots.items()] + [""]
    lines += slot["after_plots"]

    lines += class_lines(per_query, list(summary["variant"]))

    lines += abstention_lines(summary, per_query)

    if latency:
        stage_names = [s for s in (*STAGES, "total") if any(s in stages for stages in latency.values())]
        lat_rows = []
        for variant, stages in latency.items():
            row = {"variant": variant}
            for stage in stage_names:
                st = stages.get(stage)
                row[stage] = f"{st['p50']:.1f} / {st['p95']:.1f}" if st else ""
            lat_rows.append(row)
        lines += ["## Latency by stage (ms, p50 / p95 per question)", ""]
        lines += [markdown_table(pd.DataFrame(lat_rows), ["variant", *stage_names]), ""]

    miss_columns = [c for c in summary.columns if c.startswith("miss_") and summary[c].sum() > 0]
    if miss_columns:
        lines += ["## Why questions were missed (no gold document in the top 10)", ""]
        renamed = summary.rename(columns={c: c.removeprefix("miss_").replace("_", " ") for c in miss_columns})
        lines += [markdown_table(renamed, ["variant", *[c.removeprefix("miss_").replace("_", " ")
                                                        for c in miss_columns]]), ""]

    lines += microscope_lines(summary, per_query, baseline)

    answerable = per_query[per_query["answerable"]]
    best_rows = answerable[answerable["variant"] == best["variant"]]
    worst = best_rows[best_rows["miss_class"].notna()].sort_values("qid").head(10)
    if len(worst):
        lines += [f"## Misses of the best variant (`{best['variant']}`), first 10", ""]
        for _, row in worst.iterrows():
            got = ", ".join(list(row["doc_ids"])[:3]) or "nothing"
            lines.append(f"- `{row['qid']}` {row['question']} — gold: {', '.join(row['gold'])}; "
                         f"returned {got}; **{row['miss_class'].replace('_', ' ')}**")
        lines.append("")

    lines += slot["before_provenance"]
    lines += ["## Provenance", ""]
    lines += [f"- {k}: `{v}`" for k, v in provenance.items()]
    lines += ["", HOW_TO_READ]
    return "\n".join(lines)


# What a class is called in the report, by field (any other field: its name).
_FIELD_LABELS = {"form": "form", "hard_class": "hard class"}


def class_lines(per_query: pd.DataFrame, variants: Sequence[str]) -> list[str]:
    """Two sections over every class present (`class_breakdown`): hit@5 per class and variant
    in one compact table, then every class's hit@1, hit@5, MRR and nDCG@10 per variant with
    its number of answerable (n) and abstention questions. Nothing when no question has a class."""
    table = class_breakdown(per_query)
    if not len(table):
        return []
    compact = []
    for (name, cls), part in table.groupby(["field", "class"], sort=False):
        compact.append({"slice": f"{_FIELD_LABELS.get(str(name), str(name))}: {cls}", "n": int(part["n"].max()),
                        **dict(zip(part["variant"], part["hit@5"]))})
    lines = ["## hit@5 by question kind", "",
             markdown_table(pd.DataFrame(compact), ["slice", "n", *variants]), ""]
    detail = table.assign(**{"class": [f"{_FIELD_LABELS.get(str(f), str(f))}: {c}"
                                       for f, c in zip(table["field"], table["class"])]})
    lines += ["## Every question class (means over its answerable questions)", "",
              markdown_table(detail, ["class", "variant", "n", "n_abstention", *CLASS_METRICS]), ""]
    return lines


def _with_intervals_and_marks(table: pd.DataFrame, verdict, baseline: str | None) -> pd.DataFrame:
    table = table.copy()
    iv = verdict.intervals
    iv = iv[iv["metric"] == "ndcg@10"].set_index("variant")
    table["ndcg@10 95% CI"] = [
        f"[{iv.loc[v, 'low']:.3f}, {iv.loc[v, 'high']:.3f}]" if v in iv.index else "" for v in table["variant"]]
    cmp = verdict.baseline_comparison
    if len(cmp):
        cmp = cmp[cmp["metric"] == "ndcg@10"].set_index("variant")
        marks = []
        for v in table["variant"]:
            if v in cmp.index and bool(cmp.loc[v, "significant"]):
                marks.append(" ▲" if cmp.loc[v, "delta"] > 0 else " ▼")
            else:
                marks.append("")
        table["ndcg@10"] = [f"{x:.3f}{m}" for x, m in zip(table["ndcg@10"], marks)]
    table["variant"] = [f"{v} (baseline variant)" if v == baseline else v for v in table["variant"]]
    return table


def _baseline_section(verdict, baseline: str | None) -> list[str]:
    cmp = verdict.baseline_comparison
    rows = []
    for _, r in cmp[cmp["metric"].isin(["ndcg@10", "mrr"])].iterrows():
        rows.append({
            "variant": r["variant"], "metric": r["metric"], "delta": f"{r['delta']:+.3f}",
            "95% CI": f"[{r['ci_low']:+.3f}, {r['ci_high']:+.3f}]", "p (Holm)": f"{r['p_holm']:.3g}",
            "wins/ties/losses": f"{int(r['wins'])}/{int(r['ties'])}/{int(r['losses'])}",
            "significant": "yes" if r["significant"] else "no",
        })
    return [f"## Compared with the baseline variant `{baseline}` (this run, same questions)", "",
            markdown_table(pd.DataFrame(rows), list(rows[0])), ""] if rows else []


def _gate_section(verdict) -> list[str]:
    lines = ["## Regression gate (each variant against its previous run and its pinned reference)", "",
             "A variant passes when no gated metric dropped by more than its tolerance since its previous "
             "eligible run on the same benchmark (corpus, question texts, labels, scored subset), **and** since its "
             "pinned reference (the run accepted with `python -m eval_pipeline.history accept`, else the "
             "first eligible run), so a regression cannot pass in small steps. Where the benchmark changed, its "
             "reference configuration is ranked on today's questions and it is judged against that (`paired`); "
             "where nothing can judge it, it fails (`not_compared`) until a run is accepted.", ""]
    entries: dict[tuple[str, tuple[str, ...]], list[str]] = {}  # (verdict line, its details) -> variants
    for variant, g in verdict.gates.items():
        cmp = verdict.history[variant]
        extra = f" Treatment changed: {', '.join(cmp.treatment_changes)}." if cmp.treatment_changes else ""
        decided = getattr(verdict, "decided_by", {}).get(variant)
        extra += f" Decided by: {decided}." if decided else ""
        head = f"**{'passed' if g.passed else 'FAILED'}** ({g.state}).{extra}"
        sub: list[str] = []
        prev, ref = verdict.previous.get(variant), verdict.reference.get(variant)
        prev_gate = verdict.previous_gates.get(variant, g)
        ref_gate = verdict.reference_gates.get(variant)
        how = ("accepted" if ref.get("accepted") else "the first eligible run") if ref is not None else ""
        if prev is None or g.state == "not_compared":
            sub.append(f"  - {g.message}")
        elif g.state == "paired":
            sub.append(f"  - against the configuration of its last yardstick run `{prev['run_id']}`, ranked on "
                         f"today's questions: {prev_gate.message}")
            if ref is not None and ref_gate is not None:
                sub.append(f"  - against the configuration of its pinned reference `{ref['run_id']}` ({how}), "
                             f"ranked on today's questions: {ref_gate.message}")
        elif ref is not None and ref["run_id"] == prev["run_id"]:
            sub.append(f"  - against the previous run `{prev['run_id']}`, also the pinned reference ({how}): "
                         f"{prev_gate.message}")
        else:
            sub.append(f"  - against the previous run `{prev['run_id']}`: {prev_gate.message}")
            if ref is not None and ref_gate is not None:
                sub.append(f"  - against the pinned reference `{ref['run_id']}` ({how}): {ref_gate.message}")
        entries.setdefault((head, tuple(sub)), []).append(variant)
    for (head, details), variants in entries.items():  # variants judged alike share one line
        names = ", ".join(f"`{v}`" for v in variants)
        lines.append(f"- {names}: {head}" if len(variants) == 1 else f"- {len(variants)} variants, {names}: {head}")
        lines += list(details)
    failures = [r for r in verdict.gate_rows() if r["passed"] is False]
    if failures:
        lines += ["", markdown_table(pd.DataFrame(failures), ["variant", "against", "metric", "actual", "yardstick",
                                                               "delta", "tolerance"])]
    return lines + [""]


def publish_report(
    results_dir: Path,
    *,
    suffix: str,
    verdict,
    per_query: pd.DataFrame,
    provenance: Mapping[str, Any],
    latency: Mapping[str, Any],
    missing_variants: list[str],
    baseline: str,
    questions,
    plot_cache: Path | None,
    warn=print,
    sections: Sequence[tuple[ReportSection, SectionPart]] = (),
) -> tuple[dict[str, str], dict[str, str], str]:
    """Write the whole results folder of one run (plots, results.md, per_query.jsonl, TREC
    files) into a staging folder and swap it in only when all of it is written (see
    `eval_pipeline.reporting.publish`): a failure, such as a full disk, leaves the previous results
    intact and raises PublishError saying so. Returns (paths, plots, markdown), the paths
    as published. `sections` (`build_sections`) add their plots, files, lines and headline."""
    runs = {variant: dict(zip(f["qid"], f["doc_ids"])) for variant, f in per_query.groupby("variant", sort=False)}
    with staged_results(results_dir, suffix=suffix) as stage:
        plots = render_plots(verdict, stage, suffix, cache_dir=plot_cache, per_query=per_query)
        for _, part in sections:
            if part.plots is not None:
                plots.update(part.plots(stage, suffix))
        written = [dict(part.write(stage, suffix)) if part.write is not None else {} for _, part in sections]
        by_slot: dict[str, list[str]] = {}
        for (section, part), files in zip(sections, written):
            lines = part.lines(files) if callable(part.lines) else part.lines
            by_slot.setdefault(section.slot, []).extend(lines)
        headlines = [part.headline for _, part in sections if part.headline]
        markdown = render_report(verdict.summary, per_query, provenance, latency=latency,
                                 missing_variants=missing_variants, verdict=verdict, baseline=baseline,
                                 plots={k: Path(v).name for k, v in plots.items()}, sections=by_slot,
                                 recommendation=" ".join(headlines) if headlines else None)
        paths = write_report(stage, markdown, per_query, suffix=suffix)
        for files in written:
            paths.update(files)
        try:
            paths.update(write_trec_files(stage / f"trec{suffix}", runs, questions))
        except ValueError as exc:  # ids with whitespace cannot be written in TREC format
            shutil.rmtree(stage / f"trec{suffix}", ignore_errors=True)  # never publish half a TREC folder
            warn(f"TREC run files not written: {exc}")
    return final_paths(paths, stage, results_dir), final_paths(plots, stage, results_dir), markdown


def write_report(results_dir: str | Path, markdown: str, per_query: pd.DataFrame, *,
                 suffix: str = "") -> dict[str, str]:
    """Writes results.md, per_query.jsonl and misses.jsonl atomically (a limited run adds a
    suffix to the names, so it never overwrites a full run's results); returns their paths.
    The microscope's records (`microscope` column) go to misses.jsonl, one line per miss
    (variant and question, with the question's text), not into per_query.jsonl."""
    out = Path(results_dir)
    md_path, pq_path = out / f"results{suffix}.md", out / f"per_query{suffix}.jsonl"
    misses_path = out / f"misses{suffix}.jsonl"
    atomic_write_text(md_path, markdown)
    records = per_query.drop(columns=["microscope"], errors="ignore").to_dict(orient="records")
    atomic_write_text(pq_path, "".join(json.dumps(_jsonable(r), ensure_ascii=False) + "\n" for r in records))
    atomic_write_text(misses_path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in miss_records(per_query)))
    return {"report": str(md_path), "per_query": str(pq_path), "misses": str(misses_path)}


def miss_records(per_query: pd.DataFrame) -> list[dict[str, Any]]:
    """The microscope's record of every miss, in the frame's order (variant, then question), each
    with the question's text: what misses.jsonl holds."""
    if "microscope" not in per_query:
        return []
    out = []
    for _, row in per_query[per_query["microscope"].notna()].iterrows():
        record = json.loads(row["microscope"])
        out.append({"variant": row["variant"], "qid": row["qid"], "question": row.get("question"),
                    **{k: v for k, v in record.items() if k not in ("variant", "qid")}})
    return out


def _thresholds(per_query: pd.DataFrame) -> dict[str, str]:
    """variant -> its refusal policy as the report shows it: the chosen threshold of an `auto`
    variant (read from its results' provenance, `abstain_tuned`), a fixed one, or none."""
    out: dict[str, str] = {}
    if "variant_config" not in per_query:
        return out
    for variant, frame in per_query.groupby("variant", sort=False):
        configs = frame["variant_config"].dropna()
        config = json.loads(configs.iloc[0]) if len(configs) else {}
        tuned, spec = config.get("abstain_tuned"), config.get("abstain") or {}
        if tuned:
            threshold = "none" if tuned.get("threshold") is None else f"{tuned['threshold']:.4f}"
            goal = (f"false refusals <= {tuned['max_false_refusal']:g}" if tuned.get("max_false_refusal") is not None
                    else "best F1")
            out[str(variant)] = (f"auto: {tuned['score']} < {threshold} (chosen on {tuned['n_answerable']} + "
                                 f"{tuned['n_abstention']} tuning questions, {goal})")
        elif spec.get("policy") == "threshold":
            out[str(variant)] = f"threshold: {spec.get('score')} < {spec.get('below')}"
        elif config.get("abstain_below") is not None:
            out[str(variant)] = f"threshold: top_score < {config['abstain_below']}"
        else:
            out[str(variant)] = "none"
    return out


def abstention_lines(summary: pd.DataFrame, per_query: pd.DataFrame) -> list[str]:
    """The abstention section: per variant its policy (and the chosen threshold), correct and
    false refusals (counts and rates), the area under its risk-coverage curve and its nAUC, and
    nDCG@10 and hit@5 over the answerable questions with its refusals and without them."""
    if "n_abstention" not in summary or not len(summary):
        return []
    n_abst = int(summary["n_abstention"].iloc[0])
    policies = _thresholds(per_query)
    table = summary.assign(**{
        "policy": [policies.get(v, "none") for v in summary["variant"]],
        "correct refusals": summary["abstention_correct"],
        "false refusals": [int(round(r * a)) if r == r else 0 for r, a in
                           zip(summary.get("false_refusal_rate", pd.Series([float("nan")] * len(summary))),
                               summary["n_answerable"])],
    })
    columns = ["variant", "policy", "correct refusals", "false refusals"]
    for name in ("correct_refusal_rate", "false_refusal_rate", "aurc", "rc_nauc", "ndcg@10",
                 "ndcg@10 without refusal", "hit@5", "hit@5 without refusal"):
        if name in table:
            columns.append(name)
    lines = ["## Abstention questions", "",
             f"{n_abst} questions have no answer in the corpus. A correct refusal is an empty result for one of them; "
             "a false refusal, for an answerable question. A variant refuses by its abstention policy (`abstain:`; "
             "`auto` chooses its threshold on the tuning questions, never on the scored ones), or when its engine "
             "finds nothing. **aurc**: area under the risk-coverage curve of its confidence (lower is better); "
             "**rc_nauc**: 1 is a perfect confidence, 0 chance. The answerable metrics are shown with the policy "
             "and without it.", ""] if n_abst else [
             "## Abstention questions", "",
             "The question set has no abstention question: nothing measures whether a variant knows when to say "
             "\"I don't know\" (refusals of answerable questions are still counted).", ""]
    lines += [markdown_table(table, columns), ""]
    return lines


def _fmt_cos(value: Any) -> str:
    return fmt_number(value, 3)


def microscope_lines(summary: pd.DataFrame, per_query: pd.DataFrame, baseline: str | None,
                     first: int = 5) -> list[str]:
    """The microscope in the report: the misses per triage label (and dense cause) per variant,
    and the first `first` misses of the baseline variant (else the first variant) with their
    evidence; the whole of it is in misses.jsonl."""
    columns = [f"triage_{t}" for t in TRIAGE_LABELS] + [f"dense_{c}" for c in DENSE_CAUSES]
    if not all(c in summary for c in columns) or not int(summary[columns].to_numpy().sum()):
        return []
    names = {c: c.removeprefix("triage_").replace("_", " ") for c in columns[:len(TRIAGE_LABELS)]}
    names.update({c: f"dense: {c.removeprefix('dense_')}" for c in columns[len(TRIAGE_LABELS):]})
    lines = ["## Microscope: where each miss was lost (misses.jsonl)", "",
             "Per variant, its misses (no gold document in the top 10) by the latest stage that lost the gold "
             "document, and, for the misses its dense leg missed too, *crowding* (the gold's cosine to the question "
             f"within {CROWDING_MARGIN:g} of the 10th dense candidate's: a deeper pool finds it) or *embedding* "
             "(further: only document-side work helps).", "",
             markdown_table(summary.rename(columns=names), ["variant", *names.values()]), ""]
    who = baseline if baseline in set(per_query["variant"]) else (per_query["variant"].iloc[0] if len(per_query)
                                                                   else None)
    # the records of `who`'s rows only: every miss's evidence is parsed for misses.jsonl (`write_report`),
    # the report shows the first few of one variant
    mine = miss_records(per_query[per_query["variant"] == who])[:first] if who is not None else []
    if mine:
        lines += [f"First {len(mine)} misses of `{who}`:", ""]
        for r in mine:
            legs = "; ".join(f"{leg}: gold rank {e['gold_rank'] if e['gold_rank'] is not None else 'none'} "
                             f"of {e['candidates']}" + (f" (score {_fmt_cos(e['gold_score'])})"
                                                        if e["gold_score"] is not None else "")
                             for leg, e in r["legs"].items())
            top = ", ".join(f"{d} {_fmt_cos(sc)}" for d, sc in r["top"][:3]) or "nothing"
            cause = f", {r['dense_cause']}" if r.get("dense_cause") else ""
            lines.append(f"- `{r['qid']}` {r['question']} — **{r['triage'].replace('_', ' ')}{cause}**; gold "
                         f"{', '.join(r['gold'])}; {legs}; cosine gold {_fmt_cos(r['gold_cosine'])} vs 10th "
                         f"{_fmt_cos(r['kth_cosine'])}; top: {top}")
        lines.append("")
    return lines


def _jsonable(record: dict) -> dict:
    out = {}
    for k, v in record.items():
        if isinstance(v, float) and math.isnan(v):
            v = None
        elif hasattr(v, "tolist"):
            v = v.tolist()
        elif hasattr(v, "item"):
            v = v.item()
        out[k] = v
    return out
