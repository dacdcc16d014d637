"""Retrieval metrics, a leaf below every stage: one pure function per measure (hit, recall,
precision, MRR, nDCG, ...), the measure registry (`retrieval.MEASURES`: name, function, cutoff,
rules; every list of metric names in the library is derived from it) and the bootstrap
statistics over per-question scores. Ranking's fusion tuning and the scoring stage both measure
with it.
"""
