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
- Chunk results are turned into documents before scoring: a document takes the rank of its
  best chunk. Equal scores are ordered by document id, so a re-run gives the same numbers.
- **Abstention questions** have no answer in the corpus. Engines without a score threshold
  always return something, so their correct-refusal count is 0 until thresholds exist;
  these questions are reported apart and do not enter the means.
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


def render_report(summary: pd.DataFrame, per_query: pd.DataFrame, provenance: Mapping[str, Any]) -> str:
    best = summary.sort_values(["ndcg@10", "mrr", "engine"], ascending=[False, False, True]).iloc[0]
    lines = [
        "# Retrieval evaluation",
        "",
        f"**Best engine: `{best['engine']}`** with nDCG@10 {best['ndcg@10']:.3f}, MRR {best['mrr']:.3f} "
        f"and hit@5 {best['hit@5']:.3f} on {int(best['n_answerable'])} answerable questions.",
        "",
    ]
    errored = int(summary["n_errored"].sum())
    if errored:
        lines += [f"> **Warning:** {errored} question(s) errored and were scored as misses; see `per_query.jsonl`.", ""]
    lines += ["## Engines", ""]
    table = summary.copy()
    table["p50 ms"] = table["latency_p50_ms"]
    table["p95 ms"] = table["latency_p95_ms"]
    table["errored"] = table["n_errored"]
    lines += [markdown_table(table, ["engine", *HEADLINE_METRICS, "errored", "p50 ms", "p95 ms"]), ""]

    breakdowns = []
    for label, mask in (
        ("MATCH (shares the document's words)", per_query["form"] == "MATCH"),
        ("GAP (everyday rewording)", per_query["form"] == "GAP"),
        ("body-only (facts only in the body)", per_query["hard_class"] == "body-only"),
        ("deep-chunk (answer deep in a long document)", per_query["hard_class"] == "deep-chunk"),
        ("multi-gold (two documents answer)", per_query["hard_class"] == "multi-gold"),
    ):
        part = slice_summary(per_query, mask)
        if len(part) and int(part["n"].iloc[0]) > 0:
            part.insert(0, "slice", label)
            breakdowns.append(part)
    if breakdowns:
        lines += ["## Breakdown by question kind", ""]
        lines += [markdown_table(pd.concat(breakdowns, ignore_index=True), ["slice", "engine", "n", "hit@5", "mrr"]), ""]

    n_abst = int(summary["n_abstention"].iloc[0])
    if n_abst:
        lines += ["## Abstention questions", "",
                  f"{n_abst} questions have no answer in the corpus. Correct refusals (empty result) per engine:", ""]
        lines += [markdown_table(summary.assign(correct=summary["abstention_correct"]), ["engine", "correct"]), ""]

    answerable = per_query[per_query["answerable"]]
    all_missed = answerable.groupby("qid")["hit@20"].max()
    all_missed = all_missed[all_missed == 0].index.tolist()
    if all_missed:
        qinfo = answerable.drop_duplicates("qid").set_index("qid")
        lines += ["## Questions every engine missed (top 20)", ""]
        for qid in all_missed[:15]:
            row = qinfo.loc[qid]
            lines.append(f"- `{qid}` {row['question']} — gold: {', '.join(row['gold'])}")
        if len(all_missed) > 15:
            lines.append(f"- … and {len(all_missed) - 15} more in `per_query.jsonl`")
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
