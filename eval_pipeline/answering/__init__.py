"""Answers, between the ranking and the judging: the numbered context an answer is written
from, its citations, and the generators. `extractive.ExtractiveGenerator` is the offline
baseline: no model, the retrieved sentences closest to the question. (The answer-quality
assets that use them are not wired yet: see the README's Layout.)
"""
