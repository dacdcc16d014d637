"""Stage 6, the report asset: the markdown report, plots, TREC files, publishing the results
folder whole, and the per-variant gate checks. Entry: `run.assemble_run`.
"""
