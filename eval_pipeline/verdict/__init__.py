"""Stage 6, the verdict asset: did this run make retrieval or answers better or worse? It finds
the yardstick (history, or a paired re-ranking of the pinned configuration on today's questions),
applies the gates, and fails closed when nothing is comparable. Entry: `run.decide_run`.
"""
