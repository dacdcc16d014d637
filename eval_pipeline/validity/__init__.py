"""Measurement validity: the question-set audit, judged coverage (Judged@k), statistical power,
flips between runs and the LLM-graded holes in the golds. Pure functions; the report renders them.
"""
