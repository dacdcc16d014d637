"""A variant's fusion defaults, one home for each (issue #24): the ranking's fusion
(`engines.fuse`), a variant (`variants.Variant`, the variants file's checks) and fusion tuning
(`fusion_tuning`) all take them from here."""

from __future__ import annotations

__all__ = ["DEPTH", "RRF_K", "RRF_K_RANGE"]

# Reciprocal rank fusion's k when a variant names none: 61, the k Haystack's DocumentJoiner
# fixes (a parity test holds engines.fuse and the DocumentJoiner together at it).
RRF_K = 61
RRF_K_RANGE = (1, 10_000)  # what a variants file accepts for rrf_k (inclusive)
DEPTH = 20  # documents a variant returns when it names no depth
