"""One entry function per asset of the Dagster layer: what each asset does, without Dagster.

The assets in `assets/` read their inputs, call the function here named after them and attach
the metadata it returns, so any behaviour is two hops away: the asset, then this module.

- `preflight_run`: the corpus_snapshot asset's checks before anything is embedded.
- `build_question_set`: the question_set asset (a file, a BEIR split, or generated with an LLM).
- `score_partitions` / `partition_metrics`: the variant_metrics asset and each partition's numbers
  (`ranked_partition_metadata`: a ranked_results partition's).
- `assemble_run`: the report asset (provenance, verdict, results folder, history record).
- `variant_gate_checks`: the regression gate, one check result per variant.

Metadata is returned as plain values (floats, ints, strings, dicts); `Markdown` marks text the
UI should render as markdown and `Table` a DataFrame schema, so this module never imports Dagster.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from eval_pipeline.corpus import CorpusSnapshot
from eval_pipeline.ingest import StoreInfo
from eval_pipeline.questions import QuestionSet


class Markdown(str):
    """Metadata text to be shown as rendered markdown."""


@dataclass(frozen=True)
class Table:
    """Metadata describing a DataFrame: its rows and its columns' names and dtypes."""

    row_count: int
    columns: tuple[tuple[str, str], ...]


def frame_metadata(frame: pd.DataFrame) -> Table:
    return Table(len(frame), tuple((str(c), str(t)) for c, t in frame.dtypes.items()))


# -- corpus_snapshot ---------------------------------------------------------------------------

def preflight_run(
    snapshot: CorpusSnapshot,
    *,
    questions: Any | None,
    variants: Iterable[Any],
    reranker_identity: Callable[[Any], Any],
    warn: Callable[[str], None],
) -> dict[str, Any]:
    """Everything that can be checked before embedding: the question set this run builds
    (`questions`: its settings, None when the run does not build it) and every variant's
    reranker (`reranker_identity(spec)` loads no model). Logs skipped records; returns the
    snapshot's metadata."""
    from eval_pipeline.questions import preflight_question_set

    if questions is not None:
        preflight_question_set(questions.source, questions.path, corpus_signature=snapshot.signature,
                               beir_split=questions.beir_split, doc_ids=[d.doc_id for d in snapshot.documents],
                               corpus_source=snapshot.source, limit=questions.limit)
    for v in variants:  # a missing model or an unset LLM fails here, not after the embedding
        if v.reranker.kind != "none":
            reranker_identity(v.reranker)
    for skipped in snapshot.skipped:
        warn(f"skipped {skipped.location}: {skipped.reason}")
    return {"documents": len(snapshot.documents), "skipped": len(snapshot.skipped), "signature": snapshot.signature,
            "source": snapshot.source, "characters": sum(len(d.content) for d in snapshot.documents)}


def store_metadata(info: StoreInfo, database: str) -> dict[str, Any]:
    """The pgvector_store asset's metadata."""
    return {"table": info.table, "chunks": info.chunk_count, "dims": info.dims, "embedder": info.embedder,
            "reused": info.reused, "seconds": round(info.seconds, 3),
            "chunks_per_second": None if info.reused else round(info.chunks_per_second, 1), "database": database}


# -- question_set ------------------------------------------------------------------------------

def build_question_set(
    settings: Any,
    snapshot: CorpusSnapshot,
    *,
    llm_client: Callable[[], Any],
    state_dir: str | Path,
    warn: Callable[[str], None],
) -> tuple[QuestionSet, dict[str, Any]]:
    """The question set `settings` names (source file | beir | generate, with the fields of
    the question_set asset's config), checked against the corpus; and its metadata.

    `generate` asks the LLM (`llm_client()` is called first, so an unconfigured model fails
    before any call), caches every unit's questions in `state_dir/question_cache.jsonl` and
    writes the set to `settings.path` or `state_dir/generated_questions_<signature>.jsonl`."""
    from eval_pipeline.questions import load_question_set, preflight_question_set

    doc_ids = [d.doc_id for d in snapshot.documents]
    metadata: dict[str, Any] = {}
    if settings.source == "generate":
        path, metadata = _generate(settings, snapshot, llm_client(), Path(state_dir), warn)
        qs = load_question_set(path, corpus_signature=snapshot.signature, doc_ids=doc_ids)
        qs = qs.limit(settings.limit) if settings.limit is not None else qs
    else:
        qs = preflight_question_set(settings.source, settings.path, corpus_signature=snapshot.signature,
                                    doc_ids=doc_ids, beir_split=settings.beir_split, corpus_source=snapshot.source,
                                    limit=settings.limit)
    return qs, {**metadata, **qs.counts(), "fingerprint": qs.fingerprint, "path": str(qs.path),
                "limited_from": qs.limited_from}


def _generate(settings: Any, snapshot: CorpusSnapshot, client: Any, state: Path,
              warn: Callable[[str], None]) -> tuple[Path, dict[str, Any]]:
    from eval_pipeline.generation import chunk_units, document_units
    from eval_pipeline.ingest import ChunkingConfig, chunk_documents
    from eval_pipeline.question_cache import generate_question_set, write_generated_question_set

    path = Path(settings.path or state / f"generated_questions_{snapshot.signature}.jsonl")
    if settings.unit == "chunk":
        chunks = chunk_documents(snapshot, ChunkingConfig())
        units = chunk_units([(c.id, c.meta["doc_id"], c.content) for c in chunks], snapshot.documents)
    else:
        units = document_units(snapshot.documents)
    result = generate_question_set(
        units, ask=client.complete, map_fn=client.map, model=f"{client.model}@{client.base_url or 'default'}",
        k=settings.k, frac=settings.abstention_frac, masking=settings.masking, max_units=settings.max_units,
        cache_path=state / "question_cache.jsonl", corpus_signature=snapshot.signature,
        theme_titles=[d.title for d in snapshot.documents], log=warn,
    )
    for warning in result.warnings:
        warn(warning)
    write_generated_question_set(path, result, allow_partial=settings.allow_partial)
    return path, {**{f"generation_{k}": v for k, v in result.counts().items()}, "llm_usage": dict(client.usage)}


# -- variant_metrics ---------------------------------------------------------------------------

PARTITION_METRICS = ("hit@1", "hit@5", "hit@10", "mrr", "recall@10", "ndcg@10")


def score_partitions(ranked: Mapping[str, pd.DataFrame], keys: Sequence[str], questions) -> dict[str, pd.DataFrame]:
    """Each partition's per-question scores, refusing a partition that has no ranked results."""
    from eval_pipeline.scoring import score_variant

    missing = sorted(set(keys) - set(ranked))
    if missing:
        raise ValueError(f"ranked_results has no partition for variant(s) {missing}; materialize them first")
    return {key: score_variant(ranked[key], questions) for key in keys}


def partition_metrics(key: str, scored: pd.DataFrame) -> dict[str, Any]:
    """One partition's own numbers, as floats and ints the UI plots over time: hit@1/5/10,
    MRR, recall@10, nDCG@10 with its 95% bootstrap interval, latency p50/p95 and errored
    questions; with the frame's row count and column schema."""
    from eval_pipeline.scoring import summarize
    from eval_pipeline.statistics import metric_intervals  # scipy: imported only when a run scores
    from eval_pipeline.sweep import stage_latency_summary

    row = summarize({key: scored}).iloc[0]
    interval = metric_intervals({key: scored}, ("ndcg@10",)).iloc[0]
    out: dict[str, Any] = {m: _number(row[m]) for m in PARTITION_METRICS}
    out.update({"ndcg@10 95% low": _number(interval["low"]), "ndcg@10 95% high": _number(interval["high"]),
                "latency p50 ms": _number(row["latency_p50_ms"]), "latency p95 ms": _number(row["latency_p95_ms"]),
                "n_errored": int(row["n_errored"]), "n_answerable": int(row["n_answerable"]),
                "latency_ms_by_stage": stage_latency_summary(scored), "table": frame_metadata(scored)})
    return out


def ranked_partition_metadata(frame: pd.DataFrame) -> dict[str, Any]:
    """One ranked_results partition's metadata: size, schema, errors and median latency."""
    fallbacks = int(frame["rerank_fallback"].fillna(False).astype(bool).sum()) if "rerank_fallback" in frame else 0
    return {"table": frame_metadata(frame), "errored": int(frame["error"].notna().sum()), "rerank_fallbacks": fallbacks,
            "latency p50 ms": _number(frame["latency_ms"].median()) if len(frame) else None}


def _number(value: Any) -> float | None:
    value = float(value)
    return None if value != value else value  # NaN (no answerable question): no point to plot


# -- report --------------------------------------------------------------------------------------

@dataclass
class RunReport:
    """What the report asset returns and shows."""

    output: dict[str, Any]
    metadata: dict[str, Any]
    report_path: str
    verdict: Any = field(repr=False, default=None)


def assemble_run(
    variant_metrics: Mapping[str, pd.DataFrame],
    *,
    sweep,
    snapshot: CorpusSnapshot,
    store: StoreInfo,
    question_set: QuestionSet,
    embedder,
    connection_string: str,
    state_dir: str | Path,
    run_id: str,
    results_dir: str | Path,
    record_history: bool,
    warn: Callable[[str], None],
) -> RunReport:
    """The report asset: check the inputs belong together, judge the run (intervals, the
    baseline-variant comparison, the gate against the previous run and the pinned reference),
    publish the results folder, then record the run in the history (only once published)."""
    from eval_pipeline.report import publish_report
    from eval_pipeline.verdict import check_inputs_agree, judge_run, record_verdict

    order = [k for k in sweep.keys if k in variant_metrics]
    if not order:
        raise ValueError("no variant has metrics yet; materialize ranked_results and variant_metrics first")
    per_variant = {k: variant_metrics[k] for k in order}
    check_inputs_agree(corpus_signature=snapshot.signature, store=store, questions=question_set, embedder=embedder)
    provenance = run_provenance(per_variant, snapshot, store, question_set)
    state = Path(state_dir)
    verdict = judge_run(per_variant, baseline=sweep.baseline, provenance=provenance, tolerances=sweep.tolerances,
                        strict=sweep.strict, run_id=run_id, limited=question_set.limited,
                        connection_string=connection_string, record=False, statistics_cache=state / "statistics_cache")
    suffix = f".limited-{len(question_set.questions)}" if question_set.limited else ""
    per_query = pd.concat(per_variant.values(), ignore_index=True)
    paths, plots, markdown = publish_report(
        Path(results_dir), suffix=suffix, verdict=verdict, per_query=per_query,
        provenance=shown_provenance(provenance, snapshot, store, question_set, sweep, run_id),
        latency=_latency(per_variant), missing_variants=[k for k in sweep.keys if k not in variant_metrics],
        baseline=sweep.baseline, questions=question_set.questions, plot_cache=state / "plot_cache", warn=warn)
    if record_history:  # only once the results are published: a failed write records nothing
        record_verdict(verdict, connection_string, run_id=run_id, per_variant=per_variant)
    return RunReport(output=report_output(verdict, paths, plots, question_set.limited),
                     metadata=report_metadata(verdict, sweep.baseline, paths, plots, markdown),
                     report_path=paths["report"], verdict=verdict)


def _latency(per_variant: Mapping[str, pd.DataFrame]) -> dict[str, Any]:
    from eval_pipeline.sweep import stage_latency_summary

    return {k: stage_latency_summary(f) for k, f in per_variant.items()}


def run_provenance(per_variant: Mapping[str, pd.DataFrame], snapshot: CorpusSnapshot, store: StoreInfo,
                   question_set: QuestionSet) -> dict[str, Any]:
    """The provenance the run is judged and recorded with (the benchmark's identity, the
    treatment, and each variant's configuration as recorded in its partition's results)."""
    from eval_pipeline.history import labels_fingerprint
    from eval_pipeline.verdict import code_version, results_provenance

    return {
        "corpus_signature": store.corpus_signature,  # what the table was built from (checked to agree)
        "question_set_fingerprint": question_set.fingerprint,
        "labels_fingerprint": labels_fingerprint(question_set.questions),
        "embedder": store.embedder,
        "embedder_revision": store.embedder_revision,
        "chunking": asdict(store.chunking),
        "code_version": code_version(),
        # as recorded in each partition's results, not as the variants file says now
        **results_provenance(per_variant, table=store.table, questions_fingerprint=question_set.fingerprint),
    }


def shown_provenance(provenance: Mapping[str, Any], snapshot: CorpusSnapshot, store: StoreInfo,
                     question_set: QuestionSet, sweep, run_id: str) -> dict[str, str]:
    """The report's Provenance section, one readable line per item."""
    limited = (f", limited to {len(question_set.questions)} of {question_set.limited_from}"
               if question_set.limited else "")
    chunking = store.chunking
    return {
        "corpus": f"{snapshot.source} ({len(snapshot.documents)} documents, {len(snapshot.skipped)} skipped, "
                  f"signature {snapshot.signature})",
        "question set": f"{question_set.path} (fingerprint {question_set.fingerprint}{limited})",
        "embedder": f"{store.embedder} ({provenance['embedder_revision']})",
        "chunking": f"{chunking.split_by} {chunking.split_length}/{chunking.split_overlap}, {store.chunk_count} chunks",
        "vector table": store.table,
        "variants file": f"{sweep.source} (baseline {sweep.baseline})",
        "code version": provenance["code_version"],
        "run id": run_id,
    }


def report_output(verdict, paths: Mapping[str, str], plots: Mapping[str, str], limited: bool) -> dict[str, Any]:
    """The report asset's value, which its checks read."""
    return {"paths": {**paths, **plots}, "summary": verdict.summary, "gate_rows": verdict.gate_rows(),
            "gate_passed": verdict.gate_passed, "gate_messages": {v: g.message for v, g in verdict.gates.items()},
            "gate_states": {v: g.state for v, g in verdict.gates.items()},
            "gate_passed_by_variant": {v: g.passed for v, g in verdict.gates.items()},
            "gate_runs": {v: {"previous": (verdict.previous[v] or {}).get("run_id"),
                              "reference": (verdict.reference[v] or {}).get("run_id")} for v in verdict.gates},
            "treatment_changes": {v: list(c.treatment_changes) for v, c in verdict.history.items()},
            "limited": limited}


def report_metadata(verdict, baseline: str, paths: Mapping[str, str], plots: Mapping[str, str],
                    markdown: str) -> dict[str, Any]:
    """The report asset's metadata: the headline, the report with its plots inline (the file
    on disk links them by relative path, which the UI cannot resolve), and the plots alone."""
    from eval_pipeline.report import embedded_images, headline

    return {"headline": headline(verdict, baseline), "report": Markdown(inline_plots(markdown, plots)),
            "plots": Markdown(embedded_images(plots)), "path": Path(paths["report"]),
            "gate_passed": verdict.gate_passed}


def inline_plots(markdown: str, plots: Mapping[str, str]) -> str:
    """`markdown` with each `![name](file.png)` of `plots` (name -> path) replaced by the
    image as a data URI."""
    import base64

    for name, path in plots.items():
        uri = f"data:image/png;base64,{base64.b64encode(Path(path).read_bytes()).decode()}"
        markdown = markdown.replace(f"![{name}]({Path(path).name})", f"![{name}]({uri})")
    return markdown


# -- the regression gate -----------------------------------------------------------------------

def gate_check_names(keys: Sequence[str]) -> dict[str, str]:
    """variant key -> a valid check name (`gate__hybrid_mmr`), unique even when two keys differ
    only by characters an identifier cannot hold."""
    names: dict[str, str] = {}
    for key in keys:
        name = "gate__" + re.sub(r"[^A-Za-z0-9_]", "_", key)
        while name in names.values():
            name += "_"
        names[key] = name
    return names


GATE_COLUMNS = ["against", "metric", "actual", "baseline", "delta", "tolerance", "passed"]


def variant_gate_checks(report: Mapping[str, Any], keys: Sequence[str]) -> dict[str, tuple[bool, dict[str, Any]]]:
    """key -> (passed, metadata) of each variant's gate: every failing metric against the
    previous run and the pinned reference, the runs compared, and what changed in the
    treatment. A variant not in this run's report passes, marked not evaluated."""
    from eval_pipeline.report import markdown_table

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
            "previous_run": runs.get("previous") or "", "reference_run": runs.get("reference") or "",
            "treatment_changes": ", ".join(report.get("treatment_changes", {}).get(key, [])) or "none",
            "comparisons": Markdown(markdown_table(pd.DataFrame(rows), GATE_COLUMNS)) if rows else Markdown(""),
        }
        for r in failures:
            metadata[f"{r['against']} {r['metric']} delta"] = float(r["delta"])
        passed = report.get("gate_passed_by_variant", {}).get(key, not failures)  # a strict mismatch has no row
        out[key] = (bool(passed), metadata)
    return out
