"""Stage 4, the ranked_results asset: variants, engines, the indexed keyword retriever,
rerankers, the sweep, miss diagnosis, the caches and batch planning.
Entries: `steps.plan_ranking_batches`, `steps.rank_batch`, `steps.merge_ranked_batches`.
"""
