"""Runs the graph in process on a variants file with `indexes:` and prints what happened as JSON.

The variants file is read when `assets` is imported, so a test that needs another file runs
this in a child process: `python -m tests.integration.index_sweep_driver STATE RESULTS [PAIR]`
with EVAL_PIPELINE_VARIANTS set. It materializes the whole sweep in one run, then, given PAIR,
`ranked_results` and `variant_metrics` for that one (index, variant) pair alone.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def main(state: str, results: str, pair: str | None = None) -> dict:
    from dagster import DagsterInstance, materialize

    import definitions
    from definitions import SWEEP
    from resources import DatabaseResource, EmbedderResource, LLMResource, RerankerResource, StateResource
    from resources.io import RunScopedPickleIOManager, VariantParquetIOManager

    state_resource = StateResource(path=state)
    resources = {
        "io_manager": RunScopedPickleIOManager(base_dir=str(Path(state) / "assets")),
        "state": state_resource,
        "database": DatabaseResource(kind="embedded", state=state_resource),
        "embedder": EmbedderResource(),
        "llm": LLMResource(),
        "judge_llm": LLMResource(),
        "rerankers": RerankerResource(llm=LLMResource()),
        "variant_io_manager": VariantParquetIOManager(base_dir=str(Path(state) / "variants")),
    }
    config = {"ops": {
        "corpus_snapshot": {"config": {"source": "jsonl", "path": str(FIXTURES / "tiny_corpus.jsonl")}},
        "question_set": {"config": {"path": str(FIXTURES / "tiny_questions.jsonl")}},
        "golden_prompts": {"config": {"source": "file", "path": str(FIXTURES / "tiny_golden.jsonl")}},
        "report": {"config": {"results_dir": results}},
    }}
    everything = [*definitions.ALL_ASSETS, definitions.assets.no_errored_questions, definitions.GRAPH.checks["regression_gate"],
                  definitions.GRAPH.checks["answer_gate"]]
    instance = DagsterInstance.ephemeral()
    whole = materialize(everything, resources=resources, run_config=config, instance=instance,
                        tags=dict(definitions.WHOLE_SWEEP), raise_on_error=False)
    out: dict = {"keys": SWEEP.keys, "success": whole.success}
    if not whole.success:
        out["errors"] = [str(e.event_specific_data.error.message)[:2000] for e in whole.all_events
                         if e.is_step_failure]
        return out
    stores = whole.output_for_node("pgvector_store")
    out["indexes"] = {key: {"table": info.table, "reused": info.reused, "chunks": info.chunk_count,
                            "build_seconds": info.build_seconds, "storage_bytes": stores.storage_bytes.get(info.table)}
                      for key, info in stores.tables.items()}
    (ranked,) = whole.asset_materializations_for_node("ranked_results")[:1] or [None]
    meta = {m.partition: m.metadata for m in whole.asset_materializations_for_node("ranked_results")}
    out["ranked_metadata"] = {"shared_across_indexes": _value(next(iter(meta.values())).get("shared_across_indexes"))}
    out["ranked_partitions"] = sorted(str(m.partition) for m in whole.asset_materializations_for_node("ranked_results"))
    out["answer_partitions"] = sorted(str(k) for k in whole.output_for_node("answers"))
    out["checks"] = sorted([c.check_name, c.passed] for c in whole.get_asset_check_evaluations())
    report = whole.output_for_node("report")
    out["summary_variants"] = list(report["summary"]["variant"])
    out["recommendation"] = report.get("recommendation")
    out["n_questions"] = dict(zip(report["summary"]["variant"], report["summary"]["n_questions"].astype(int)))
    qs = whole.output_for_node("question_set")
    out["split"] = qs.split
    out["tuning_qids"] = sorted(q.qid for q in qs.tuning)
    out["scored_qids"] = sorted(q.qid for q in qs.questions)
    ranked = whole.output_for_node("ranked_results")
    out["ranked_qids"] = {k: sorted(f["qid"]) for k, f in ranked.items()}
    out["variant_configs"] = {k: json.loads(f["variant_config"].iloc[0]) for k, f in ranked.items()}
    if pair:
        stored = Path(state) / "variants" / "ranked_results"
        before = {str(p.relative_to(stored)) for p in stored.glob("**/*.parquet")}
        single = materialize(everything, selection="ranked_results", resources=resources, instance=instance,
                             partition_key=pair, raise_on_error=False)
        after = {str(p.relative_to(stored)) for p in stored.glob("**/*.parquet")}
        out["single"] = {"success": single.success, "new_files": sorted(after - before),
                         "partitions": sorted(str(m.partition) for m in
                                              single.asset_materializations_for_node("ranked_results"))}
    return out


def _value(entry):
    return None if entry is None else getattr(entry, "value", entry)


if __name__ == "__main__":
    print("INDEX-SWEEP-RESULT " + json.dumps(main(*sys.argv[1:]), default=str))
