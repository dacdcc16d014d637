"""Stage 5, the variant_metrics asset and the verdict asset: metrics, scoring, statistics, the
gates, the run history, the identities (benchmark, configuration, engine) and the paired
comparison. Entries: `partitions.score_partitions`, `run_verdict.decide_run`.
"""
