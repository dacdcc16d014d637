"""The sweep's wall time on the demo corpus, by variant, against running each variant on its own.

One Sweep over every variant of variants.yaml shares query embeddings, leg queries and
first-stage pools; "separate" builds a fresh Sweep (and embeds the questions again) per
variant, as separate runs would.  Printed as seconds and ratios measured in one run.

    .venv/bin/python bench/sweep_vs_separate.py [--state-dir /tmp/bench-sweep]
"""

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from eval_pipeline.corpus.sources import load_corpus  # noqa: E402
from eval_pipeline.config.sweep import load_sweep
from eval_pipeline.questions.sets import load_question_set  # noqa: E402
from eval_pipeline.ranking.rerankers import make_reranker  # noqa: E402
from eval_pipeline.ranking.sweep import Sweep
from eval_pipeline.store.database import EmbeddedPostgres  # noqa: E402
from eval_pipeline.store.embedders import LocalEmbedder  # noqa: E402
from eval_pipeline.store.ingest import ChunkingConfig, ingest  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--state-dir", default="/tmp/bench-sweep")
    parser.add_argument("--keep-db", action="store_true", help="leave the embedded Postgres running at exit")
    args = parser.parse_args()
    try:
        run(args)
    finally:
        if not args.keep_db:
            EmbeddedPostgres(args.state_dir).stop()


def run(args) -> None:
    snapshot = load_corpus("demo")
    questions = load_question_set(REPO / "eval_pipeline/demo_data/questions.jsonl", corpus_signature=snapshot.signature,
                                  doc_ids=[d.doc_id for d in snapshot.documents]).questions
    sweep_config = load_sweep(REPO / "variants.yaml")
    uri = EmbeddedPostgres(args.state_dir).uri("eval")
    embedder = LocalEmbedder()
    embedder.warm_up()
    store = ingest(snapshot, connection_string=uri, embedder=embedder, chunking=ChunkingConfig(), log=lambda m: None)

    def rerankers(variants):
        return {v.key: make_reranker(v.reranker.kind, **v.reranker.options) for v in variants if v.reranker.kind != "none"}

    def new_sweep(variants):
        started = time.perf_counter()
        vectors = embedder.embed([q.question for q in questions])
        embed_s = time.perf_counter() - started
        sweep = Sweep(snapshot=snapshot, connection_string=uri, table=store.table,
                      query_embeddings={q.qid: v for q, v in zip(questions, vectors)},
                      embed_ms_per_query=embed_s * 1000 / len(questions), rerankers=rerankers(variants))
        return sweep, embed_s

    # warm the database and bm25 code paths once, so neither side pays first-use costs
    warm, _ = new_sweep(sweep_config.variants)
    warm.run(sweep_config.variants[:1], questions[:5])

    started = time.perf_counter()
    together, embed_s = new_sweep(sweep_config.variants)
    per_variant_together = {}
    for v in sweep_config.variants:
        t = time.perf_counter()
        together.run_variant(v, questions)
        per_variant_together[v.key] = time.perf_counter() - t
    total_together = time.perf_counter() - started

    per_variant_separate = {}
    started = time.perf_counter()
    for v in sweep_config.variants:
        t = time.perf_counter()
        alone, _ = new_sweep([v])
        alone.run_variant(v, questions)
        per_variant_separate[v.key] = time.perf_counter() - t
    total_separate = time.perf_counter() - started

    print(f"demo corpus: {len(snapshot.documents)} documents, {store.chunk_count} chunks, {len(questions)} questions")
    print(f"{'variant':<14} {'in the sweep s':>15} {'alone s':>9}")
    for key in per_variant_together:
        print(f"{key:<14} {per_variant_together[key]:>15.2f} {per_variant_separate[key]:>9.2f}")
    print(f"{'total':<14} {total_together:>15.2f} {total_separate:>9.2f}   (sweep includes one query embedding: "
          f"{embed_s:.2f} s)")
    print(f"sweep / separate = {total_together / total_separate:.2f}")
    print(f"leg queries in the sweep: {together.queries_by_stage}")


if __name__ == "__main__":
    main()
