"""The report asset shows the microscope: misses.jsonl as a path and the misses per triage label
(and dense cause) as numbers the UI plots over runs, with the per-variant counts beside them
(issue #26)."""

from pathlib import Path

import pandas as pd

from eval_pipeline.ranking.microscope import TRIAGE_LABELS
from eval_pipeline.reporting.run import microscope_metadata


def test_misses_file_and_counts_per_label():
    per_variant = {
        "bm25": pd.DataFrame({"triage": ["never_candidate", None, "outranked_in_pool"],
                              "dense_cause": [None, None, None]}),
        "pg-dense": pd.DataFrame({"triage": ["never_candidate", "never_candidate", None],
                                  "dense_cause": ["embedding", "crowding", None]}),
    }
    meta = microscope_metadata(per_variant, {"misses": "/r/misses.jsonl", "report": "/r/results.md"})
    assert meta["misses"] == Path("/r/misses.jsonl")
    assert meta["misses never_candidate"] == 3 and meta["misses outranked_in_pool"] == 1
    assert all(isinstance(meta[f"misses {label}"], int) for label in TRIAGE_LABELS)
    assert meta["misses lost_in_fusion"] == 0
    assert meta["dense misses crowding"] == 1 and meta["dense misses embedding"] == 1
    assert meta["misses by variant"]["pg-dense"]["never_candidate"] == 2


def test_results_without_microscope_columns_count_zero():
    meta = microscope_metadata({"old": pd.DataFrame({"qid": ["q1"]})}, {"misses": "m.jsonl"})
    assert meta["misses never_candidate"] == 0 and meta["misses"] == Path("m.jsonl")
