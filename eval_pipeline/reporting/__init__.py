"""Stage 6, the report asset: renders what the verdict asset decided (the markdown report, plots,
TREC files), publishes the results folder whole, records the run, and shapes the per-variant
gate checks. Entry: `run.render_run`.
"""
