"""The variants file as typed, checked settings: variants, indexes, gates, answers, budgets, audit.
Entry: `sweep.load_sweep`.
"""
