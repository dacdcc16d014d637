"""Stage 5, the variant_metrics asset and the verdict: metrics, scoring, statistics, the gate,
the run history and the verdict. Entries: `partitions.score_partitions`, `verdict.judge_run`.
"""
