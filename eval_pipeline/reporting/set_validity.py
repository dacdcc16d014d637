"""The report's "Do the question sets agree?" section: shown when the run ranked its variants on
a second question set over the same corpus (`question_set: {compare_with: ...}`), for example a
generated set beside a human one. For each headline metric: Kendall's τ between the two sets'
rankings of the variants, its bootstrap interval over questions, and the pairs whose order flips
(eval_pipeline.validity.sets); the nDCG@10 ranking side by side. A set whose header labels its
generator weak (``generator_strength: weak``, the ICT generator) is named so.

Registered in `eval_pipeline.reporting.report.SECTIONS` as `set_validity` (slot
`before_variants`, beside "How far the numbers can be trusted"). It reads the second set from
``inputs.compared_sets`` (a sequence of `ComparedSet`); with none it adds nothing.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pandas as pd

from eval_pipeline.common.atomic import atomic_write_text
from eval_pipeline.common.formatting import MISSING, fmt_number, markdown_table
from eval_pipeline.common.metadata import shown_number
from eval_pipeline.ranking import steps
from eval_pipeline.ranking.steps import chooses_threshold
from eval_pipeline.reporting.report import SECTIONS, ReportInputs, ReportSection, SectionPart
from eval_pipeline.scoring.partitions import score_partitions
from eval_pipeline.validity.sets import DEFAULT_CONFIDENCE, DEFAULT_RESAMPLES, SetComparison, compare_sets

TABLE_METRIC = "ndcg@10"
METADATA_METRICS = ("ndcg@10", "mrr", "hit@1", "hit@10")


@dataclass(frozen=True)
class ComparedSet:
    """A second question set of the run: its label, the set (its header says how it was made) and
    every variant's per-question metrics on it (the frames `score_variant` gives)."""

    name: str
    question_set: Any
    per_variant: Mapping[str, pd.DataFrame]


def rank_compared_set(name: str, question_set: Any, variants: Sequence[Any], *, snapshot: Any, store: Any,
                      state: Any, connection_string: str, embedder: Any, build_reranker: Any, code_version: str,
                      log: Any, tuning_from: Any = None, miss_k: int = 10) -> ComparedSet:
    """A second question set ranked by every variant on `store` in this process, with the ranking's
    plan, caches and Sweep (`eval_pipeline.ranking.steps.rank_in_one_step`, as the answers asset
    ranks the golden prompts), and scored. A variant that tunes its fusion is tuned on
    `tuning_from`'s tuning part (the run's set), as when it was ranked, so only its scoring set
    changes; so does a variant that chooses its refusal threshold there (`abstain: auto`). The
    scores are kept in `state`'s scored_partitions, by ranked frame, questions and scoring code,
    as the run's own partitions' are (`score_partitions`). One
    index: an index sweep compares the sets per index, calling this per store
    (`rank_compared_sets`)."""
    if tuning_from is not None and getattr(tuning_from, "tuning", None) and any(
            getattr(v, "tune", None) or chooses_threshold(v) for v in variants):
        question_set = replace(question_set, tuning=tuning_from.tuning, split=tuning_from.split)
    frames = steps.rank_in_one_step(variants, snapshot=snapshot, store=store, question_set=question_set, state=state,
                              connection_string=connection_string, embedder=embedder, build_reranker=build_reranker,
                              miss_k=miss_k, reuse=True, code_version=code_version, log=log)
    # scored as the run's own partitions are, and kept beside them: a warm run reads the scores
    scored = score_partitions(frames, list(frames), question_set.questions, cache=state.scored_partitions)
    return ComparedSet(name, question_set, scored)


def rank_compared_sets(compared: Sequence[tuple[str, Any]], pairs: Sequence[tuple[str, str, Any]], *, stores: Any,
                       embedder_for: Any, builder_for: Any, **common: Any) -> list[ComparedSet]:
    """Each (name, question set) of `compared` ranked by the run's partitions `pairs` (partition
    key, index key, variant), index by index on that index's store, embedder and rerankers
    (`rank_compared_set`), its per-question frames keyed by partition key as the run's own are.
    `common`: rank_compared_set's other arguments (snapshot, state, connection_string,
    code_version, log, tuning_from, miss_k)."""
    out = []
    for name, question_set in compared:
        per_variant: dict[str, pd.DataFrame] = {}
        for index in dict.fromkeys(index for _, index, _ in pairs):
            mine = [(key, variant) for key, i, variant in pairs if i == index]
            ranked = rank_compared_set(name, question_set, [v for _, v in mine], store=stores[index],
                                       embedder=embedder_for(index), build_reranker=builder_for(index), **common)
            per_variant.update({key: ranked.per_variant[variant.key] for key, variant in mine})
        out.append(ComparedSet(name, question_set, {key: per_variant[key] for key, _, _ in pairs}))
    return out


def describe_set(question_set: Any) -> str:
    """What a set is, from its header: "generated (ict, weak)", "hand-written", "beir:...:train"."""
    header = dict(getattr(question_set, "header", None) or {})
    source = str(header.get("source") or "file")
    if source == "generated":
        generator = header.get("generator") or f"llm {header.get('generator_model', '')}".strip()
        strength = header.get("generator_strength")
        return f"generated ({generator}{', ' + str(strength) if strength else ''})"
    return source


def is_weak(question_set: Any) -> bool:
    return dict(getattr(question_set, "header", None) or {}).get("generator_strength") == "weak"


def _interval(low: float, high: float) -> str:
    if math.isnan(low) or math.isnan(high):
        return MISSING
    return f"[{fmt_number(low, 2)}, {fmt_number(high, 2)}]"


def set_validity_lines(comparison: SetComparison, *, name_a: str, name_b: str, weak: Sequence[str],
                       files: Mapping[str, str] | None = None) -> list[str]:
    """The section's markdown: τ per metric, then the ranking on nDCG@10 under each set."""
    pct = round(comparison.confidence * 100)
    lines = [
        "## Do the question sets agree?", "",
        f"The same {len(comparison.variants)} variants ranked by **A: {name_a}** and by **B: {name_b}**, over the "
        f"same corpus. τ is Kendall's τ-b between the two rankings (1: the same order, 0: unrelated, -1: "
        f"reversed), with its {pct}% bootstrap interval over each set's questions ({comparison.n_resamples} "
        f"resamples, seed {comparison.seed}); *flips* are the pairs of variants the two sets order oppositely.",
        "",
    ]
    for label in weak:
        lines += [f"> **{label} is a weak generated set**: its questions are sentences copied from their gold "
                  "documents (names and unique identifiers masked), so it favours engines that match words. It "
                  "does not replace questions people ask; believe its ranking only as far as τ says.", ""]
    for note in comparison.notes:
        lines += [f"> {note}", ""]
    rows = []
    for m in comparison.metrics:
        shown = "; ".join(f"{a} > {b}" for a, b in m.flips[:3]) + (f" (+{len(m.flips) - 3})" if len(m.flips) > 3
                                                                     else "")
        rows.append({"metric": m.metric, "questions A": m.questions_a, "questions B": m.questions_b,
                     "τ": m.tau, f"{pct}% interval": _interval(m.low, m.high), "flips": len(m.flips),
                     "order under A that B reverses": shown or MISSING})
    lines += [markdown_table(pd.DataFrame(rows), list(rows[0])) if rows else "(no metric in common)", ""]
    table = comparison.get(TABLE_METRIC)
    if table is not None:
        lines += [f"{TABLE_METRIC} by variant under each set (rank 1 is the best; tied means share a rank):", "",
                  markdown_table(_ranks_shown(table.table()), ["variant", "mean A", "rank A", "mean B", "rank B",
                                                                "shift"]), ""]
    if files and files.get("set_validity"):
        lines += [f"Every metric's figures: `{Path(files['set_validity']).name}`.", ""]
    return lines


def _rank(value: Any) -> str:
    """A rank as people write it: 3, or 1.5 for a shared one; – when missing."""
    if value is None or pd.isna(value):
        return MISSING
    return f"{value:+g}".lstrip("+") if float(value) != int(value) else str(int(value))


def _ranks_shown(frame: pd.DataFrame) -> pd.DataFrame:
    out = frame.copy()
    for column in ("rank A", "rank B"):
        out[column] = [_rank(v) for v in out[column]]
    out["shift"] = [MISSING if v is None or pd.isna(v) else (f"{v:+g}" if v else "0") for v in out["shift"]]
    return out


def set_validity_metadata(comparison: SetComparison) -> dict[str, float | None]:
    """τ as numbers for the asset's metadata (plotted over runs): `set tau <metric>`, and the
    interval of nDCG@10's."""
    out: dict[str, float | None] = {}
    for metric in METADATA_METRICS:
        m = comparison.get(metric)
        if m is None:
            continue
        out[f"set tau {metric}"] = shown_number(m.tau)
        if metric == TABLE_METRIC:
            out[f"set tau {metric} low"] = shown_number(m.low)
            out[f"set tau {metric} high"] = shown_number(m.high)
    return out


def measure_set_validity(inputs: ReportInputs, *, n_resamples: int = DEFAULT_RESAMPLES, seed: int = 0,
                         confidence: float = DEFAULT_CONFIDENCE) -> list[dict[str, Any]] | None:
    """Each second set's comparison with the run's (τ with its bootstrap interval per metric,
    the swapped pairs): [{"name", "a", "b", "weak", "comparison"}], None without a second set."""
    compared: Sequence[ComparedSet] = tuple(getattr(inputs, "compared_sets", None) or ())
    if not compared:
        return None
    name_a = describe_set(inputs.question_set)
    return [{"name": other.name, "a": name_a, "b": f"{other.name} ({describe_set(other.question_set)})",
             "weak": [label for label, qs in (("A", inputs.question_set), ("B", other.question_set)) if is_weak(qs)],
             "comparison": compare_sets(inputs.per_variant, other.per_variant, n_resamples=n_resamples, seed=seed,
                                        confidence=confidence)}
            for other in compared]


def render_set_validity(measured: Sequence[Mapping[str, Any]]) -> SectionPart:
    lines: list[str] = []
    metadata: dict[str, Any] = {}
    data = []
    for one in measured:
        comparison = one["comparison"]
        lines += set_validity_lines(comparison, name_a=one["a"], name_b=one["b"], weak=one["weak"])
        metadata.update(set_validity_metadata(comparison) if len(measured) == 1 else
                        {f"{k} ({one['name']})": v for k, v in set_validity_metadata(comparison).items()})
        data.append({"a": one["a"], "b": one["b"], "weak": one["weak"], **comparison.to_json()})

    def write(stage: Path, suffix: str) -> dict[str, str]:
        path = stage / f"set_validity{suffix}.json"
        atomic_write_text(path, json.dumps(data, indent=1) + "\n")
        return {"set_validity": str(path)}

    def with_files(files: Mapping[str, str]) -> list[str]:
        name = Path(files["set_validity"]).name if files.get("set_validity") else None
        return lines + ([f"Every metric's figures: `{name}`.", ""] if name else [])

    return SectionPart(lines=with_files, write=write, output={"set_validity": data}, metadata=metadata)


SECTIONS.register(ReportSection("set_validity", "before_provenance", measure_set_validity, render_set_validity,
                                description="do two question sets on the same corpus rank the variants alike"))
