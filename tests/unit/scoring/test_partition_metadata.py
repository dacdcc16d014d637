"""A partition's metadata as the UI shows it (issue #28, item 5): numbers rounded to 4 decimals,
and every figure (each stage's latency, each triage label's misses) its own number the asset
page plots over runs, never a JSON blob."""

import pandas as pd

from eval_pipeline.questions.sets import Question
from eval_pipeline.ranking.results import RESULT_COLUMNS, STAGE_COLUMNS
from eval_pipeline.scoring.partitions import partition_metrics
from eval_pipeline.scoring.variant import score_variant


def test_numbers_are_rounded_and_nothing_is_a_blob():
    questions = [Question("q1", "a?", ("d1",)), Question("q2", "b?", ("d2",)), Question("q3", "c?", ())]
    rows = []
    for qid, docs, ms in (("q1", ["d1", "d3"], 10.123456), ("q2", ["d3", "d2"], 20.987654), ("q3", [], 5.0)):
        row = dict.fromkeys(RESULT_COLUMNS)
        row.update(variant="v", qid=qid, doc_ids=docs, chunk_ids=[d + ":0" for d in docs], scores=[0.9, 0.8][:len(docs)],
                   latency_ms=ms, abstained=False, **{c: ms / 2 for c in STAGE_COLUMNS})
        rows.append(row)
    metadata = partition_metrics("v", score_variant(pd.DataFrame(rows), questions))
    table = metadata.pop("table")
    assert table.row_count == 3
    assert metadata["mrr"] == 0.75 and metadata["ndcg@10"] == 0.8155  # 0.8154648767857288
    assert metadata["latency p50 ms"] == 10.1235 and metadata["latency total p95 ms"] == 19.9012
    assert metadata["latency dense p50 ms"] == 5.0617
    assert metadata["misses never_candidate"] == 0 and "dense misses crowding" in metadata
    assert all(isinstance(v, (int, float)) or v is None for v in metadata.values())
    assert all(v is None or round(v, 4) == v for v in metadata.values())
