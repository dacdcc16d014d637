"""Stage 5, the variant_metrics asset: a variant's ranked results scored against the questions'
golds, per question and summarized with confidence intervals. Entry: `partitions.score_partitions`.
"""
