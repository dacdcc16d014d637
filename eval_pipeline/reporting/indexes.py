"""The report's "Indexes" section, for a variants file that lists `indexes:`: what each index
costs, every (index, variant) pair's quality and latency, whether the top chunks hold the
answer, the Pareto plots and the recommendation.

- **Cost per index** (`eval_pipeline.store.metadata.index_costs`): build seconds and chunks/s
  (as the build recorded them, whichever run built the table), chunks, table plus index bytes
  (`pg_total_relation_size`), and query p50/p95 per leg over every pair on the index.
- **Pairs**: nDCG@10 with its 95% interval and p95 latency, per pair. The gold labels are
  document ids, so one question set serves every chunking: the report says so.
- **Answer in context**: for questions with an answer gist, the share whose gist's content
  words all but a quarter appear in the text of the top `ANSWER_K` documents' ranking chunks.
  A lexical proxy (a paraphrased gist can be in a chunk and still miss), but it is what
  changes with chunking when the document rank does not.
- **Recommendation** (`eval_pipeline.recommend`): the best pair within the variants
  file's `recommend:` budgets and the best overall, with the Pareto plots
  (`eval_pipeline.reporting.pareto`).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from eval_pipeline.common.checks import finite_number
from eval_pipeline.common.formatting import markdown_table
from eval_pipeline.metrics.retrieval import PRIMARY_METRIC
from eval_pipeline.recommend import headline

QUALITY_METRIC = PRIMARY_METRIC
ANSWER_K = 5  # documents whose ranking chunk is read for the gist (the answer context's size)
GIST_HELD = 0.75  # share of a gist's content words that must appear
LEGS = ("keyword", "dense", "bm25")
_WORD = re.compile(r"[a-z0-9£$€%]+(?:[.,'][a-z0-9]+)*")
_STOP = frozenset("a an and are as at be by for from has have in is it its of on or the to with was were this that "
                  "than then there their they them not no yes do does".split())


def gist_words(text: str) -> set[str]:
    """A gist's content words: lowercase tokens, stopwords left out."""
    return {w for w in _WORD.findall((text or "").lower()) if w not in _STOP}


def gist_recall(gist: str, context: str) -> float | None:
    """The share of the gist's content words found in `context` (None: the gist has none)."""
    words = gist_words(gist)
    if not words:
        return None
    found = set(_WORD.findall(context.lower()))
    return len(words & found) / len(words)


def answer_in_context(frame: pd.DataFrame, gists: Mapping[str, str], texts: Mapping[str, str],
                      k: int = ANSWER_K) -> dict[str, Any]:
    """For one pair's results: over the questions with a gist, the mean gist recall in the top
    `k` documents' chunks and the share at or above `GIST_HELD`. A question whose results are
    empty scores 0 (nothing was in context)."""
    recalls = []
    for qid, chunk_ids in zip(frame["qid"], frame["chunk_ids"]):
        gist = gists.get(qid, "")
        if not gist_words(gist):
            continue
        context = " ".join(texts.get(c, "") for c in list(chunk_ids)[:k] if c is not None)
        recalls.append(gist_recall(gist, context) or 0.0)
    if not recalls:
        return {"n_gist": 0, "gist_recall": None, "gist_in_context": None}
    return {"n_gist": len(recalls), "gist_recall": sum(recalls) / len(recalls),
            "gist_in_context": sum(r >= GIST_HELD for r in recalls) / len(recalls)}


def context_chunk_ids(frame: pd.DataFrame, k: int = ANSWER_K) -> list[str]:
    return sorted({c for ids in frame["chunk_ids"] for c in list(ids)[:k] if c is not None})


def leg_latency(frames: Sequence[pd.DataFrame]) -> dict[str, dict[str, float]]:
    """leg -> {p50, p95} in ms over every question of the given pairs (one index's) where the
    leg ran."""
    out = {}
    for leg in LEGS:
        values = pd.concat([f[f"ms_{leg}"].dropna() for f in frames if f"ms_{leg}" in f], ignore_index=True) \
            if frames else pd.Series(dtype=float)
        if len(values):
            out[leg] = {"p50": float(values.quantile(0.5)), "p95": float(values.quantile(0.95))}
    return out


P95_RESAMPLES = 1000


def pair_evidence(per_variant: Mapping[str, pd.DataFrame], *, n_resamples: int = P95_RESAMPLES, seed: int = 0,
                  confidence: float = 0.95) -> dict[str, dict[str, Any]]:
    """Per partition key, what keeps noise from deciding the recommendation: `p95_low` and
    `p95_high`, the p95 latency's seeded bootstrap interval over the run's questions (NaN with
    fewer than two timed questions), and `results_digest`, a digest of every question's ranked
    document ids (None without them): two pairs with the same digest returned the same lists."""
    tail = (1 - confidence) / 2
    out: dict[str, dict[str, Any]] = {}
    for key, frame in per_variant.items():
        low = high = float("nan")
        if "latency_ms" in frame:
            values = pd.to_numeric(frame["latency_ms"], errors="coerce").dropna().to_numpy(dtype="float64")
            if len(values) >= 2:
                rng = np.random.default_rng(seed)
                p95s = np.quantile(rng.choice(values, size=(n_resamples, len(values)), replace=True), 0.95, axis=1)
                low, high = (float(v) for v in np.quantile(p95s, [tail, 1 - tail]))
        digest = None
        if "doc_ids" in frame and "qid" in frame:
            lists = sorted((str(qid), None if docs is None or isinstance(docs, float) else [str(d) for d in docs])
                           for qid, docs in zip(frame["qid"], frame["doc_ids"]))
            digest = hashlib.sha256(json.dumps(lists).encode()).hexdigest()[:16]
        out[key] = {"p95_low": low, "p95_high": high, "results_digest": digest}
    return out


def pair_frame(summary: pd.DataFrame, intervals: pd.DataFrame, pairs: Mapping[str, tuple[str, str]],
               storage: Mapping[str, float | None], contexts: Mapping[str, Mapping[str, Any]] | None = None,
               evidence: Mapping[str, Mapping[str, Any]] | None = None) -> pd.DataFrame:
    """One row per pair (the frame `eval_pipeline.recommend` reads): `pairs` maps a
    partition key to (index key, variant key), `storage` an index key to its bytes, `evidence`
    a key to its `pair_evidence` (the p95's interval and the results' digest)."""
    by_key = summary.set_index("variant")
    iv = intervals[intervals["metric"] == QUALITY_METRIC].set_index("variant") if len(intervals) else None
    rows = []
    for key, (index, variant) in pairs.items():
        if key not in by_key.index:
            continue
        row = by_key.loc[key]
        low = high = None
        if iv is not None and key in iv.index:
            low, high = float(iv.loc[key, "low"]), float(iv.loc[key, "high"])
        rows.append({"pair": key, "index": index, "variant": variant, "quality": float(row[QUALITY_METRIC]),
                     "quality_low": low, "quality_high": high, "p95_ms": finite_number(row.get("latency_p95_ms")),
                     "storage_bytes": finite_number(storage.get(index)), **(evidence or {}).get(key, {}),
                     **(contexts or {}).get(key, {})})
    return pd.DataFrame(rows)


def index_plots(frame: pd.DataFrame, recommendation, folder: Path, suffix: str = "") -> dict[str, str]:
    """The two Pareto plots (quality against p95 latency, and against storage), when some pair
    has both numbers."""
    from eval_pipeline.reporting.pareto import pareto_plot  # noqa: PLC0415  deferred: imports matplotlib, ~0.9 s

    plots = {}
    for name, x in (("pareto_latency", "p95_ms"), ("pareto_storage", "storage_bytes")):
        usable = frame["quality"].notna() & frame[x].notna() if len(frame) else pd.Series(dtype=bool)
        if usable.any():
            path = folder / f"{name}{suffix}.png"
            pareto_plot(frame, path, x, recommendation=recommendation, metric="nDCG@10")
            plots[name] = str(path)
    return plots


def index_section(costs: Sequence[Mapping[str, Any]], latency: Mapping[str, Mapping[str, Mapping[str, float]]],
                  frame: pd.DataFrame, recommendation, *, baseline: str) -> list[str]:
    """The report's "Indexes" section (markdown lines)."""
    lines = ["## Indexes", "", f"**{headline(recommendation)}**", "",
             "Gold labels are document ids, so one question set serves every index and chunking. Every pair is "
             f"compared with the baseline pair `{baseline}`; each pair's gate judges it against its own history.", "",
             "### What each index costs", ""]
    rows = []
    for c in costs:
        legs = latency.get(c["index"], {})
        rows.append({**c, "storage MB": None if c.get("storage_bytes") is None else round(c["storage_bytes"] / 1e6, 2),
                     **{f"{leg} p50/p95 ms": f"{v['p50']:.1f} / {v['p95']:.1f}" for leg, v in legs.items()}})
    leg_columns = [f"{leg} p50/p95 ms" for leg in LEGS if any(f"{leg} p50/p95 ms" in r for r in rows)]
    table = pd.DataFrame(rows)
    for column in leg_columns:
        table[column] = table[column].fillna("")
    lines += [markdown_table(table, ["index", "model", "chunking", "chunks", "build_seconds", "chunks_per_second",
                                     "storage MB", *leg_columns]), ""]
    if len(frame):
        shown = frame.assign(**{
            "nDCG@10": frame["quality"].map(lambda v: f"{v:.3f}"),
            "95% CI": [f"[{lo:.3f}, {hi:.3f}]" if lo is not None and hi is not None and not pd.isna(lo) else ""
                       for lo, hi in zip(frame["quality_low"], frame["quality_high"])],
            "p95 ms": frame["p95_ms"].map(lambda v: "" if v is None or pd.isna(v) else f"{v:.1f}"),
            "storage MB": frame["storage_bytes"].map(lambda v: "" if v is None or pd.isna(v) else f"{v / 1e6:.2f}"),
        })
        columns = ["index", "variant", "nDCG@10", "95% CI", "p95 ms", "storage MB"]
        if "gist_in_context" in frame:
            shown["answer in top 5"] = [
                "" if v is None or pd.isna(v) else f"{v:.3f} ({int(n)})"
                for v, n in zip(frame["gist_in_context"], frame["n_gist"])]
            columns.append("answer in top 5")
        lines += ["### Pairs", "", markdown_table(shown, columns), ""]
        if "gist_in_context" in frame:
            lines += [f"*answer in top 5*: the share of questions with an answer gist (their count in brackets) "
                      f"whose gist's content words, all but a quarter, appear in the chunks that ranked the top "
                      f"{ANSWER_K} documents: what chunking changes even when the document rank does not.", ""]
    return lines


def answer_contexts(per_variant: Mapping[str, pd.DataFrame], questions, *, tables: Mapping[str, str],
                    fetch: Callable[[str, list[str]], Mapping[str, str]]) -> dict[str, dict[str, Any]]:
    """`answer_in_context` of every pair, reading each table's chunks once (`fetch(table, ids)`)."""
    gists = {q.qid: q.gist for q in questions if getattr(q, "gist", "")}
    if not gists:
        return {}
    needed: dict[str, set[str]] = {}
    for key, frame in per_variant.items():
        needed.setdefault(tables[key], set()).update(context_chunk_ids(frame))
    texts = {table: fetch(table, sorted(ids)) for table, ids in needed.items()}
    return {key: answer_in_context(frame, gists, texts[tables[key]]) for key, frame in per_variant.items()}
