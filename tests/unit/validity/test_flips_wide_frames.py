"""`outcomes_from_frame` reads only the columns an outcome is made of (answerable, the hit column,
errored, doc_ids, miss_class): a scored frame has forty more (rankings, scores, latencies,
provenance), and turning every one of them into records was most of the report's flips section
in a warm run. A wide frame gives what its narrow part gives."""

from __future__ import annotations

import pandas as pd

from eval_pipeline.validity.flips import outcomes_from_frame
from tests.unit.validity.test_flips import _scored


def wide(frame: pd.DataFrame) -> pd.DataFrame:
    extra = {f"extra_{i}": [[f"x{i}", i], "text", None, {"k": i}] for i in range(30)}
    return frame.assign(**{name: values[:len(frame)] for name, values in extra.items()})


def test_a_wide_scored_frame_gives_the_outcomes_of_its_narrow_part():
    assert outcomes_from_frame(wide(_scored()), k=10) == outcomes_from_frame(_scored(), k=10)
    assert outcomes_from_frame(wide(_scored()), k=5, variant="v") == outcomes_from_frame(_scored(), k=5, variant="v")


def test_a_wide_history_frame_recomputed_from_doc_ids_gives_the_same_outcomes():
    history = _scored().drop(columns=["hit@5"])
    history.at[1, "doc_ids"] = ["g2"]
    qrels = {"q1": {"g1": 1}, "q2": {"g2": 1}, "q3": {}, "q4": {"g4": 1}}
    assert outcomes_from_frame(wide(history), k=1, qrels=qrels) == outcomes_from_frame(history, k=1, qrels=qrels)
    without_optional = history.drop(columns=["errored", "miss_class"])
    assert outcomes_from_frame(wide(without_optional), k=1, qrels=qrels) == \
        outcomes_from_frame(without_optional, k=1, qrels=qrels)
