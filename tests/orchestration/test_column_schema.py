"""A DataFrame partition's column schema in the UI (issue #28, item 10): every column with a
reader's type (`list[string]`, `json`, `string`, not pandas' `object`) and a description, from
the one registry (assets/columns.py)."""

import pandas as pd
import pytest
from dagster import TableSchema

from assets.columns import COLUMNS, describe
from assets.metadata import to_metadata
from eval_pipeline.common.metadata import frame_metadata


def _library_columns() -> dict[str, list[str]]:
    """The columns of the frames whose partitions carry a schema, as the library names them."""
    from eval_pipeline.grading.summary import METRIC_COLUMNS
    from eval_pipeline.metrics.retrieval import score_queries
    from eval_pipeline.ranking.results import PROVENANCE_COLUMNS, RESULT_COLUMNS
    from eval_pipeline.scoring.variant import UNREFUSED_METRICS, WITHOUT_REFUSAL

    diagnosis = ["miss_class", "triage", "dense_cause", "microscope", "index", "tuning_fingerprint"]
    scored = list(score_queries({"q": ["d"]}, {"q": {"d": 1}}).columns)
    return {"ranked_results": [*RESULT_COLUMNS, *PROVENANCE_COLUMNS, *diagnosis],
            "variant_metrics": [*scored, *(m + WITHOUT_REFUSAL for m in UNREFUSED_METRICS), "question", "gold", "form",
                                "hard_class", *RESULT_COLUMNS, *PROVENANCE_COLUMNS, *diagnosis],
            "answer_metrics": list(METRIC_COLUMNS)}


@pytest.mark.parametrize("asset", ["ranked_results", "variant_metrics", "answer_metrics"])
def test_every_column_of_the_library_s_frames_is_described(asset):
    missing = [c for c in _library_columns()[asset] if describe(c) is None]
    assert not missing, f"{asset}: add {missing} to assets/columns.py"


def test_the_schema_says_what_pandas_calls_object():
    frame = pd.DataFrame({"qid": ["q1"], "doc_ids": [["a", "b"]], "scores": [[0.5, 0.25]], "error": [None],
                          "microscope": [None], "hit@5": [1.0], "ndcg@10 without refusal": [0.5], "ms_rerank": [3.0],
                          "first_relevant_rank": [1]}).astype({"qid": object, "error": object})
    schema = to_metadata({"table": frame_metadata(frame)})["dagster/column_schema"]
    assert isinstance(schema, TableSchema)
    columns = {c.name: (c.type, c.description) for c in schema.columns}
    assert {name: t for name, (t, _) in columns.items()} == {
        "qid": "string", "doc_ids": "list[string]", "scores": "list[float]", "error": "string", "microscope": "json",
        "hit@5": "float", "ndcg@10 without refusal": "float", "ms_rerank": "float", "first_relevant_rank": "int"}
    assert all(d for _, d in columns.values()), columns
    assert "top 5" in columns["hit@5"][1]
    assert columns["ndcg@10 without refusal"][1].startswith("ndcg@10 of the list")
    assert "rerank" in columns["ms_rerank"][1]


def test_a_column_nobody_described_keeps_its_dtype():
    frame = pd.DataFrame({"something_new": [1.5]})
    (column,) = to_metadata({"table": frame_metadata(frame)})["dagster/column_schema"].columns
    assert (column.name, column.type, column.description) == ("something_new", "float64", None)


def test_the_registry_names_no_pandas_dtype():
    assert not [n for n, c in COLUMNS.items() if c.type in ("object", "str", "float64", "int64")]
    assert all(c.description for c in COLUMNS.values())
