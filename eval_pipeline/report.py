"""The markdown report and the per-question JSONL that other tools can read."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from eval_pipeline.questions import atomic_write_text
from eval_pipeline.scoring import HEADLINE_METRICS, slice_summary

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


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return "–" if math.isnan(value) else f"{value:.3f}"
    return str(value)


def markdown_table(df: pd.DataFrame, columns: list[str]) -> str:
    header = "| " + " | ".join(columns) + " |"
    rule = "|" + "|".join("---" if c == columns[0] else "---:" for c in columns) + "|"
    rows = ["| " + " | ".join(_fmt(r[c]) for c in columns) + " |" for _, r in df.iterrows()]
    return "\n".join([header, rule, *rows])


def render_report(
    summary: pd.DataFrame,
    per_query: pd.DataFrame,
    provenance: Mapping[str, Any],
    *,
    latency: Mapping[str, Mapping[str, Mapping[str, float]]] | None = None,
    missing_variants: list[str] | None = None,
) -> str:
    """The whole report. `per_query` holds every variant's rows (column `variant`);
    `latency` maps variant -> stage -> {p50, p95, max, mean}."""
    best = summary.sort_values(["ndcg@10", "mrr", "variant"], ascending=[False, False, True]).iloc[0]
    lines = [
        "# Retrieval evaluation",
        "",
        f"**Best variant: `{best['variant']}`** with nDCG@10 {best['ndcg@10']:.3f}, MRR {best['mrr']:.3f} "
        f"and hit@5 {best['hit@5']:.3f} on {int(best['n_answerable'])} answerable questions.",
        "",
    ]
    errored = int(summary["n_errored"].sum())
    if errored:
        lines += [f"> **Warning:** {errored} question(s) errored and were scored as misses; see `per_query.jsonl`.", ""]
    if missing_variants:
        lines += [f"> **Warning:** no results yet for variant(s) {', '.join(missing_variants)}; materialize them.", ""]
    lines += ["## Variants", ""]
    table = summary.assign(errored=summary["n_errored"], **{"p50 ms": summary["latency_p50_ms"],
                                                            "p95 ms": summary["latency_p95_ms"]})
    lines += [markdown_table(table, ["variant", *HEADLINE_METRICS, "errored", "p50 ms", "p95 ms"]), ""]

    slices = [
        ("MATCH (shares the document's words)", per_query["form"] == "MATCH"),
        ("GAP (everyday rewording)", per_query["form"] == "GAP"),
        ("body-only (facts only in the body)", per_query["hard_class"] == "body-only"),
        ("deep-chunk (answer deep in a long document)", per_query["hard_class"] == "deep-chunk"),
        ("multi-gold (two documents answer)", per_query["hard_class"] == "multi-gold"),
    ]
    rows = []
    for label, mask in slices:
        part = slice_summary(per_query, mask, metrics=("hit@5",))
        if len(part) and int(part["n"].max()) > 0:
            rows.append({"slice": label, "n": int(part["n"].max()), **dict(zip(part["variant"], part["hit@5"]))})
    if rows:
        lines += ["## hit@5 by question kind", ""]
        lines += [markdown_table(pd.DataFrame(rows), ["slice", "n", *summary["variant"]]), ""]

    n_abst = int(summary["n_abstention"].iloc[0])
    if n_abst:
        lines += ["## Abstention questions", "",
                  f"{n_abst} questions have no answer in the corpus. A correct refusal is an empty result; "
                  "a variant refuses only when its score threshold (`abstain_below`) says so.", ""]
        refusals = summary.assign(**{"correct refusals": summary["abstention_correct"],
                                     "false refusals": summary["miss_abstained"]})
        lines += [markdown_table(refusals, ["variant", "correct refusals", "false refusals"]), ""]

    if latency:
        stage_names = [s for s in ("embed", "keyword", "dense", "bm25", "metadata", "fusion", "rerank", "total")
                       if any(s in stages for stages in latency.values())]
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
        lines += [markdown_table(renamed, ["variant", *[c.removeprefix("miss_").replace("_", " ") for c in miss_columns]]), ""]

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

    lines += ["## Provenance", ""]
    lines += [f"- {k}: `{v}`" for k, v in provenance.items()]
    lines += ["", HOW_TO_READ]
    return "\n".join(lines)


def write_report(results_dir: str | Path, markdown: str, per_query: pd.DataFrame) -> dict[str, str]:
    """Writes results.md and per_query.jsonl atomically; returns their paths."""
    out = Path(results_dir)
    md_path, pq_path = out / "results.md", out / "per_query.jsonl"
    atomic_write_text(md_path, markdown)
    records = per_query.to_dict(orient="records")
    atomic_write_text(pq_path, "".join(json.dumps(_jsonable(r), ensure_ascii=False) + "\n" for r in records))
    return {"report": str(md_path), "per_query": str(pq_path)}


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
