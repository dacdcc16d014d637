"""The gates: pure comparisons of a run's numbers against a yardstick's, under tolerances
(`retrieval` for the ranking metrics, `answers` for pass rate and mean score). What the
yardstick is, and whether one exists, is the verdict's question, not theirs.
"""
