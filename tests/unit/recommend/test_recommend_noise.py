"""The recommendation is never decided by noise (issue #28, item 9): pairs whose results are
identical (a bm25 variant on two indexes of one chunking) are one candidate, and a latency
difference inside the p95's measured interval never breaks a tie; the headline says when the
choice is a tie. `pair_evidence` measures both from the per-question frames."""

from __future__ import annotations

import pandas as pd

from eval_pipeline.recommend import BYTES_PER_MB, headline, recommend
from eval_pipeline.reporting.indexes import pair_evidence

NAN = float("nan")


def frame(*rows) -> pd.DataFrame:
    """Rows of (index, variant, quality, p95, p95_low, p95_high, storage_mb, digest)."""
    return pd.DataFrame([{"index": i, "variant": v, "quality": q, "quality_low": q - 0.05, "quality_high": q + 0.05,
                          "p95_ms": p, "p95_low": lo, "p95_high": hi, "storage_bytes": s * BYTES_PER_MB,
                          "results_digest": d} for i, v, q, p, lo, hi, s, d in rows])


def test_identical_results_are_one_candidate_and_latency_never_splits_them():
    # the case: bm25 on two indexes, identical results; the sre pair was faster by noise
    rec = recommend(frame(("minilm-w150-o20", "bm25", 0.740, 10.9, 9.0, 12.0, 12, "same"),
                          ("sre-w150-o20", "bm25", 0.740, 7.3, 6.0, 11.5, 12, "same"),
                          ("minilm-w150-o20", "dense", 0.600, 5.0, 4.0, 6.0, 12, "other")), metric="nDCG@10")
    pick = rec.best_overall
    assert pick.pair == ("minilm-w150-o20", "bm25")  # key order, not the noisy p95
    assert pick.identical == ("sre-w150-o20 × bm25",)
    assert "identical results to sre-w150-o20 × bm25: one candidate" in pick.reason
    assert "lower p95" not in pick.reason
    assert "identical results to sre-w150-o20 × bm25" in headline(rec)


def test_a_latency_gap_inside_the_noise_is_a_tie_and_the_headline_says_so():
    rec = recommend(frame(("a", "slow", 0.7, 12.0, 8.0, 16.0, 100, "x"),
                          ("b", "fast", 0.7, 9.0, 6.0, 13.0, 100, "y")), metric="nDCG@10")
    assert rec.best_overall.pair == ("a", "slow")  # key order: the p95 intervals overlap
    assert "p95 9.0 ms against 12.0 ms is within its measured noise" in rec.best_overall.reason
    assert rec.best_overall.tied_with == ("b × fast",)
    assert "a tie with b × fast" in headline(rec)


def test_a_latency_gap_beyond_the_noise_decides():
    rec = recommend(frame(("a", "slow", 0.7, 30.0, 25.0, 35.0, 100, "x"),
                          ("b", "fast", 0.7, 9.0, 6.0, 13.0, 100, "y")))
    assert rec.best_overall.pair == ("b", "fast")
    assert "chosen by lower p95 (9.0 ms against 30.0 ms, beyond its measured noise)" in rec.best_overall.reason
    assert "a tie" not in headline(rec)


def test_without_intervals_or_digests_the_order_is_as_before():
    rec = recommend(frame(("a", "slow", 0.7, 30.0, NAN, NAN, 100, None), ("b", "fast", 0.7, 10.0, NAN, NAN, 900, None)))
    assert rec.best_overall.pair == ("b", "fast")
    assert rec.best_overall.identical == ()


def test_pair_evidence_measures_the_p95_interval_and_the_results_digest():
    latencies = [float(i) for i in range(1, 101)]
    one = pd.DataFrame({"qid": [f"q{i}" for i in range(100)], "doc_ids": [["d1", "d2"]] * 100,
                        "latency_ms": latencies})
    same = one.assign(latency_ms=[v * 0.5 for v in latencies])
    other = one.assign(doc_ids=[["d2", "d1"]] * 100)
    evidence = pair_evidence({"i1/bm25": one, "i2/bm25": same, "i1/dense": other}, seed=0)
    assert evidence["i1/bm25"]["results_digest"] == evidence["i2/bm25"]["results_digest"]
    assert evidence["i1/bm25"]["results_digest"] != evidence["i1/dense"]["results_digest"]
    low, high = evidence["i1/bm25"]["p95_low"], evidence["i1/bm25"]["p95_high"]
    assert 85 <= low <= 95.05 <= high <= 100  # the p95 of 1..100 is 95.05
    # seeded: the same inputs give the same interval
    assert pair_evidence({"i1/bm25": one}, seed=0)["i1/bm25"] == evidence["i1/bm25"]
    # no latency or no ranked ids: nothing measured, never a guess
    bare = pair_evidence({"k": one.drop(columns=["latency_ms", "doc_ids"])})["k"]
    assert bare["results_digest"] is None and pd.isna(bare["p95_low"])
