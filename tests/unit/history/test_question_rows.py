"""The per-question rows a run records: what each frame's values become, whatever their dtypes.

`_question_rows` reads the frames column by column (a warm demo run spent 0.48 of its 0.63
profiled seconds there in `DataFrame.to_dict("records")`); the rows must be the ones a row by row
reading gives, which `_by_records` below keeps as the reference."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from psycopg.types.json import Jsonb

from eval_pipeline.common.formatting import float_or_none
from eval_pipeline.history.runs import QUESTION_METRICS, _doc_ids, _question_rows


def _by_records(run_id: str, per_query: dict[str, pd.DataFrame]) -> list[tuple]:
    """The rows as a reading of each frame's records gives them (the reference)."""
    rows = []
    for variant, frame in per_query.items():
        for r in frame.to_dict("records"):
            miss = r.get("miss_class")
            doc_ids = _doc_ids(r.get("doc_ids"))
            rows.append((run_id, str(variant), str(r["qid"]), bool(r["answerable"]), bool(r["errored"]),
                         *(float_or_none(r.get(m)) for m in QUESTION_METRICS),
                         miss if isinstance(miss, str) else None, None if doc_ids is None else Jsonb(doc_ids)))
    return rows


def _comparable(rows: list[tuple]) -> list[tuple]:
    """Rows with their Jsonb values unwrapped and NaN spelled out (Jsonb has no equality)."""
    def plain(value):
        if isinstance(value, Jsonb):
            return ("jsonb", value.obj)
        if isinstance(value, float) and math.isnan(value):
            return "nan"
        return value
    return [tuple(plain(v) for v in row) for row in rows]


def _frames() -> dict[str, pd.DataFrame]:
    metrics = list(QUESTION_METRICS)
    full = pd.DataFrame({
        "qid": ["q1", "q2", "q3", "q4"],
        "answerable": [True, False, True, True],
        "errored": np.array([False, False, True, False]),
        **{m: [1.0, float("nan"), 0.5, None] for m in metrics},
        "miss_class": ["never_candidate", None, float("nan"), "lost_in_fusion"],
        "doc_ids": [["d1", "d2"], None, float("nan"), [3, "d4"]],
        "other": [{"x": 1}, None, "text", 2.5],
    })
    numbered = pd.DataFrame({  # integer qids, numpy bools, one metric column only, no miss_class or doc_ids
        "qid": np.array([7, 8], dtype="int64"),
        "answerable": np.array([1, 0]),
        "errored": pd.array([False, True], dtype="boolean"),
        metrics[0]: np.array([1, 0], dtype="int64"),
    })
    arrow = pd.DataFrame({  # arrow-backed strings, as frames read back from Parquet are
        "qid": pd.array(["a", "b"], dtype="string[pyarrow]"),
        "answerable": [True, True],
        "errored": [False, False],
        **{m: pd.array([0.25, None], dtype="Float64") for m in metrics},
        "miss_class": pd.array(["ranked_too_low", None], dtype="string[pyarrow]"),
        "doc_ids": [np.array(["d1"], dtype=object), []],
    })
    return {"full": full, "numbered": numbered, "arrow": arrow, "empty": full.iloc[0:0]}


def test_the_rows_are_those_a_record_by_record_reading_gives():
    frames = _frames()
    assert _comparable(_question_rows("r1", frames)) == _comparable(_by_records("r1", frames))


def test_the_values_are_python_values():
    rows = _question_rows("r1", _frames())
    numbered = [row for row in rows if row[1] == "numbered"]
    assert [row[2] for row in numbered] == ["7", "8"]
    assert [row[3:5] for row in numbered] == [(True, False), (False, True)]
    assert all(type(v) is bool for row in rows for v in row[3:5])
    metric_values = [v for row in rows for v in row[5:5 + len(QUESTION_METRICS)]]
    assert all(v is None or type(v) is float for v in metric_values)
    full = {row[2]: row for row in rows if row[1] == "full"}
    assert full["q4"][-1].obj == ["3", "d4"] and full["q2"][-1] is None and full["q3"][-1] is None
    assert full["q3"][-2] is None and full["q4"][-2] == "lost_in_fusion"


def test_a_string_of_document_ids_is_refused_as_before():
    frame = pd.DataFrame({"qid": ["q1"], "answerable": [True], "errored": [False], "doc_ids": ["d1,d2"]})
    with pytest.raises(ValueError, match="doc_ids must be a list of document ids"):
        _question_rows("r1", {"v": frame})
