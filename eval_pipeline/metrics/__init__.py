"""Retrieval metrics, a leaf below every stage: one pure function per measure (hit, recall,
precision, MRR, nDCG, ...) and the bootstrap statistics over per-question scores. Ranking's
fusion tuning and the scoring stage both measure with it.
"""
